import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import { Redis } from 'ioredis';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { closedPort, connectionRefused, failedQuery, SECRET } from '../../test/support/errors.js';
import { captureLog, LEVEL } from '../../test/support/logs.js';
import { appError, installErrorHandler, toErrorBody, UNAVAILABLE_RETRY_AFTER_SECONDS } from './errors.js';

/** What the failure of `run` throws (it must fail). */
async function thrown(run: () => Promise<unknown>): Promise<unknown> {
  try {
    await run();
  } catch (err) {
    return err;
  }
  throw new Error('did not fail');
}

/** A server on 127.0.0.1 that resets every connection it accepts; its port. */
async function resettingServer(): Promise<number> {
  const server = net.createServer((s) => s.resetAndDestroy()).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  clients.push({ end: () => server.close() });
  return (server.address() as net.AddressInfo).port;
}

/** The error of a real connection reset by the peer (ECONNRESET), raw from Node's socket. */
async function connectionReset(): Promise<unknown> {
  const socket = net.connect(await resettingServer(), '127.0.0.1');
  return new Promise((resolve) => socket.once('error', resolve));
}

/** A real EPIPE, raw from Node: a write to a pipe whose reader has gone (as a dead browser's DevTools pipe). */
async function brokenPipe(): Promise<unknown> {
  const reader = "require('fs').closeSync(0); console.log('closed'); setInterval(() => {}, 1000)";
  const child = spawn(process.execPath, ['-e', reader], { stdio: ['pipe', 'pipe', 'ignore'] });
  await once(child.stdout, 'data');
  child.stdin.write('x'.repeat(1 << 16));
  const [err] = await once(child.stdin, 'error');
  child.kill();
  return err;
}

/** A server on 127.0.0.1 that accepts connections and never answers (a stalled Redis); its port. */
async function silentServer(): Promise<number> {
  const held: net.Socket[] = [];
  const server = net.createServer((s) => held.push(s)).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  clients.push({
    end: () => {
      for (const s of held) s.destroy();
      server.close();
    },
  });
  return (server.address() as net.AddressInfo).port;
}

/** PostgreSQL's error with SQLSTATE `code`, as postgres.js throws it. */
const pgError = (code: string, message: string) =>
  new postgres.PostgresError({ code, message, severity: 'FATAL' } as never);

const clients: { end(): unknown }[] = [];
const port = await closedPort();
afterAll(async () => {
  for (const c of clients) await c.end();
});

/** Real connection-level failures of each store, by what produced them. */
const outages: [string, () => Promise<unknown>][] = [
  ['a Drizzle query whose connection was refused (ECONNREFUSED)', async () => failedQuery(await connectionRefused())],
  [
    'postgres.js meeting a server that resets the connection (ECONNRESET)',
    async () => {
      const sql = postgres({ host: '127.0.0.1', port: await resettingServer(), onnotice: () => {} });
      clients.push(sql);
      return thrown(() => sql`select 1`);
    },
  ],
  [
    'a Drizzle query whose connection attempt timed out (ETIMEDOUT)',
    async () =>
      failedQuery(
        Object.assign(new Error('connect ETIMEDOUT 10.0.0.9:5432'), { code: 'ETIMEDOUT', syscall: 'connect' }),
      ),
  ],
  [
    'postgres.js meeting a closed port',
    () => {
      const sql = postgres({ host: '127.0.0.1', port, connect_timeout: 5, onnotice: () => {} });
      clients.push(sql);
      return thrown(() => sql`select 1`);
    },
  ],
  [
    'postgres.js after its pool ended (CONNECTION_ENDED)',
    async () => {
      const sql = postgres({ host: '127.0.0.1', port });
      await sql.end();
      return thrown(() => sql`select 1`);
    },
  ],
  ['PostgreSQL: connection failure (08006)', async () => pgError('08006', 'connection failure')],
  [
    'PostgreSQL: terminating connection due to administrator command (57P01)',
    async () => pgError('57P01', 'terminating connection'),
  ],
  [
    'PostgreSQL: the database system is starting up (57P03)',
    async () => pgError('57P03', 'the database system is starting up'),
  ],
  ['PostgreSQL: too many connections (53300)', async () => pgError('53300', 'sorry, too many clients already')],
  [
    'a Drizzle query whose driver lost its connection',
    async () => failedQuery(pgError('57P01', 'terminating connection')),
  ],
  [
    'ioredis giving up on a command while reconnecting (MaxRetriesPerRequestError)',
    () => {
      const redis = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 0, retryStrategy: () => 1000 });
      redis.on('error', () => {});
      clients.push({ end: () => redis.disconnect() });
      return thrown(() => redis.get(`code:web:${SECRET}`));
    },
  ],
  [
    'ioredis when Redis does not answer within its commandTimeout ("Command timed out")',
    async () => {
      const redis = new Redis({ host: '127.0.0.1', port: await silentServer(), commandTimeout: 50 });
      redis.on('error', () => {});
      clients.push({ end: () => redis.disconnect() });
      return thrown(() => redis.get(`code:web:${SECRET}`));
    },
  ],
  [
    'ioredis after its connection was closed ("Connection is closed.")',
    () => {
      const redis = new Redis({ host: '127.0.0.1', port, lazyConnect: true });
      redis.disconnect();
      return thrown(() => redis.get(`code:web:${SECRET}`));
    },
  ],
];

describe('toErrorBody', () => {
  it.each(outages)('answers 503 ERR_SERVICE_UNAVAILABLE for %s', async (_what, make) => {
    const err = await make();
    expect(toErrorBody(err)).toEqual({
      status: 503,
      body: { code: 'ERR_SERVICE_UNAVAILABLE', message: 'The service is not available right now.' },
      unexpected: false,
      unavailable: true,
    });
  });

  /** Socket failures that no store driver raised: a client or a browser pipe, not the store. */
  const notStores: [string, () => Promise<unknown>][] = [
    ['a raw refused connection (ECONNREFUSED)', connectionRefused],
    ['a raw connection reset (ECONNRESET)', connectionReset],
    ['a raw broken pipe (EPIPE), as from a dead browser', brokenPipe],
    [
      'a broken pipe wrapped by its caller',
      async () => new Error('DevTools call failed', { cause: await brokenPipe() }),
    ],
  ];

  it.each(notStores)('does not answer %s as a store outage', async (_what, make) => {
    const err = await make();
    expect(toErrorBody(err)).toMatchObject({ status: 500, unexpected: true, body: { code: 'ERR_INTERNAL' } });
  });

  it('keeps a failed statement and an unknown error a 500, and an AppError its own answer', () => {
    expect(toErrorBody(failedQuery(pgError('22012', 'division by zero')))).toMatchObject({
      status: 500,
      unexpected: true,
    });
    expect(toErrorBody(new TypeError('x is undefined'))).toMatchObject({ status: 500, unexpected: true });
    expect(toErrorBody(appError('ERR_SERVICE_UNAVAILABLE', 'Not answering: redis.'))).toMatchObject({
      status: 503,
      body: { message: 'Not answering: redis.' },
      unexpected: false,
    });
  });
});

describe('toErrorBody (refusals of Fastify and its plugins)', () => {
  /** An error as Fastify or @fastify/send raises it: a code of its own and an HTTP status. */
  const fastifyError = (statusCode: number, code?: string) => Object.assign(new Error('refused'), { statusCode, code });

  it('answers a malformed %-escape and an over-long path parameter 400 ERR_VALIDATION with the errors list', () => {
    expect(toErrorBody(fastifyError(400, 'FST_ERR_BAD_URL'))).toEqual({
      status: 400,
      body: {
        code: 'ERR_VALIDATION',
        message: 'The request is not valid.',
        errors: [{ path: 'url', message: 'holds a malformed %-escape' }],
      },
      unexpected: false,
    });
    expect(toErrorBody(fastifyError(414, 'FST_ERR_MAX_PARAM_LENGTH')).body.errors).toEqual([
      { path: 'params', message: 'is too long' },
    ]);
    expect(toErrorBody(fastifyError(400)).body).toMatchObject({ code: 'ERR_VALIDATION', errors: [expect.anything()] });
  });

  it('keeps 412 and 416 with codes of their own', () => {
    expect(toErrorBody(fastifyError(412))).toMatchObject({ status: 412, body: { code: 'ERR_PRECONDITION_FAILED' } });
    expect(toErrorBody(fastifyError(416))).toMatchObject({ status: 416, body: { code: 'ERR_RANGE_NOT_SATISFIABLE' } });
    expect(toErrorBody(fastifyError(416)).body).not.toHaveProperty('errors');
  });
});

describe('the error handler', () => {
  const logs = captureLog();
  const app = Fastify({ loggerInstance: logs.log as FastifyBaseLogger });
  installErrorHandler(app);
  let failure: unknown = null;
  app.get('/fail', async () => {
    throw failure;
  });
  app.post('/body', async () => ({}));
  let errored: (err: unknown) => void = () => {};
  app.addHook('onError', async (_request, _reply, err) => errored(err));

  afterAll(() => app.close());

  it('does not take a client that drops mid-body for a store outage', async () => {
    await app.listen({ port: 0, host: '127.0.0.1' });
    const seen = new Promise<unknown>((resolve) => {
      errored = resolve;
    });

    // The body has begun to arrive before the client goes away.
    const started = new Promise((resolve) => app.server.once('request', (req) => req.once('data', resolve)));
    const socket = net.connect((app.server.address() as net.AddressInfo).port, '127.0.0.1');
    await once(socket, 'connect');
    socket.write(
      'POST /body HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a":',
    );
    await started;
    socket.destroy();
    const err = (await seen) as { code?: string; statusCode?: number };
    // The handler runs after the onError hook: wait for its line, whichever it is.
    const handled = () => logs.lines().some((l) => /request refused|backing store|unexpected/.test(l.msg));
    while (!handled()) await new Promise((resolve) => setImmediate(resolve));
    expect(err).toMatchObject({ code: 'ECONNRESET', statusCode: 400 });
    expect(toErrorBody(err)).toMatchObject({ status: 400, unexpected: false });
    expect(logs.lines().filter((l) => l.level >= LEVEL.warn)).toEqual([]);
    expect(logs.text()).not.toContain('backing store unavailable');
    expect(logs.lines().at(-1)).toMatchObject({ msg: 'request refused', status: 400 });
  });

  it('answers a store outage with 503, Retry-After, and one warn line without a stack or values', async () => {
    failure = failedQuery(await connectionRefused());
    const res = await app.inject({ url: '/fail' });
    expect(res.statusCode).toBe(503);
    expect(res.headers['retry-after']).toBe(String(UNAVAILABLE_RETRY_AFTER_SECONDS));
    expect(res.json()).toEqual({ code: 'ERR_SERVICE_UNAVAILABLE', message: 'The service is not available right now.' });
    const [line, ...more] = logs.lines().filter((l) => l.level >= LEVEL.warn);
    expect(more).toEqual([]);
    expect(line).toMatchObject({
      level: LEVEL.warn,
      msg: 'backing store unavailable',
      route: '/fail',
      store_error: { code: 'ECONNREFUSED' },
    });
    expect(logs.text()).not.toContain('"stack"');
    expect(logs.text()).not.toContain(SECRET);
  });

  it('answers anything else unknown with a bare 500, logged at error with its stack', async () => {
    failure = failedQuery();
    const res = await app.inject({ url: '/fail' });
    expect(res.statusCode).toBe(500);
    expect(res.headers['retry-after']).toBeUndefined();
    expect(logs.lines().at(-2)).toMatchObject({ level: LEVEL.error, msg: 'unexpected error' });
    expect(logs.text()).toContain('"stack"');
    expect(logs.text()).not.toContain(SECRET);
  });
});
