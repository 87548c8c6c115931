import { type ErrorBody, type ErrorCode, ErrorCodes } from '@parlor/protocol';
import { DrizzleQueryError } from 'drizzle-orm';
import type { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import postgres from 'postgres';

/** The one error type services throw; the handler below turns it into the error body. */
export class AppError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message?: string,
    readonly extra: Partial<Pick<ErrorBody, 'errors' | 'retry_after' | 'ttl'>> = {},
  ) {
    super(message ?? ErrorCodes[code].message);
    this.status = ErrorCodes[code].status;
  }

  body(): ErrorBody {
    return { code: this.code, message: this.message, ...this.extra };
  }
}

/** Factory: `appError('ERR_NOT_FOUND')`, `appError('ERR_RATE_LIMITED', undefined, { retry_after: 3 })`. */
export const appError = (code: ErrorCode, message?: string, extra?: AppError['extra']) =>
  new AppError(code, message, extra);

interface AjvLikeError {
  instancePath?: string;
  message?: string;
  keyword?: string;
  params?: Record<string, unknown>;
}

function validationErrors(err: FastifyError): { path: string; message: string }[] {
  const context = (err as { validationContext?: string }).validationContext ?? 'body';
  return ((err.validation ?? []) as AjvLikeError[]).map((v) => {
    let p = `${context}${v.instancePath ?? ''}`;
    if (v.keyword === 'additionalProperties' && typeof v.params?.additionalProperty === 'string') {
      p = `${p}/${v.params.additionalProperty}`;
      return { path: p, message: 'is not a known field' };
    }
    if (v.keyword === 'required' && typeof v.params?.missingProperty === 'string') {
      return { path: `${p}/${v.params.missingProperty}`, message: 'is required' };
    }
    return { path: p, message: v.message ?? 'is not valid' };
  });
}

const FASTIFY_CODES: Record<string, ErrorCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'ERR_PAYLOAD_TOO_LARGE',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'ERR_UNSUPPORTED_MEDIA_TYPE',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'ERR_VALIDATION',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'ERR_INVALID_JSON',
  FST_ERR_CTP_INVALID_JSON_BODY: 'ERR_INVALID_JSON',
  FST_ERR_CTP_INVALID_TYPE: 'ERR_UNSUPPORTED_MEDIA_TYPE',
  // Raised by the router, before any route or hook (app.ts, frameworkErrors).
  FST_ERR_BAD_URL: 'ERR_VALIDATION',
  FST_ERR_MAX_PARAM_LENGTH: 'ERR_VALIDATION',
};

/** What the `errors` list of an ERR_VALIDATION names for a request Fastify itself found invalid. */
const FASTIFY_ISSUES: Record<string, { path: string; message: string }> = {
  FST_ERR_BAD_URL: { path: 'url', message: 'holds a malformed %-escape' },
  FST_ERR_MAX_PARAM_LENGTH: { path: 'params', message: 'is too long' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { path: 'headers/content-length', message: 'does not match the body' },
};

/** A client error of Fastify's or a plugin's (no code of ours) by its status; others are ERR_VALIDATION. */
const CLIENT_STATUS_CODES: Record<number, ErrorCode> = {
  404: 'ERR_NOT_FOUND',
  // The docs page's static files (@fastify/send): a failed If-Match / If-Unmodified-Since, a Range
  // outside the file. Conditional and range requests have statuses of their own (RFC 9110).
  412: 'ERR_PRECONDITION_FAILED',
  413: 'ERR_PAYLOAD_TOO_LARGE',
  415: 'ERR_UNSUPPORTED_MEDIA_TYPE',
  416: 'ERR_RANGE_NOT_SATISFIABLE',
};

/** The answer for catalogue code `code`; ERR_VALIDATION always lists what was wrong (docs/api.md, Errors). */
function fastifyAnswer(code: ErrorCode, fastifyCode: string | undefined): ErrorAnswer {
  const body: ErrorBody = { code, message: ErrorCodes[code].message };
  if (code === 'ERR_VALIDATION')
    body.errors = [(fastifyCode && FASTIFY_ISSUES[fastifyCode]) || { path: 'request', message: 'is not valid' }];
  return { status: ErrorCodes[code].status, body, unexpected: false };
}

/** Seconds a client is asked to wait (`Retry-After`) when a backing store does not answer. */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 5;

/**
 * Socket-level codes (Node's): a store connection that failed, but only when the error comes from a
 * store driver. The same codes come from a client that drops mid-body (ECONNRESET with a 400) or a
 * dead room browser's DevTools pipe (EPIPE), which are no store outage.
 */
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * Codes only a store names: postgres.js's own for a connection, and PostgreSQL's SQLSTATEs for a
 * server shutting down (57P01-57P03) or out of connections (53300); class 08 (connection
 * exceptions) is matched by its prefix.
 */
const STORE_CODES = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  '57P01',
  '57P02',
  '57P03',
  '53300',
]);

/** The plain Errors ioredis rejects a command with when Redis cannot be reached (see below). */
const IOREDIS_MESSAGES = new Set(['Connection is closed.', 'Command timed out']);

type CodedError = Error & { code?: unknown; cause?: unknown; errors?: unknown; statusCode?: unknown };

/**
 * Whether `e` was thrown by a database driver: PostgreSQL's error as postgres.js throws it, any
 * error postgres.js rejects a query with (it attaches `query` and `parameters`), or Drizzle's
 * wrapper of the driver's error (whose cause, and that cause's own causes, are the driver's).
 */
function fromDriver(e: CodedError): boolean {
  return (
    e instanceof postgres.PostgresError ||
    e instanceof DrizzleQueryError ||
    (Object.hasOwn(e, 'query') && Object.hasOwn(e, 'parameters'))
  );
}

/**
 * The connection-level failure behind `err` (itself, a `cause` or an AggregateError member), or
 * null: a store that cannot be reached, as opposed to a failed statement, a client that went away
 * or a bug. A socket code counts only inside a driver's error (see `fromDriver`); an error that
 * carries a 4xx `statusCode` never counts. ioredis reports its own as `MaxRetriesPerRequestError`
 * (commands queued while reconnecting), "Connection is closed." (a client that gave up or was
 * closed) or "Command timed out" (no answer within its `commandTimeout`: a Redis that stalls,
 * state/redis.ts); it never rejects a command with the socket's error.
 */
export function connectionFailure(err: unknown, depth = 0, driver = false): (Error & { code?: unknown }) | null {
  if (typeof err !== 'object' || err === null || depth > 5) return null;
  const e = err as CodedError;
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) return null;
  const inDriver = driver || fromDriver(e);
  const code = typeof e.code === 'string' ? e.code : '';
  if (STORE_CODES.has(code) || /^08[0-9A-Z]{3}$/.test(code)) return e;
  if (inDriver && SOCKET_CODES.has(code)) return e;
  if (e.name === 'MaxRetriesPerRequestError' || IOREDIS_MESSAGES.has(e.message)) return e;
  for (const inner of [e.cause, ...(Array.isArray(e.errors) ? e.errors : [])]) {
    const found = connectionFailure(inner, depth + 1, inDriver);
    if (found) return found;
  }
  return null;
}

export interface ErrorAnswer {
  status: number;
  body: ErrorBody;
  /** A bug or an unknown failure: logged at error with its stack. */
  unexpected: boolean;
  /** A backing store could not be reached: 503, logged at warn. */
  unavailable?: boolean;
}

/**
 * Maps any thrown value to a status and error body. A store that cannot be reached is a 503
 * ERR_SERVICE_UNAVAILABLE; other unknown errors become a bare 500.
 */
export function toErrorBody(err: unknown): ErrorAnswer {
  if (err instanceof AppError) return { status: err.status, body: err.body(), unexpected: false };
  if (connectionFailure(err)) {
    const body: ErrorBody = { code: 'ERR_SERVICE_UNAVAILABLE', message: ErrorCodes.ERR_SERVICE_UNAVAILABLE.message };
    return { status: 503, body, unexpected: false, unavailable: true };
  }
  const fe = err as FastifyError;
  if (fe && Array.isArray(fe.validation)) {
    return {
      status: 400,
      body: { code: 'ERR_VALIDATION', message: ErrorCodes.ERR_VALIDATION.message, errors: validationErrors(fe) },
      unexpected: false,
    };
  }
  const mapped = fe?.code ? FASTIFY_CODES[fe.code] : undefined;
  if (mapped) return fastifyAnswer(mapped, fe.code);
  if (fe instanceof SyntaxError && fe.statusCode === 400) {
    return {
      status: 400,
      body: { code: 'ERR_INVALID_JSON', message: ErrorCodes.ERR_INVALID_JSON.message },
      unexpected: false,
    };
  }
  if (fe && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    // A client error raised by Fastify or a plugin that has no code of ours: keep the status where
    // the catalogue has it, else 400 ERR_VALIDATION.
    return fastifyAnswer(CLIENT_STATUS_CODES[fe.statusCode] ?? 'ERR_VALIDATION', fe.code);
  }
  return { status: 500, body: { code: 'ERR_INTERNAL', message: ErrorCodes.ERR_INTERNAL.message }, unexpected: true };
}

/**
 * Logs a failure that was answered with `answer`: an unexpected one at error with its stack (the
 * logger's serializer keeps query values out), a store that cannot be reached at warn with only
 * the connection error's type, code and message (an outage is many such lines, not many stacks).
 * Refusals (4xx) are the caller's to log.
 */
export function logFailure(log: FastifyBaseLogger, err: unknown, answer: ErrorAnswer, context: object): void {
  if (answer.unexpected) log.error({ err, ...context }, 'unexpected error');
  else if (answer.unavailable) {
    const cause = connectionFailure(err);
    log.warn(
      { store_error: { type: cause?.name, code: cause?.code, message: cause?.message }, ...context },
      'backing store unavailable',
    );
  }
}

/** One handler shapes every failure and logs the request context, never secrets or bodies. */
export function installErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((err: unknown, request: FastifyRequest, reply: FastifyReply) => {
    const answer = toErrorBody(err);
    const { status, body } = answer;
    if (answer.unexpected || answer.unavailable)
      logFailure(request.log, err, answer, { route: request.routeOptions.url });
    else request.log.info({ code: body.code, status }, 'request refused');
    if (body.retry_after !== undefined) void reply.header('retry-after', String(body.retry_after));
    if (answer.unavailable) void reply.header('retry-after', String(UNAVAILABLE_RETRY_AFTER_SECONDS));
    // A Range outside a static file: its size, as RFC 9110 asks of a 416 (@fastify/send puts it on the error).
    const range = (err as { headers?: Record<string, unknown> } | null)?.headers?.['Content-Range'];
    if (status === 416 && typeof range === 'string') void reply.header('content-range', range);
    return reply.status(status).send(body);
  });
}
