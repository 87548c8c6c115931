import { type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import { type DestinationStream, type Logger, pino } from 'pino';

/**
 * Fields of library errors that carry the values of a failed statement or command: Drizzle's
 * `params`, postgres.js's `parameters`/`args`/`types`, PGlite's `params`/`queryOptions`, and
 * PostgreSQL's `detail` ("Key (token_hash)=(…) already exists"), `where` (the context, which
 * quotes a jsonb input) and internal query (postgres.js `internal_query`/`internal_position`,
 * PGlite `internalQuery`/`internalPosition`). Message ciphertext, addresses, token hashes and
 * login codes travel in them, so they never reach a log line.
 */
const VALUE_FIELDS = new Set([
  'params',
  'parameters',
  'args',
  'types',
  'detail',
  'queryOptions',
  'where',
  'internalQuery',
  'internalPosition',
  'internal_query',
  'internal_position',
]);

/**
 * Fields of a PostgreSQL error (postgres.js's names, then PGlite's) that name what a data
 * exception (SQLSTATE class 22) was about without its value.
 */
const DATA_ERROR_FIELDS: [string, string][] = [
  ['column', 'column_name'],
  ['datatype', 'data type_name'],
  ['routine', 'routine'],
  ['column', 'column'],
  ['datatype', 'dataType'],
];

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
export function serializeError(err: unknown, depth = 0, scrub = dataErrorTexts(err)): unknown {
  if (!isErrorLike(err)) return err;
  const message = scrubTexts(withoutValues(err), scrub);
  const out: SerializedError = { type: errorType(err), message };
  const stack = typeof err.stack === 'string' ? err.stack : undefined;
  if (stack !== undefined)
    out.stack = scrubTexts(message === err.message ? stack : scrubStack(stack, err.message, message), scrub);
  for (const key of Object.keys(err)) {
    if (key === 'cause' || key === 'errors' || key === 'stack' || key === 'message' || VALUE_FIELDS.has(key)) continue;
    const value = (err as unknown as Record<string, unknown>)[key];
    if (key === 'command') out.command = commandName(value);
    else if (isErrorLike(value))
      out[key] = depth < MAX_DEPTH ? serializeError(value, depth + 1, scrub) : scrubTexts(value.message, scrub);
    else if (typeof value === 'string') out[key] = scrubTexts(value, scrub);
    else if (typeof value !== 'function') out[key] = value;
  }
  // Fields the libraries define as non-enumerable (postgres.js's `query` outside debug mode).
  if (out.code === undefined && 'code' in err) out.code = (err as { code?: unknown }).code;
  if (depth < MAX_DEPTH) {
    if (err.cause !== undefined) out.cause = serializeError(err.cause, depth + 1, scrub);
    if (Array.isArray((err as { errors?: unknown }).errors))
      out.errors = (err as unknown as { errors: unknown[] }).errors.map((e) => serializeError(e, depth + 1, scrub));
  }
  return out;
}

/**
 * The messages of the data exceptions (SQLSTATE class 22) in `err`, its causes and aggregated
 * errors, each with its value-free stand-in: PostgreSQL quotes the input in them (`invalid input
 * syntax for type integer: "…"`), and wrapping errors may quote the message in turn.
 */
function dataErrorTexts(err: unknown, depth = 0, found = new Map<string, string>()): Map<string, string> {
  if (!isErrorLike(err) || depth > MAX_DEPTH) return found;
  const fields = err as unknown as Record<string, unknown>;
  const code = fields.code;
  if (typeof code === 'string' && /^22[0-9A-Z]{3}$/.test(code) && err.message !== '') {
    const about = DATA_ERROR_FIELDS.filter(([, field]) => typeof fields[field] === 'string' && fields[field] !== '')
      .map(([name, field]) => `${name} ${String(fields[field])}`)
      .join(', ');
    found.set(err.message, `data exception ${code}${about ? ` (${about})` : ''}`);
  }
  dataErrorTexts(err.cause, depth + 1, found);
  const errors = (err as { errors?: unknown }).errors;
  if (Array.isArray(errors)) for (const e of errors) dataErrorTexts(e, depth + 1, found);
  return found;
}

/** `text` with every data-exception message in it replaced by its stand-in. */
function scrubTexts(text: string, scrub: Map<string, string>): string {
  let out = text;
  for (const [original, standIn] of scrub) out = out.split(original).join(standIn);
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
 * Path segments that hold a secret: the invite code of `POST …/invites/{code}/delete` (a refused
 * delete leaves it live, and a private chat's code lets anyone in), the segment after one the
 * router reads as `invites`, but for `create`. The other path parameters are ids, public names,
 * or a session's `token_suffix`, 6 of its token's 43 characters, which the user is shown anyway
 * and which name the session an operator may be asked about: they stay.
 *
 * Judged on the segments as the router sees them: it splits the path (before `?` or `#`) on `/`
 * and decodes the %-escapes of each segment before matching, so `%69nvites/{code}` reaches the
 * same route as `invites/{code}` and its code is cut as well.
 */
function withoutSecrets(url: string): string {
  // Most request lines name no invite and hold no escape: they pass untouched.
  if (!url.includes('invites') && !url.includes('%')) return url;
  const end = url.search(/[?#]/);
  const path = end < 0 ? url : url.slice(0, end);
  const segments = path.split('/');
  let afterInvites = false;
  let cut = false;
  for (const [i, segment] of segments.entries()) {
    const name = decodedSegment(segment);
    if (afterInvites && segment !== '' && name !== 'create') {
      segments[i] = '[redacted]';
      cut = true;
    }
    afterInvites = name === 'invites';
  }
  return cut ? segments.join('/') + url.slice(path.length) : url;
}

/**
 * A path segment with its %-escapes decoded, as the router matches it; as it is when one is
 * malformed (the router refuses those). Also choosing the security header set (security-headers.ts).
 */
export function decodedSegment(segment: string): string {
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** What a request line names of a request (Fastify's own fields); `url` with its secrets cut. */
interface RequestLike {
  method?: unknown;
  url: string;
  headers?: Record<string, unknown>;
  host?: unknown;
  ip?: unknown;
  socket?: { remotePort?: unknown };
}

/**
 * Pino's `req` serializer: Fastify's default (method, url, version, host, remote address and port),
 * with the secret path segments of the url (`withoutSecrets`) replaced by `[redacted]`. Runs for
 * every request line, so only that pass over the url; anything that is no request passes as it is.
 */
export function serializeRequest(req: unknown): unknown {
  if (typeof req !== 'object' || req === null || typeof (req as { url?: unknown }).url !== 'string') return req;
  const r = req as RequestLike;
  return {
    method: r.method,
    url: withoutSecrets(r.url),
    version: r.headers?.['accept-version'],
    host: r.host,
    remoteAddress: r.ip,
    remotePort: r.socket?.remotePort,
  };
}

/**
 * The process's logger: JSON lines at `level`, credentials redacted, secret path segments cut
 * from request urls (`serializeRequest`), errors through `serializeError`. The app and the
 * process handlers of main.ts share it.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      redact: { paths: REDACTED, censor: '[redacted]' },
      serializers: { err: serializeError, req: serializeRequest },
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
