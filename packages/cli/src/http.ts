import http from 'node:http';
import https from 'node:https';

/** What an HTTP exchange yields, whatever the status. */
export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

export interface RawRequest {
  method: string;
  headers: Record<string, string>;
  body?: string;
  timeoutMs: number;
}

/** Sends one HTTP request; rejects on network failure or timeout. Injectable for tests. */
export type Transport = (url: URL, request: RawRequest) => Promise<RawResponse>;

/** Raised when no answer arrives within the deadline (connect, headers and body together). */
export class TimeoutError extends Error {}

/**
 * node:http rather than fetch: fetch refuses "bad ports" (6000, 6666, …) that an operator may well
 * run the server on, and it follows redirects, which must not happen to a POST carrying the token.
 */
export const nodeTransport: Transport = (url, request) =>
  new Promise((resolve, reject) => {
    const lib = url.protocol === 'https:' ? https : http;
    const req = lib.request(url, { method: request.method, headers: request.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') });
      });
    });
    const timer = setTimeout(() => {
      req.destroy(new TimeoutError(`no answer within ${request.timeoutMs / 1000} s`));
    }, request.timeoutMs);
    req.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    req.end(request.body);
  });
