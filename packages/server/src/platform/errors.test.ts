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

/** A connection reset by the peer: a server that resets every connection it accepts. */
async function connectionReset(): Promise<unknown> {
  const server = net.createServer((s) => s.resetAndDestroy()).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const socket = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
  const err = await new Promise((resolve) => socket.once('error', resolve));
  server.close();
  return err;
}

/** PostgreSQL's error with SQLSTATE `code`, as postgres.js throws it. */
const pgError = (code: string, message: string) =>
  new postgres.PostgresError({ code, message, severity: 'FATAL' } as never);

const port = await closedPort();
const clients: { end(): unknown }[] = [];
afterAll(async () => {
  for (const c of clients) await c.end();
});

/** Real connection-level failures of each store, by what produced them. */
const outages: [string, () => Promise<unknown>][] = [
  ['a refused connection (ECONNREFUSED)', connectionRefused],
  ['a connection reset by the peer (ECONNRESET)', connectionReset],
  [
    'a connection attempt that timed out (ETIMEDOUT)',
    async () => Object.assign(new Error('connect ETIMEDOUT 10.0.0.9:5432'), { code: 'ETIMEDOUT', syscall: 'connect' }),
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

describe('the error handler', () => {
  const logs = captureLog();
  const app = Fastify({ loggerInstance: logs.log as FastifyBaseLogger });
  installErrorHandler(app);
  let failure: unknown = null;
  app.get('/fail', async () => {
    throw failure;
  });
  afterAll(() => app.close());

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
