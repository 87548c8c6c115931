import { type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import { type DestinationStream, type Logger, pino } from 'pino';

/**
 * Fields of library errors that carry the values of a failed statement or command: Drizzle's
 * `params`, postgres.js's `parameters`/`args`/`types`, PGlite's `params`/`queryOptions`, and
 * PostgreSQL's `detail` ("Key (token_hash)=(…) already exists"). Message ciphertext, addresses,
 * token hashes and login codes travel in them, so they never reach a log line.
 */
const VALUE_FIELDS = new Set(['params', 'parameters', 'args', 'types', 'detail', 'queryOptions', 'internalQuery']);

/** How deep `cause` chains and aggregated errors are followed. */
const MAX_DEPTH = 5;

export interface SerializedError {
  type: string;
  message: string;
  stack?: string;
  [field: string]: unknown;
}

/**
 * Pino's `err` serializer for every Parlor logger: the error's type, message, code, stack and its
 * other plain fields, with the values of a failed query or command dropped (VALUE_FIELDS; an
 * ioredis `command` keeps its name, not its arguments, whose key names hold login codes), also
 * for a nested `cause` and the members of an AggregateError. A statement's text (`query`, with
 * `$n` placeholders) stays: it names what failed without the values.
 */
export function serializeError(err: unknown, depth = 0): unknown {
  if (!isErrorLike(err)) return err;
  const message = withoutValues(err);
  const out: SerializedError = { type: errorType(err), message };
  const stack = typeof err.stack === 'string' ? err.stack : undefined;
  if (stack !== undefined) out.stack = message === err.message ? stack : scrubStack(stack, err.message, message);
  for (const key of Object.keys(err)) {
    if (key === 'cause' || key === 'errors' || key === 'stack' || key === 'message' || VALUE_FIELDS.has(key)) continue;
    const value = (err as unknown as Record<string, unknown>)[key];
    if (key === 'command') out.command = commandName(value);
    else if (isErrorLike(value)) out[key] = depth < MAX_DEPTH ? serializeError(value, depth + 1) : value.message;
    else if (typeof value !== 'function') out[key] = value;
  }
  // Fields the libraries define as non-enumerable (postgres.js's `query` outside debug mode).
  if (out.code === undefined && 'code' in err) out.code = (err as { code?: unknown }).code;
  if (depth < MAX_DEPTH) {
    if (err.cause !== undefined) out.cause = serializeError(err.cause, depth + 1);
    if (Array.isArray((err as { errors?: unknown }).errors))
      out.errors = (err as unknown as { errors: unknown[] }).errors.map((e) => serializeError(e, depth + 1));
  }
  return out;
}

function isErrorLike(err: unknown): err is Error & { cause?: unknown } {
  return typeof err === 'object' && err !== null && typeof (err as { message?: unknown }).message === 'string';
}

function errorType(err: Error): string {
  const ctor = (err as { constructor?: { name?: unknown } }).constructor;
  return typeof ctor?.name === 'string' && ctor.name !== '' ? ctor.name : err.name;
}

/** Drizzle writes the values into its message too (`Failed query: …\nparams: …`): cut them off. */
function withoutValues(err: Error): string {
  const at = err.message.lastIndexOf('\nparams: ');
  return at >= 0 && 'params' in err ? err.message.slice(0, at) : err.message;
}

/** The stack begins with the message: the same cut there, or only the frames when it cannot be found. */
function scrubStack(stack: string, original: string, message: string): string {
  if (stack.includes(original)) return stack.replace(original, () => message);
  return [message, ...stack.split('\n').filter((line) => /^\s+at /.test(line))].join('\n');
}

function commandName(command: unknown): unknown {
  if (typeof command !== 'object' || command === null) return typeof command === 'string' ? command : undefined;
  const name = (command as { name?: unknown }).name;
  return { name: typeof name === 'string' ? name : undefined };
}

/** Request headers that hold credentials; Set-Cookie of answers likewise. */
const REDACTED = [
  'req.headers.cookie',
  'req.headers["x-api-key"]',
  'req.headers.authorization',
  'res.headers["set-cookie"]',
];

/**
 * The process's logger: JSON lines at `level`, credentials redacted, errors through
 * `serializeError`. The app and the process handlers of main.ts share it.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      redact: { paths: REDACTED, censor: '[redacted]' },
      serializers: { err: serializeError },
    },
    destination,
  );
}

/** The load balancer's health probe: its request lines go at debug, not two info lines per probe. */
const isProbe = (request: FastifyRequest) => request.url === '/v1/health' || request.url.startsWith('/v1/health?');

/** Fastify's request logging, with the health probe's lines at debug (a failed probe still logs). */
export class RequestLogController extends LogController {
  override incomingRequest(request: FastifyRequest, reply: FastifyReply): void {
    if (isProbe(request)) request.log.debug({ req: request }, 'incoming request');
    else super.incomingRequest(request, reply);
  }

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (!error && isProbe(request))
      reply.log.debug({ res: reply, responseTime: reply.elapsedTime }, 'request completed');
    else super.requestCompleted(error, request, reply);
  }
}
