import { once } from 'node:events';
import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { captureLog, LEVEL } from '../../../test/support/logs.js';
import { redisForUnitCases, SERVICE_URLS } from '../../../test/support/services.js';
import { eventually } from '../../../test/support/vm-browser.js';
import { RedisState } from './redis.js';

const redisProblem = await redisForUnitCases('the RedisState connection logging tests');

/**
 * A TCP relay in front of the local Redis that the test can cut (closing every connection and
 * refusing new ones) and restore on the same port: a Redis outage seen by one client only.
 */
async function relay() {
  const target = new URL(SERVICE_URLS.redis);
  const sockets = new Set<net.Socket>();
  const serve = () =>
    net.createServer((client) => {
      const upstream = net.connect(Number(target.port || 6379), target.hostname);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('error', () => {});
        s.on('close', () => sockets.delete(s));
      }
      client.pipe(upstream).pipe(client);
    });
  let server = serve().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `redis://127.0.0.1:${port}`,
    async cut() {
      await new Promise((resolve) => {
        server.close(resolve);
        for (const s of sockets) s.destroy();
      });
    },
    async restore() {
      server = serve().listen(port, '127.0.0.1');
      await once(server, 'listening');
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

describe.skipIf(redisProblem !== null)('RedisState connection logging', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('logs an outage once at warn and info, not once per retry, and the return at info', async () => {
    const r = await relay();
    const logs = captureLog('info');
    const state = new RedisState(r.url, `parlor-connlog:${Date.now()}:`, undefined, logs.log);
    cleanups.push(r.close, () => state.close());
    await state.connect();
    let retries = 0;
    state.client.on('reconnecting', () => {
      retries += 1;
    });
    expect(logs.lines()).toEqual([]);

    await r.cut();
    // Several failed attempts: each is an `error` and a `reconnecting` event of the client.
    await eventually(() => retries >= 3, 20_000, 'three reconnect attempts');
    await r.restore();
    await eventually(() => logs.lines().some((l) => l.msg === 'Redis connection back'), 20_000, 'the return');
    expect(await state.get('nothing-here')).toBeNull();

    const lines = logs.lines().map((l) => [l.level, l.msg, l.redis]);
    expect(lines).toEqual([
      [LEVEL.info, 'Redis connection lost; reconnecting', 'commands'],
      [LEVEL.warn, 'Redis connection failed; reconnecting', 'commands'],
      [LEVEL.info, 'Redis connection back', 'commands'],
    ]);
    expect((logs.lines()[1]?.err as { code?: string } | undefined)?.code).toBe('ECONNREFUSED');
  });
});
