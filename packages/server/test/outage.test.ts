import net from 'node:net';
import { afterAll, afterEach, expect, it } from 'vitest';
import type { RedisState } from '../src/platform/state/index.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows } from './support/faults.js';
import { login } from './support/flows.js';
import { type CapturedLog, captureLog, LEVEL } from './support/logs.js';
import { SERVICE_URLS } from './support/services.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

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
 * A TCP proxy to the machine's Redis that, once armed, holds the client→server bytes of the first
 * chunk containing `marker` (and what follows on that connection) for `holdMs`, then forwards them:
 * a Redis slow for a few seconds (a fork, another client's long script, a congested path) that
 * still runs what it was sent.
 */
async function delayingRedis(marker: string, holdMs: number) {
  const target = new URL(SERVICE_URLS.redis);
  const sockets: net.Socket[] = [];
  let armed = false;
  let fired = false;
  const proxy = net.createServer((client) => {
    const server = net.connect(Number(target.port || 6379), target.hostname);
    sockets.push(client, server);
    let held: Buffer[] | null = null;
    client.on('data', (d) => {
      if (held) {
        held.push(d);
        return;
      }
      if (armed && !fired && d.includes(marker)) {
        fired = true;
        held = [d];
        setTimeout(() => {
          for (const b of held ?? []) server.write(b);
          held = null;
        }, holdMs);
        return;
      }
      server.write(d);
    });
    server.on('data', (d) => client.write(d));
    client.on('error', () => {});
    server.on('error', () => {});
    client.on('close', () => server.destroy());
    server.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const { port } = proxy.address() as net.AddressInfo;
  return {
    url: `redis://127.0.0.1:${port}`,
    arm: () => {
      armed = true;
    },
    fired: () => fired,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}

/**
 * A match-queue script runs on a connection without the 3 s command timeout: a timeout would stop
 * only the wait, and the script, run later by a slow Redis, could take the waiting user out of the
 * queue with nobody left to make the chat or tell them.
 */
describeApp('a match-queue script that Redis runs after the command timeout', () => {
  let app: TestApp | null = null;
  let redis: Awaited<ReturnType<typeof delayingRedis>> | null = null;
  afterAll(async () => {
    closeAllSockets();
    await app?.close();
    await redis?.close();
  });

  it.skipIf(MODE !== 'cluster')(
    'an enqueue whose pairing script reaches Redis 4 s late still pairs the waiting user',
    async () => {
      // `take_peer` is in the PLACE script (enqueue / restore) only.
      redis = await delayingRedis('take_peer', 4_000);
      app = await startApp({ config: { redisUrl: redis.url } });
      const t = `slow${Date.now() % 1000000}`;
      const [a, b] = [await member(app), await member(app)];
      const queued = await a.client.post('/v1/portal/match', { interests: [t] });
      expect(queued.status, JSON.stringify(queued.body)).toBe(200);
      expect(queued.body.state).toBe('searching');

      redis.arm();
      const res = await b.client.post('/v1/portal/match', { interests: [t] });
      expect(redis.fired()).toBe(true);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      // The caller is answered as queued; both hear the pairing (match:found) with the same chat.
      expect(res.body.state).toBe('searching');
      const [foundA, foundB] = await Promise.all([a.socket.next('match:found'), b.socket.next('match:found')]);
      expect(foundA.chat_id).toBe(foundB.chat_id);
      expect([foundA.peer.id, foundB.peer.id]).toEqual([b.user.id, a.user.id]);
      expect((await a.client.get('/v1/portal/match/status')).body).toMatchObject({
        state: 'matched',
        chat_id: foundA.chat_id,
      });
      const members = await countRows(app, `select count(*) as n from chat_members where chat_id = ${foundA.chat_id}`);
      expect(members).toBe(2);
    },
    30_000,
  );
});

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
