import net from 'node:net';
import { afterEach, expect, it } from 'vitest';
import type { RedisState } from '../src/platform/state/index.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { login } from './support/flows.js';
import { type CapturedLog, captureLog, LEVEL } from './support/logs.js';
import { SERVICE_URLS } from './support/services.js';
import { connectSocket } from './support/sockets.js';

/**
 * A TCP proxy to the machine's Redis that can stall: its connections stay open but nothing more is
 * forwarded either way (a Redis blocked by a long script or a busy fork, or a network path that
 * drops packets without resetting the connection).
 */
async function stallableRedis() {
  const target = new URL(SERVICE_URLS.redis);
  const pairs: { client: net.Socket; server: net.Socket }[] = [];
  let stalled = false;
  const proxy = net.createServer((client) => {
    const server = net.connect(Number(target.port || 6379), target.hostname);
    pairs.push({ client, server });
    client.on('data', (d) => {
      if (!stalled) server.write(d);
    });
    server.on('data', (d) => {
      if (!stalled) client.write(d);
    });
    client.on('error', () => {});
    server.on('error', () => {});
    client.on('close', () => server.destroy());
    server.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const { port } = proxy.address() as net.AddressInfo;
  return {
    url: `redis://127.0.0.1:${port}`,
    stall: () => {
      stalled = true;
    },
    /** Ends the stall and drops every proxied connection (the app reconnects afresh). */
    reset: () => {
      stalled = false;
      for (const p of pairs.splice(0)) {
        p.client.destroy();
        p.server.destroy();
      }
    },
    close: () => new Promise<void>((resolve) => proxy.close(() => resolve())),
  };
}

/**
 * A node whose own connection to a store is gone answers 503 with Retry-After, and logs one warn
 * line per request, not an error with a stack. Only this test's app loses its connections (its own
 * clients are closed); the machine's PostgreSQL and Redis keep running. Embedded stores have no
 * connection to lose.
 */
describeApp('a store that cannot be reached', () => {
  let app: TestApp | null = null;
  let logs: CapturedLog;
  let redis: Awaited<ReturnType<typeof stallableRedis>> | null = null;
  afterEach(async () => {
    redis?.reset();
    await app?.close();
    await redis?.close();
    app = redis = null;
  });

  const start = async (config: Parameters<typeof startApp>[0] = {}) => {
    logs = captureLog();
    app = await startApp({ ...config, logger: logs.log });
    return app;
  };

  /** A login request: it takes a per-address limit in Redis and reads the identity in SQL. */
  const requestCode = (node: TestApp) =>
    new Client(node.url, nextIp(), node.publicApiKey).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: '424242',
    });

  it.skipIf(MODE !== 'cluster')('answers 503 ERR_SERVICE_UNAVAILABLE with Retry-After when Redis is lost', async () => {
    const node = await start();
    (node.state as RedisState).client.disconnect();
    const res = await requestCode(node);
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('5');
    expect(res.body).toEqual({ code: 'ERR_SERVICE_UNAVAILABLE', message: 'The service is not available right now.' });
    expect(logs.lines().filter((l) => l.level >= LEVEL.warn)).toMatchObject([
      { level: LEVEL.warn, msg: 'backing store unavailable', store_error: { message: 'Connection is closed.' } },
    ]);
  });

  it.skipIf(MODE !== 'cluster')(
    'answers 503 ERR_SERVICE_UNAVAILABLE with Retry-After when PostgreSQL is lost',
    async () => {
      const node = await start();
      await node.database.close();
      const res = await requestCode(node);
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      expect(res.body.code).toBe('ERR_SERVICE_UNAVAILABLE');
      expect(logs.lines().filter((l) => l.level >= LEVEL.warn)).toMatchObject([
        { level: LEVEL.warn, msg: 'backing store unavailable', store_error: { code: 'CONNECTION_ENDED' } },
      ]);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'answers 503 ERR_SERVICE_UNAVAILABLE with Retry-After, to requests and socket events, when Redis stops answering',
    async () => {
      redis = await stallableRedis();
      const node = await start({ config: { redisUrl: redis.url } });
      const { client } = await login(node);
      const socket = await connectSocket(node.url, client);
      expect((await client.get('/v1/users/me')).status).toBe(200);

      redis.stall();
      // A login request (its per-address count of pending codes is in Redis), a session's write
      // (the per-user write limit is in Redis) and a socket event (room:join spends a limit there).
      const [request, write, ack] = await Promise.all([
        requestCode(node),
        client.post('/v1/users/me/update', { username: 'stalled_name' }),
        socket.emitWithAck('room:join', { chat_id: 1 }) as Promise<{ ok: boolean; code?: string }>,
      ]);
      for (const res of [request, write]) {
        expect(res.status, JSON.stringify(res.body)).toBe(503);
        expect(res.headers.get('retry-after')).toBe('5');
        expect(res.body.code).toBe('ERR_SERVICE_UNAVAILABLE');
      }
      expect(ack).toMatchObject({ ok: false, code: 'ERR_SERVICE_UNAVAILABLE' });
      const warned = logs.lines().filter((l) => l.level >= LEVEL.warn && l.msg === 'backing store unavailable');
      expect(warned.length).toBeGreaterThanOrEqual(3);
      for (const line of warned) expect(line).toMatchObject({ store_error: { message: 'Command timed out' } });
      socket.close();
    },
  );
});
