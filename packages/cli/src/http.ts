import http from 'node:http';
import https from 'node:https';
import { TLSSocket } from 'node:tls';

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

/**
 * Sends one HTTP request; rejects on network failure or timeout, with a TransportError that says
 * whether the request had been sent. Injectable for tests: a transport that rejects with anything
 * else is taken to have sent it (nothing is known, so the request may still take effect).
 */
export type Transport = (url: URL, request: RawRequest) => Promise<RawResponse>;

/** Raised when no answer arrives within the deadline (connect, headers and body together). */
export class TimeoutError extends Error {}

/**
 * Why an exchange failed (`cause`: a TimeoutError, or the socket's error) and whether the request
 * had gone out. `sent`: the whole request was handed to the network, or an answer had begun; from
 * then on the server may have carried it out, so "cannot reach the server" would be false. Before
 * that the server never had a complete request to act on.
 */
export class TransportError extends Error {
  constructor(
    cause: unknown,
    readonly sent: boolean,
  ) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
  }
}

/**
 * node:http rather than fetch: fetch refuses "bad ports" (6000, 6666, …) that an operator may well
 * run the server on, and it follows redirects, which must not happen to a POST carrying the token.
 */
export const nodeTransport: Transport = (url, request) =>
  new Promise((resolve, reject) => {
    const lib = url.protocol === 'https:' ? https : http;
    let sent = false;
    let timer: NodeJS.Timeout | undefined;
    // Every way out clears the deadline: a connection cut mid-answer fails through the answer's
    // 'error', not the request's, and a timer left running would hold the process for the rest of
    // the 30 s after the failure is known. A promise settles once, so later events change nothing.
    const fail = (e: unknown): void => {
      clearTimeout(timer);
      reject(new TransportError(e, sent));
    };
    let req: http.ClientRequest;
    try {
      req = lib.request(url, { method: request.method, headers: request.headers }, onAnswer);
    } catch (e) {
      // Refused before anything went out (a header node:http will not send, say).
      fail(e);
      return;
    }
    function onAnswer(res: http.IncomingMessage): void {
      sent = true;
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', fail);
      res.on('end', () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') });
      });
    }
    // Sent: the whole request written ('finish') and the connection able to carry it, whichever
    // comes last. Over https, Node takes the request (and fires 'finish') before the TLS handshake is
    // done and holds it until then: a handshake that fails (https:// to a plain HTTP port, an
    // untrusted certificate) or never completes means the request never left the machine.
    let written = false;
    let connected = false;
    const onConnected = (): void => {
      connected = true;
      if (written) sent = true;
    };
    req.on('socket', (socket) => {
      // A socket kept alive from an earlier exchange is long connected; a new one is still connecting.
      if (req.reusedSocket) onConnected();
      else socket.once(socket instanceof TLSSocket ? 'secureConnect' : 'connect', onConnected);
    });
    // 'finish': the last byte of the request is with the operating system (or, over TLS, with a
    // connection that may still be shaking hands).
    req.on('finish', () => {
      written = true;
      if (connected) sent = true;
    });
    timer = setTimeout(() => {
      fail(new TimeoutError(`no answer within ${request.timeoutMs / 1000} s`));
      req.destroy();
    }, request.timeoutMs);
    req.on('error', fail);
    req.end(request.body);
  });
