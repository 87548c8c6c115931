import { type ErrorBody, type ErrorCode, ErrorCodes } from '@parlor/protocol';

/**
 * Codes the SDK gives a {@link ParlorApiError} for failures no server answer describes (status 0);
 * the server's codes are the catalogue's (docs/api.md, `ErrorCodes` of the protocol).
 */
export const ClientErrorCode = {
  /** The socket handshake failed without a catalogue code (e.g. the server cannot be reached). */
  ERR_SOCKET_CONNECT: 'ERR_SOCKET_CONNECT',
  /** The socket did not connect, or an event was not acknowledged, in time. */
  ERR_SOCKET_TIMEOUT: 'ERR_SOCKET_TIMEOUT',
  /** The socket disconnected before an event was acknowledged (the server may or may not have acted on it). */
  ERR_SOCKET_DISCONNECTED: 'ERR_SOCKET_DISCONNECTED',
  /** An HTTP request got no answer: the network failed or the server could not be reached (`cause` has the error). */
  ERR_NETWORK: 'ERR_NETWORK',
  /** An HTTP request got no complete answer within the client's `timeoutMs`. */
  ERR_HTTP_TIMEOUT: 'ERR_HTTP_TIMEOUT',
} as const;
export type ClientErrorCode = (typeof ClientErrorCode)[keyof typeof ClientErrorCode];

/** Where a {@link ParlorApiError} came from: an HTTP answer or a socket acknowledgement. */
export type ParlorErrorSource = 'http' | 'socket';

/**
 * A non-2xx answer of the REST API, or an `{ok: false}` socket acknowledgement. `code` is one of
 * the catalogue's `ERR_*` codes (docs/api.md) when the server sent one; `body` is the whole error
 * body (with `errors`, `retry_after` or `ttl` where the server adds them).
 */
export class ParlorApiError extends Error {
  /** HTTP status; for socket acks, the catalogue's status of `code` (0 when the code is unknown). */
  readonly status: number;
  readonly code: ErrorCode | (string & {});
  readonly body: Partial<ErrorBody> & Record<string, unknown>;
  readonly source: ParlorErrorSource;

  constructor(
    status: number,
    code: string,
    message: string,
    body: Record<string, unknown> = {},
    source: ParlorErrorSource = 'http',
    options: { cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ParlorApiError';
    this.status = status;
    this.code = code;
    this.body = body;
    this.source = source;
  }

  /**
   * Seconds the server asks to wait, if any: the body's `retry_after` (429, a timed-out socket
   * handshake), else the answer's `Retry-After` header in whole seconds (503
   * `ERR_SERVICE_UNAVAILABLE` carries it there only).
   */
  get retryAfter(): number | undefined {
    return typeof this.body.retry_after === 'number' ? this.body.retry_after : this.#retryAfterHeader;
  }

  #retryAfterHeader: number | undefined;

  /**
   * Builds the error of an HTTP answer from its status, parsed body (JSON or not) and its
   * `Retry-After` header, if any.
   */
  static fromResponse(status: number, body: unknown, retryAfterHeader?: string | null): ParlorApiError {
    const record = isRecord(body) ? body : {};
    const code = typeof record.code === 'string' ? record.code : `ERR_HTTP_${status}`;
    const message = typeof record.message === 'string' ? record.message : `HTTP ${status}`;
    const error = new ParlorApiError(status, code, message, record, 'http');
    // Whole seconds only (what Parlor sends); an HTTP date is left unread.
    const seconds = retryAfterHeader?.trim();
    if (seconds && /^[0-9]{1,9}$/.test(seconds)) error.#retryAfterHeader = Number(seconds);
    return error;
  }

  /** Builds the error of an `{ok: false, code, message}` socket acknowledgement. */
  static fromAck(ack: unknown, options: { cause?: unknown } = {}): ParlorApiError {
    const record = isRecord(ack) ? ack : {};
    const code = typeof record.code === 'string' ? record.code : 'ERR_INTERNAL';
    const known = (ErrorCodes as Record<string, { status: number; message: string }>)[code];
    const message = typeof record.message === 'string' ? record.message : (known?.message ?? code);
    return new ParlorApiError(known?.status ?? 0, code, message, record, 'socket', options);
  }
}

/**
 * True when `error` is a {@link ParlorApiError} with one of the given codes: the server's
 * (`ErrorCode`, docs/api.md) or the SDK's own for requests without an answer ({@link ClientErrorCode}).
 */
export function isApiError(error: unknown, ...codes: (ErrorCode | ClientErrorCode)[]): error is ParlorApiError {
  return error instanceof ParlorApiError && (codes.length === 0 || (codes as string[]).includes(error.code));
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
