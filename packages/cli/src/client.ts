import type { Target } from './config.js';
import { nodeTransport, TimeoutError, type Transport, TransportError } from './http.js';

/** How long one request may take before the CLI gives up (connect, answer and body). */
export const REQUEST_TIMEOUT_MS = 30_000;

/** One call of the server's HTTP API. `path` is relative to the API root, e.g. `v1/admin/bots/create`. */
export interface ApiRequest {
  method: 'GET' | 'POST';
  path: string;
  body?: unknown;
}

/** What the server answered; `body` is the parsed JSON, or undefined when the body is not JSON. */
export interface Answer {
  status: number;
  ok: boolean;
  body: unknown;
  text: string;
  /** The Location header of a redirect, which the CLI reports instead of following. */
  location: string | null;
}

/**
 * No complete answer came: the server could not be reached, the answer did not come in time, or the
 * connection broke off. `sent`: the request had gone out (see TransportError), so the server may
 * have carried it out and it may still take effect; otherwise the server never got it.
 */
export class UnreachableError extends Error {
  constructor(
    message: string,
    readonly sent = false,
  ) {
    super(message);
  }
}

/** Sends one request with the operator token as a Bearer credential. */
export async function send(
  target: Target,
  request: ApiRequest,
  transport: Transport = nodeTransport,
  timeoutMs = REQUEST_TIMEOUT_MS,
): Promise<Answer> {
  const url = new URL(request.path.replace(/^\/+/, ''), target.baseUrl);
  const headers: Record<string, string> = { accept: 'application/json', authorization: `Bearer ${target.token}` };
  const body = request.body === undefined ? undefined : JSON.stringify(request.body);
  if (body !== undefined) headers['content-type'] = 'application/json';
  try {
    const res = await transport(url, { method: request.method, headers, body, timeoutMs });
    const location = res.headers.location;
    return {
      status: res.status,
      ok: res.status >= 200 && res.status < 300,
      body: parseJson(res.text),
      text: res.text,
      location: typeof location === 'string' ? location : null,
    };
  } catch (e) {
    // A transport that does not say (a test's fake) is taken to have sent it: warning of a possible
    // effect is safe, "the server never got it" may not be.
    if (e instanceof TransportError) throw new UnreachableError(reason(e.cause), e.sent);
    throw new UnreachableError(reason(e), true);
  }
}

function parseJson(text: string): unknown {
  if (text === '') return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const REASONS: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host name lookup failed',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
};

/** A short reason: "connection refused (ECONNREFUSED)", "no answer within 30 s", a TLS message, … */
function reason(e: unknown): string {
  if (e instanceof TimeoutError) return e.message;
  const code = errorCode(e) ?? (e instanceof AggregateError ? errorCode(e.errors[0]) : undefined);
  if (code) return REASONS[code] ? `${REASONS[code]} (${code})` : code;
  return e instanceof Error ? e.message : String(e);
}

function errorCode(e: unknown): string | undefined {
  return e instanceof Error && 'code' in e && typeof e.code === 'string' ? e.code : undefined;
}
