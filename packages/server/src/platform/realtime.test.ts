import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Type } from '@sinclair/typebox';
import { type Socket as ClientSocket, io as ioClient } from 'socket.io-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionRefused, failedQuery, SECRET } from '../../test/support/errors.js';
import { captureLog, LEVEL } from '../../test/support/logs.js';
import { appError } from './errors.js';
import { createRealtime, type Realtime } from './realtime.js';

/**
 * Client events registered with `realtime.on`, on a real Socket.IO server on a real port (no app):
 * every socket is served by the one registry, with the schema check and the ack shape of every
 * Parlor event.
 */
let realtime: Realtime;
let url: string;
const clients: ClientSocket[] = [];
const Payload = Type.Object({ n: Type.Integer({ minimum: 0, maximum: 10 }) }, { additionalProperties: false });
const logs = captureLog();
/** A database that cannot be reached, as the handshake's session look-up would meet it. */
const refused = await connectionRefused();

beforeAll(async () => {
  const server = createServer();
  realtime = createRealtime(server, {
    allowedOrigins: [],
    redis: null,
    log: logs.log,
    authenticate: async (cookie) => {
      if (cookie === 'psession=down') throw failedQuery(refused);
      if (cookie === 'psession=broken') throw failedQuery();
      return cookie === 'psession=ok'
        ? { userId: 7, sessionId: 70, username: 'seven', permissionLevel: 0, stranger: false }
        : null;
    },
  });
  // Two events of the client protocol, standing for any: one answers, one refuses.
  realtime.on('room:leave', Payload, async (socket, p: { n: number }) => ({
    doubled: p.n * 2,
    user: socket.data.userId,
  }));
  realtime.on('vm:unwatch', Payload, async (_socket, p: { n: number }) => {
    if (p.n === 0) throw appError('ERR_FORBIDDEN');
    if (p.n === 2) throw failedQuery(refused);
    throw failedQuery();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const c of clients) c.close();
  await realtime.close();
  await realtime.closeAdapter(); // closes the HTTP server too
});

async function connect(cookie = 'psession=ok'): Promise<ClientSocket> {
  const socket = ioClient(url, {
    transports: ['websocket'],
    extraHeaders: { cookie },
    forceNew: true,
    reconnection: false,
  });
  clients.push(socket);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('connect_error', reject);
  });
  return socket;
}

describe('realtime.on', () => {
  it('answers a valid payload with the handler’s result, for each socket with its own data', async () => {
    const [a, b] = [await connect(), await connect()];
    expect(await a.emitWithAck('room:leave', { n: 3 })).toEqual({ ok: true, doubled: 6, user: 7 });
    expect(await b.emitWithAck('room:leave', { n: 5 })).toEqual({ ok: true, doubled: 10, user: 7 });
  });

  it('answers ERR_VALIDATION for a payload that fails its schema, and error acks for failures', async () => {
    const s = await connect();
    for (const bad of [{ n: 11 }, { n: 1, extra: true }, 'text', null, undefined]) {
      expect(await s.emitWithAck('room:leave', bad)).toMatchObject({ ok: false, code: 'ERR_VALIDATION' });
    }
    expect(await s.emitWithAck('vm:unwatch', { n: 0 })).toMatchObject({ ok: false, code: 'ERR_FORBIDDEN' });
    expect(await s.emitWithAck('vm:unwatch', { n: 1 })).toMatchObject({ ok: false, code: 'ERR_INTERNAL' });
    expect(await s.emitWithAck('vm:unwatch', { n: 2 })).toMatchObject({ ok: false, code: 'ERR_SERVICE_UNAVAILABLE' });
  });

  it('logs a failed event through the app logger: a bug at error with its stack, a store outage at warn, no query values', async () => {
    const s = await connect();
    const before = logs.lines().length;
    await s.emitWithAck('vm:unwatch', { n: 1 });
    await s.emitWithAck('vm:unwatch', { n: 2 });
    const [bug, outage] = logs.lines().slice(before);
    expect(bug).toMatchObject({ level: LEVEL.error, event: 'vm:unwatch', msg: 'unexpected error' });
    expect((bug?.err as { stack?: string } | undefined)?.stack).toMatch(/^Error: Failed query: select/);
    expect(outage).toMatchObject({
      level: LEVEL.warn,
      event: 'vm:unwatch',
      msg: 'backing store unavailable',
      store_error: { code: 'ECONNREFUSED' },
    });
    expect(outage).not.toHaveProperty('err');
    expect(logs.text()).not.toContain(SECRET);
  });
});

describe('the handshake', () => {
  /** The error a connection attempt with `cookie` is refused with. */
  const refusal = async (cookie: string) => {
    const s = await connect(cookie).catch((err: Error) => err);
    return s instanceof Error ? s.message : 'connected';
  };

  it('refuses with ERR_SERVICE_UNAVAILABLE when a store cannot be reached, logged at warn', async () => {
    const before = logs.lines().length;
    expect(await refusal('psession=down')).toBe('ERR_SERVICE_UNAVAILABLE');
    expect(logs.lines().slice(before)).toMatchObject([
      { level: LEVEL.warn, msg: 'backing store unavailable', store_error: { code: 'ECONNREFUSED' } },
    ]);
  });

  it('refuses with ERR_INTERNAL when the look-up fails otherwise, logged at error without query values', async () => {
    const before = logs.lines().length;
    expect(await refusal('psession=broken')).toBe('ERR_INTERNAL');
    expect(logs.lines().slice(before)).toMatchObject([{ level: LEVEL.error, msg: 'unexpected error' }]);
    expect(logs.text()).not.toContain(SECRET);
  });

  it('refuses an unknown session with ERR_UNAUTHENTICATED, logging nothing', async () => {
    const before = logs.lines().length;
    expect(await refusal('psession=nobody')).toBe('ERR_UNAUTHENTICATED');
    expect(logs.lines().slice(before)).toEqual([]);
  });

  it('ignores events nobody registered and events sent without an ack, and keeps serving the socket', async () => {
    const s = await connect();
    s.emit('no:such:event', { n: 1 });
    s.emit('room:leave', { n: 1 });
    s.emit('room:leave', { n: 99 });
    expect(await s.emitWithAck('room:leave', { n: 4 })).toEqual({ ok: true, doubled: 8, user: 7 });
    expect(s.connected).toBe(true);
  });

  it('keeps no listener per socket for registered events, and refuses registering an event twice', async () => {
    await connect();
    const [server] = [...realtime.io.of('/').sockets.values()];
    expect(server?.listenerCount('room:leave')).toBe(0);
    expect(() => realtime.on('room:leave', Payload, async () => ({}))).toThrow(/twice/);
  });
});
