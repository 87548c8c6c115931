import { EventEmitter } from 'node:events';
import type { FastifyBaseLogger } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { clearRedisPrefix, redisForUnitCases, SERVICE_URLS } from '../../test/support/services.js';
import { type HeldPresence, trackNodePresence } from './node-presence.js';
import type { Io } from './realtime.js';

const redisProblem = await redisForUnitCases('the Redis node presence tests');

const clients: Redis[] = [];
const prefixes: string[] = [];
afterAll(async () => {
  for (const p of prefixes) await clearRedisPrefix(p);
  for (const c of clients) c.disconnect();
});

const log = { warn: vi.fn(), info: vi.fn() } as unknown as FastifyBaseLogger;

/** A node: a namespace whose room events the test drives, and its presence in Redis. */
function node(prefix: string) {
  const adapter = new EventEmitter();
  const sockets = new Map<string, { data: { userId: number; sessionId: number } }>();
  const io = { of: () => ({ adapter, sockets }), on: () => {}, off: () => {} } as unknown as Io;
  const redis = new Redis(SERVICE_URLS.redis, { maxRetriesPerRequest: 0 });
  clients.push(redis);
  const lost: HeldPresence[][] = [];
  const back: HeldPresence[][] = [];
  const presence = trackNodePresence(io, {
    redis,
    prefix,
    log,
    lost: (g) => lost.push(g),
    back: (h) => back.push(h),
  });
  let n = 0;
  return {
    presence,
    redis,
    lost,
    back,
    /** A socket of the session entering a chat's room. */
    enter(chatId: number, userId: number, sessionId: number) {
      const id = `s${++n}`;
      sockets.set(id, { data: { userId, sessionId } });
      adapter.emit('join-room', `chat:${chatId}`, id);
      return id;
    },
    leave(chatId: number, socketId: string) {
      adapter.emit('leave-room', `chat:${chatId}`, socketId);
    },
  };
}

const freshPrefix = () => {
  const prefix = `parlor-test:np:${Math.random().toString(36).slice(2)}:`;
  prefixes.push(prefix);
  return prefix;
};

describe.skipIf(redisProblem !== null)('trackNodePresence (Redis)', () => {
  it('tells one of many sweepers, once, the presences of a node whose heartbeat expired that no live node holds', async () => {
    const prefix = freshPrefix();
    const [dead, x, y] = [node(prefix), node(prefix), node(prefix)];
    await Promise.all([dead.presence.beat(), x.presence.beat(), y.presence.beat()]);
    dead.enter(1, 7, 70);
    dead.enter(2, 7, 70);
    dead.enter(1, 8, 80);
    // Session 80 is in chat 1 on x too: still present there.
    x.enter(1, 8, 80);
    await dead.presence.beat();
    await x.presence.beat();
    // Killed: no more heartbeats, and its heartbeat key expires.
    dead.redis.disconnect();
    await x.redis.del(`${prefix}presence:alive:${dead.presence.nodeId}`);
    await Promise.all([x.presence.beat(), y.presence.beat(), x.presence.beat(), y.presence.beat()]);
    const told = [...x.lost, ...y.lost];
    expect(told).toHaveLength(1);
    expect(told[0]?.sort((p, q) => p.chatId - q.chatId)).toEqual([
      { chatId: 1, userId: 7, sessionId: 70 },
      { chatId: 2, userId: 7, sessionId: 70 },
    ]);
    expect(await x.redis.exists(`${prefix}presence:held:${dead.presence.nodeId}`)).toBe(0);
    await Promise.all([x.presence.close(), y.presence.close()]);
  });

  it('holds a session while any of its sockets on the node is in the room', async () => {
    const prefix = freshPrefix();
    const n = node(prefix);
    await n.presence.beat();
    const one = n.enter(3, 9, 90);
    const two = n.enter(3, 9, 90);
    const held = () => n.redis.smembers(`${prefix}presence:held:${n.presence.nodeId}`);
    await expect.poll(held).toEqual(['3:9:90']);
    const presence = { chatId: 3, userId: 9, sessionId: 90 };
    expect(n.presence.holds(presence)).toBe(true);
    expect(n.presence.holds({ ...presence, chatId: 4 })).toBe(false);
    n.leave(3, one);
    await n.presence.beat();
    expect(await held()).toEqual(['3:9:90']);
    expect(n.presence.holds(presence)).toBe(true);
    n.leave(3, two);
    await expect.poll(held).toEqual([]);
    // What `back` is told is checked against this before it is said online (wiring/chats.ts).
    expect(n.presence.holds(presence)).toBe(false);
    await n.presence.close();
  });

  it('a node swept as dead (it stalled) writes its set again and says its presences are back', async () => {
    const prefix = freshPrefix();
    const [stalled, x] = [node(prefix), node(prefix)];
    await Promise.all([stalled.presence.beat(), x.presence.beat()]);
    stalled.enter(4, 5, 50);
    await stalled.presence.beat();
    await x.redis.del(`${prefix}presence:alive:${stalled.presence.nodeId}`);
    await x.presence.beat();
    expect(x.lost).toEqual([[{ chatId: 4, userId: 5, sessionId: 50 }]]);
    await stalled.presence.beat();
    expect(stalled.back).toEqual([[{ chatId: 4, userId: 5, sessionId: 50 }]]);
    expect(await x.redis.smembers(`${prefix}presence:held:${stalled.presence.nodeId}`)).toEqual(['4:5:50']);
    await Promise.all([stalled.presence.close(), x.presence.close()]);
  });

  it('leaves nothing to sweep when it closes (a shutdown announces its own sessions)', async () => {
    const prefix = freshPrefix();
    const [leaving, x] = [node(prefix), node(prefix)];
    await Promise.all([leaving.presence.beat(), x.presence.beat()]);
    leaving.enter(6, 1, 10);
    await leaving.presence.beat();
    await leaving.presence.close();
    await x.presence.beat();
    expect(x.lost).toEqual([]);
    expect(await x.redis.smembers(`${prefix}presence:nodes`)).toEqual([x.presence.nodeId]);
    await x.presence.close();
  });

  it('a swept node whose rewrite fails once writes its set again at a later heartbeat', async () => {
    const prefix = freshPrefix();
    const [stalled, x] = [node(prefix), node(prefix)];
    await Promise.all([stalled.presence.beat(), x.presence.beat()]);
    stalled.enter(4, 5, 50);
    await stalled.presence.beat();
    // Stalled past its TTL: swept by x (its held set deleted, its presence said offline).
    await x.redis.del(`${prefix}presence:alive:${stalled.presence.nodeId}`);
    await x.presence.beat();
    expect(x.lost).toEqual([[{ chatId: 4, userId: 5, sessionId: 50 }]]);
    // Its next beat registers it again, but the rewrite of its set fails (a Redis blip).
    const multi = stalled.redis.multi.bind(stalled.redis);
    let calls = 0;
    (stalled.redis as any).multi = (...args: unknown[]) => {
      const m = (multi as any)(...args);
      if (++calls === 2) m.exec = async () => Promise.reject(new Error('blip'));
      return m;
    };
    await stalled.presence.beat();
    (stalled.redis as any).multi = multi;
    // Later heartbeats: the set should be back in Redis and the chats told it is online again.
    await stalled.presence.beat();
    await stalled.presence.beat();
    expect(await x.redis.smembers(`${prefix}presence:held:${stalled.presence.nodeId}`)).toEqual(['4:5:50']);
    expect(stalled.back).toEqual([[{ chatId: 4, userId: 5, sessionId: 50 }]]);
    await Promise.all([stalled.presence.close(), x.presence.close()]);
  });

  it('a room entered after close() leaves no key without a TTL', async () => {
    const prefix = freshPrefix();
    const n = node(prefix);
    await n.presence.beat();
    await n.presence.close();
    n.enter(9, 1, 10); // a join served while the node shuts down, before io.close(): no listener left
    const key = `${prefix}presence:held:${n.presence.nodeId}`;
    await new Promise((r) => setTimeout(r, 100));
    // -2: no key; -1: a key that never expires (and no node would ever sweep it: it left `nodes`).
    expect(await n.redis.pttl(key)).not.toBe(-1);
  });

  it('a node restarted with a new id: the sessions its new self holds again are not said offline', async () => {
    const prefix = freshPrefix();
    const [old, x] = [node(prefix), node(prefix)];
    await Promise.all([old.presence.beat(), x.presence.beat()]);
    old.enter(1, 7, 70);
    old.enter(1, 8, 80);
    await old.presence.beat();
    old.redis.disconnect(); // killed
    const fresh = node(prefix); // restarted: a new id; session 70 came back to it
    await fresh.presence.beat();
    fresh.enter(1, 7, 70);
    await fresh.presence.beat();
    await x.redis.del(`${prefix}presence:alive:${old.presence.nodeId}`);
    await Promise.all([x.presence.beat(), fresh.presence.beat()]);
    expect([...x.lost, ...fresh.lost]).toEqual([[{ chatId: 1, userId: 8, sessionId: 80 }]]);
    await Promise.all([x.presence.close(), fresh.presence.close()]);
  });
});
