import { type ErrorBody, type ErrorCode, ErrorCodes } from '@parlor/protocol';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

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
};

/** Maps any thrown value to a status and error body. Unknown errors become a bare 500. */
export function toErrorBody(err: unknown): { status: number; body: ErrorBody; unexpected: boolean } {
  if (err instanceof AppError) return { status: err.status, body: err.body(), unexpected: false };
  const fe = err as FastifyError;
  if (fe && Array.isArray(fe.validation)) {
    return {
      status: 400,
      body: { code: 'ERR_VALIDATION', message: ErrorCodes.ERR_VALIDATION.message, errors: validationErrors(fe) },
      unexpected: false,
    };
  }
  const mapped = fe?.code ? FASTIFY_CODES[fe.code] : undefined;
  if (mapped)
    return {
      status: ErrorCodes[mapped].status,
      body: { code: mapped, message: ErrorCodes[mapped].message },
      unexpected: false,
    };
  if (fe instanceof SyntaxError && fe.statusCode === 400) {
    return {
      status: 400,
      body: { code: 'ERR_INVALID_JSON', message: ErrorCodes.ERR_INVALID_JSON.message },
      unexpected: false,
    };
  }
  if (fe && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    // A client error raised by Fastify or a plugin that has no code of ours: keep the status.
    const code: ErrorCode =
      fe.statusCode === 404
        ? 'ERR_NOT_FOUND'
        : fe.statusCode === 413
          ? 'ERR_PAYLOAD_TOO_LARGE'
          : fe.statusCode === 415
            ? 'ERR_UNSUPPORTED_MEDIA_TYPE'
            : 'ERR_VALIDATION';
    return { status: ErrorCodes[code].status, body: { code, message: ErrorCodes[code].message }, unexpected: false };
  }
  return { status: 500, body: { code: 'ERR_INTERNAL', message: ErrorCodes.ERR_INTERNAL.message }, unexpected: true };
}

/** One handler shapes every failure and logs the request context, never secrets or bodies. */
export function installErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((err: unknown, request: FastifyRequest, reply: FastifyReply) => {
    const { status, body, unexpected } = toErrorBody(err);
    if (unexpected) request.log.error({ err, route: request.routeOptions.url }, 'unexpected error');
    else request.log.info({ code: body.code, status }, 'request refused');
    if (body.retry_after !== undefined) void reply.header('retry-after', String(body.retry_after));
    return reply.status(status).send(body);
  });
}
