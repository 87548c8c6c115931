import { PGlite } from '@electric-sql/pglite';
import { DrizzleQueryError, sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/pglite';
import { ReplyError } from 'ioredis';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger, serializeError, serializeRequest } from './logging.js';

const SECRET = 'ct-SECRET-9f8e7d';

/** A logger at `level` whose JSON lines are collected. */
function capture(level = 'info') {
  const lines: string[] = [];
  const log = createLogger(level, { write: (line: string) => void lines.push(line) });
  return { log, lines, parsed: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

const pglite = new PGlite();
afterAll(() => pglite.close());

/** A real failed Drizzle query (PGlite's error as its cause) whose parameter is the secret. */
async function failedQuery(): Promise<DrizzleQueryError> {
  try {
    await drizzle(pglite).execute(sql`select ${SECRET}::text, 1/0`);
  } catch (err) {
    return err as DrizzleQueryError;
  }
  throw new Error('the query did not fail');
}

/** The error of a real PGlite statement on `value` that fails with a data exception (class 22). */
async function dataException(statement: (value: string) => ReturnType<typeof sql>, value: string) {
  try {
    await drizzle(pglite).execute(statement(value));
  } catch (err) {
    return err as DrizzleQueryError & { cause: Error & Record<string, unknown> };
  }
  throw new Error('the query did not fail');
}

/** The same failure as postgres.js throws it: PostgreSQL's fields under postgres.js's names. */
function asPostgresJs(cause: Error & Record<string, unknown>): Error {
  const err = new postgres.PostgresError({
    message: cause.message,
    code: cause.code,
    severity: 'ERROR',
    where: cause.where,
    routine: cause.routine,
    internal_query: 'select $1',
  } as never);
  Object.defineProperties(err, {
    query: { value: 'select $1::integer', enumerable: true },
    parameters: { value: [SECRET], enumerable: true },
  });
  return err;
}

/** postgres.js's error as its query path leaves it (debug mode makes the value fields enumerable). */
function postgresError(): Error {
  const err = new postgres.PostgresError({
    message: 'duplicate key value violates unique constraint "sessions_token_hash_key"',
    code: '23505',
    detail: `Key (token_hash)=(${SECRET}) already exists.`,
    severity: 'ERROR',
  } as never);
  Object.defineProperties(err, {
    query: { value: 'insert into sessions (token_hash) values ($1)', enumerable: true },
    parameters: { value: [SECRET], enumerable: true },
    args: { value: [SECRET], enumerable: true },
  });
  return err;
}

/** ioredis's reply error as its data handler leaves it: the command and its arguments attached. */
function redisReplyError(): Error {
  const err = new ReplyError('WRONGTYPE Operation against a key holding the wrong kind of value') as Error & {
    command?: unknown;
  };
  err.command = { name: 'getdel', args: [`parlor:code:web:${SECRET}`] };
  return err;
}

describe('serializeError', () => {
  it('keeps the statement text and the cause of a failed Drizzle query, not its values', async () => {
    const err = await failedQuery();
    expect(err).toBeInstanceOf(DrizzleQueryError);
    expect(JSON.stringify(err.params)).toContain(SECRET);
    const out = serializeError(err) as Record<string, unknown> & { cause: Record<string, unknown> };
    expect(JSON.stringify(out)).not.toContain(SECRET);
    expect(out.message).toBe('Failed query: select $1::text, 1/0');
    expect(out.stack).toMatch(/^Error: Failed query: select \$1::text, 1\/0\n\s+at /);
    expect(out.query).toBe('select $1::text, 1/0');
    expect(out.cause.message).toBe('data exception 22012 (routine int4div)');
    expect(out.cause.code).toBe('22012');
    expect(out.cause).not.toHaveProperty('params');
  });

  it('drops the parameters, arguments and row values of a postgres.js error', () => {
    const out = serializeError(postgresError()) as Record<string, unknown>;
    expect(JSON.stringify(out)).not.toContain(SECRET);
    expect(out).toMatchObject({
      type: 'PostgresError',
      code: '23505',
      query: 'insert into sessions (token_hash) values ($1)',
    });
  });

  it('keeps the name of a failed Redis command, not its arguments (key names hold login codes)', () => {
    const out = serializeError(redisReplyError()) as Record<string, unknown>;
    expect(JSON.stringify(out)).not.toContain(SECRET);
    expect(out).toMatchObject({ type: 'ReplyError', command: { name: 'getdel' } });
    expect(out.message).toMatch(/^WRONGTYPE/);
  });

  it('keeps the value out of a data exception (class 22): message, stack and wrappers', async () => {
    const err = await dataException((v) => sql`select ${v}::integer`, SECRET);
    expect(err.cause.message).toBe(`invalid input syntax for type integer: "${SECRET}"`);
    expect(err.cause.code).toBe('22P02');
    const wrapped = new Error(`sweep failed: ${err.cause.message}`, { cause: err });
    for (const e of [err, err.cause, wrapped, asPostgresJs(err.cause)]) {
      const out = serializeError(e);
      expect(JSON.stringify(out)).not.toContain(SECRET);
    }
    const out = serializeError(wrapped) as { message: string; cause: { cause: Record<string, unknown> } };
    expect(out.message).toMatch(/^sweep failed: data exception 22P02 \(routine \w+\)$/);
    expect(out.cause.cause).toMatchObject({ code: '22P02', routine: expect.any(String) });
    expect(out.cause.cause.stack).toMatch(/^error: data exception 22P02/);
  });

  it("drops PostgreSQL's `where`, which quotes a jsonb input", async () => {
    const err = await dataException((v) => sql`select ${v}::jsonb`, `{"token": "${SECRET}`);
    expect(err.cause.code).toMatch(/^22/);
    expect(String(err.cause.where)).toContain(SECRET);
    const out = serializeError(err.cause) as Record<string, unknown>;
    expect(out).not.toHaveProperty('where');
    expect(JSON.stringify(serializeError(err))).not.toContain(SECRET);
    expect(JSON.stringify(serializeError(asPostgresJs(err.cause)))).not.toContain(SECRET);
    expect(serializeError(asPostgresJs(err.cause))).not.toHaveProperty('internal_query');
  });

  it('follows causes and aggregated errors', () => {
    const nested = new Error('request failed', {
      cause: new AggregateError([redisReplyError(), postgresError()], 'both'),
    });
    const out = serializeError(nested) as { cause: { errors: Record<string, unknown>[] } };
    expect(JSON.stringify(out)).not.toContain(SECRET);
    expect(out.cause.errors.map((e) => e.type)).toEqual(['ReplyError', 'PostgresError']);
  });
});

describe('createLogger', () => {
  it('writes no query, parameter or command value into a log line, at any depth', async () => {
    const { log, lines } = capture();
    const wrapped = new Error('sweep failed', { cause: await failedQuery() });
    log.error({ err: await failedQuery() }, 'unexpected error');
    log.warn({ err: redisReplyError() }, 'redis failed');
    log.error({ err: postgresError() }, 'insert failed');
    log.error({ err: wrapped, task: 'sweep' }, 'background task failed');
    expect(lines).toHaveLength(4);
    for (const line of lines) expect(line).not.toContain(SECRET);
    const last = JSON.parse(lines[3] ?? '{}') as { err: { message: string; cause: { message: string } } };
    expect(last.err.message).toBe('sweep failed');
    expect(last.err.cause.message).toBe('Failed query: select $1::text, 1/0');
  });

  it('redacts credentials of the request', () => {
    const { log, parsed } = capture();
    log.info(
      { req: { headers: { cookie: 'psession=abc', authorization: 'Bearer pop_x', 'x-api-key': 'ppk_y' } } },
      'x',
    );
    expect(parsed()[0]?.req).toEqual({
      headers: { cookie: '[redacted]', authorization: '[redacted]', 'x-api-key': '[redacted]' },
    });
  });
});

describe('serializeRequest', () => {
  it('logs a request line as Fastify does, with an invite code cut from the url', () => {
    const { log, parsed } = capture();
    const req = {
      method: 'POST',
      url: '/v1/portal/chats/12/invites/Ab_9-xYz0123/delete',
      headers: { 'accept-version': '1', cookie: 'psession=abc' },
      host: 'api.example.org',
      ip: '10.0.0.1',
      socket: { remotePort: 50_000 },
    };
    log.info({ req }, 'incoming request');
    expect(parsed()[0]?.req).toEqual({
      method: 'POST',
      url: '/v1/portal/chats/12/invites/[redacted]/delete',
      version: '1',
      host: 'api.example.org',
      remoteAddress: '10.0.0.1',
      remotePort: 50_000,
    });
  });

  it.each([
    ['/v1/portal/chats/12/invites/Ab_9-xYz0123', '/v1/portal/chats/12/invites/[redacted]'],
    ['/v1/portal/chats/12/invites/Ab_9-xYz0123/delete?x=1', '/v1/portal/chats/12/invites/[redacted]/delete?x=1'],
    ['/v1/portal/chats/12/invites/create', '/v1/portal/chats/12/invites/create'],
    ['/v1/portal/chats/12/invites?offset=0', '/v1/portal/chats/12/invites?offset=0'],
    // The router decodes %-escapes before matching: these reach the same routes.
    ['/v1/portal/chats/12/%69nvites/Ab_9-xYz0123/delete', '/v1/portal/chats/12/%69nvites/[redacted]/delete'],
    ['/v1/portal/chats/12/inv%69tes/%41b_9-xYz0123', '/v1/portal/chats/12/inv%69tes/[redacted]'],
    ['/v1/portal/chats/12/%69nvites/%63reate', '/v1/portal/chats/12/%69nvites/%63reate'],
    // A malformed escape (which the router refuses) throws nothing and hides no code.
    ['/v1/portal/chats/12/invites/Ab_9%zz/delete%', '/v1/portal/chats/12/invites/[redacted]/delete%'],
    ['/v1/portal/chats/12/invites%2FAb_9-xYz0123/delete', '/v1/portal/chats/12/invites%2FAb_9-xYz0123/delete'],
    ['/v1/portal/chats/12/invites#Ab_9-xYz0123', '/v1/portal/chats/12/invites#Ab_9-xYz0123'],
    ['/v1/users/me/sessions/x7Yz_9/destroy', '/v1/users/me/sessions/x7Yz_9/destroy'],
    ['/v1/admin/users/7/update', '/v1/admin/users/7/update'],
  ])('logs %s as %s', (url, logged) => {
    expect(serializeRequest({ method: 'POST', url })).toMatchObject({ url: logged });
  });
});
