import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import type { Io } from './realtime.js';

/** How often a node says it is alive and sweeps the nodes that stopped saying so. */
export const NODE_HEARTBEAT_MS = 5_000;

/**
 * How long a node counts as alive after its last heartbeat: three heartbeats, so one lost to a
 * pause (garbage collection, a slow Redis) is not a death. A node killed outright is noticed by
 * the others within NODE_ALIVE_TTL_MS + NODE_HEARTBEAT_MS of its kill.
 */
export const NODE_ALIVE_TTL_MS = 15_000;

/** The presence held by a node that died, kept this long when no node is left to sweep it. */
const HELD_TTL_S = 24 * 60 * 60;

/** One session present in one chat (a socket of it in the chat's room) on a node. */
export interface HeldPresence {
  chatId: number;
  userId: number;
  sessionId: number;
}

/**
 * Claims every node whose alive key expired, atomically (one sweeper gets each, however many
 * sweep at once), and answers the presences they held that no node still registered holds.
 * ARGV: the key prefix.
 */
const SWEEP = `
local p = ARGV[1]
local nodes = redis.call('SMEMBERS', p .. 'nodes')
local held = {}
for _, n in ipairs(nodes) do
  if redis.call('EXISTS', p .. 'alive:' .. n) == 0 then
    redis.call('SREM', p .. 'nodes', n)
    for _, e in ipairs(redis.call('SMEMBERS', p .. 'held:' .. n)) do held[#held + 1] = e end
    redis.call('DEL', p .. 'held:' .. n)
  end
end
if #held == 0 then return {} end
local live = redis.call('SMEMBERS', p .. 'nodes')
local gone, seen = {}, {}
for _, e in ipairs(held) do
  if not seen[e] then
    seen[e] = true
    local kept = false
    for _, n in ipairs(live) do
      if redis.call('SISMEMBER', p .. 'held:' .. n, e) == 1 then kept = true break end
    end
    if not kept then gone[#gone + 1] = e end
  end
end
return gone
`;

const encode = (h: HeldPresence) => `${h.chatId}:${h.userId}:${h.sessionId}`;
const decode = (raw: string): HeldPresence | null => {
  const [chatId, userId, sessionId] = raw.split(':').map(Number);
  return chatId && userId && sessionId ? { chatId, userId, sessionId } : null;
};

/**
 * Presence that outlives a node killed outright (cluster mode). A node that shuts down announces
 * its sessions offline itself; one killed (SIGKILL, a lost machine) cannot, and the chats' members
 * on the other nodes would list its sessions for good. So each node keeps in Redis a heartbeat key
 * with a TTL and the set of (chat, session) presences its sockets hold, kept from its adapter's
 * room events; every node sweeps (SWEEP) the nodes whose heartbeat expired and tells `lost` the
 * presences no live node holds (the chats hear them go offline), and a node that finds it was swept
 * (stalled longer than the TTL) writes its set again and tells `back` what it holds (online again).
 * That set comes from this node's room events, which may lag behind the cluster's stream (a kick's
 * sockets-leave not read yet): whoever says it online checks each presence again (`holds`, once
 * the reader has caught up, and the membership: wiring/chats.ts).
 */
export function trackNodePresence(
  io: Io,
  opts: {
    redis: Redis;
    prefix: string;
    log: FastifyBaseLogger;
    lost: (gone: HeldPresence[]) => void;
    back: (held: HeldPresence[]) => void;
  },
) {
  const { redis, log } = opts;
  const nodeId = randomUUID();
  const p = `${opts.prefix}presence:`;
  const heldKey = `${p}held:${nodeId}`;
  /** Presence key → this node's sockets holding it; socket id → its presence keys. */
  const holders = new Map<string, Set<string>>();
  const ofSocket = new Map<string, Map<number, string>>();
  /** A write failed: the whole set is written again at the next heartbeat. */
  let dirty = false;
  /** Registered afresh after a sweep took this node for dead: `back` is told once a rewrite succeeds. */
  let backPending = false;
  /** Closed (a shutdown): room events write nothing more. */
  let closed = false;
  const failed = (err: unknown) => {
    dirty = true;
    log.warn({ err }, 'node presence write failed; rewritten at the next heartbeat');
  };

  const add = (socketId: string, chatId: number, data: { userId?: number; sessionId?: number } | undefined) => {
    if (!data?.userId || !data.sessionId) return;
    const key = encode({ chatId, userId: data.userId, sessionId: data.sessionId });
    const byChat = ofSocket.get(socketId) ?? new Map<number, string>();
    ofSocket.set(socketId, byChat);
    if (byChat.has(chatId)) return;
    byChat.set(chatId, key);
    const sockets = holders.get(key) ?? new Set<string>();
    holders.set(key, sockets);
    sockets.add(socketId);
    // With its expiry: a set this node makes again after a sweep deleted it never outlives it.
    if (sockets.size === 1 && !closed)
      redis.multi().sadd(heldKey, key).expire(heldKey, HELD_TTL_S).exec().catch(failed);
  };
  const remove = (socketId: string, chatId: number) => {
    const byChat = ofSocket.get(socketId);
    const key = byChat?.get(chatId);
    if (!byChat || key === undefined) return;
    byChat.delete(chatId);
    if (byChat.size === 0) ofSocket.delete(socketId);
    const sockets = holders.get(key);
    sockets?.delete(socketId);
    if (sockets && sockets.size === 0) {
      holders.delete(key);
      if (!closed) redis.srem(heldKey, key).catch(failed);
    }
  };
  const chatOf = (room: string) => {
    const id = /^chat:(\d+)$/.exec(room)?.[1];
    return id === undefined ? null : Number(id);
  };
  const nsp = io.of('/');
  // A recovered socket enters its rooms before it is a socket of the namespace: counted at its connect.
  const onJoin = (room: string, id: string) => {
    const chatId = chatOf(room);
    if (chatId !== null) add(id, chatId, nsp.sockets.get(id)?.data);
  };
  const onLeave = (room: string, id: string) => {
    const chatId = chatOf(room);
    if (chatId !== null) remove(id, chatId);
  };
  const onConnection = (socket: { id: string; rooms: Set<string>; data: { userId?: number; sessionId?: number } }) => {
    for (const room of socket.rooms) {
      const chatId = chatOf(room);
      if (chatId !== null) add(socket.id, chatId, socket.data);
    }
  };
  nsp.adapter.on('join-room', onJoin);
  nsp.adapter.on('leave-room', onLeave);
  io.on('connection', onConnection);

  /** Writes this node's whole set again (after a failed write, or once it was swept as dead). */
  const rewrite = async () => {
    const keys = [...holders.keys()];
    const tx = redis.multi().del(heldKey);
    if (keys.length > 0) tx.sadd(heldKey, ...keys);
    await tx.expire(heldKey, HELD_TTL_S).exec();
    // Only once it is written: a failed rewrite is tried again at the next heartbeat.
    dirty = false;
    return keys;
  };

  /** Says this node is alive, then sweeps the nodes that stopped saying so. */
  const beat = async () => {
    const [, added] = ((await redis
      .multi()
      .set(`${p}alive:${nodeId}`, '1', 'PX', NODE_ALIVE_TTL_MS)
      .sadd(`${p}nodes`, nodeId)
      .expire(heldKey, HELD_TTL_S)
      .exec()) ?? []) as [unknown, [Error | null, number] | undefined];
    // Registered afresh: the first beat, or after another node swept this one (it stalled). Its set
    // is written again, and `back` told, at this beat or, when the rewrite fails, at a later one.
    if (added?.[1] === 1) {
      dirty = true;
      if (started) backPending = true;
    }
    started = true;
    if (dirty) {
      const keys = await rewrite();
      if (backPending) {
        backPending = false;
        if (keys.length > 0) {
          log.warn({ node: nodeId, presences: keys.length }, 'this node was swept as dead; its presence is back');
          opts.back(keys.flatMap((k) => decode(k) ?? []));
        }
      }
    }
    const gone = (await redis.eval(SWEEP, 0, p)) as string[];
    if (gone.length > 0) {
      log.info({ presences: gone.length }, 'sessions of a node that stopped are announced offline');
      opts.lost(gone.flatMap((k) => decode(k) ?? []));
    }
  };
  let started = false;
  let running: Promise<void> | null = null;
  const tick = () => {
    if (running) return;
    running = beat()
      .catch((err: unknown) => log.warn({ err }, 'node heartbeat or sweep failed'))
      .finally(() => {
        running = null;
      });
  };
  tick();
  const timer = setInterval(tick, NODE_HEARTBEAT_MS);
  timer.unref();

  return {
    /** This node's id in Redis. */
    nodeId,
    /**
     * Whether a socket of this node is in the chat's room for that session now, as the room events
     * applied so far tell: what `back` lists was held when it was told, and may be gone since.
     */
    holds(h: HeldPresence): boolean {
      return holders.has(encode(h));
    },
    /** Runs one heartbeat and sweep now (tests). */
    async beat(): Promise<void> {
      tick();
      await running;
    },
    /**
     * Stops (a shutdown): this node is no longer counted, and nothing of its set is announced by
     * the others, as its sockets were announced offline as they closed.
     */
    async close(): Promise<void> {
      closed = true;
      clearInterval(timer);
      nsp.adapter.off('join-room', onJoin);
      nsp.adapter.off('leave-room', onLeave);
      io.off('connection', onConnection);
      await running;
      await redis
        .multi()
        .srem(`${p}nodes`, nodeId)
        .del(`${p}alive:${nodeId}`, heldKey)
        .exec()
        .catch((err: unknown) => log.warn({ err }, 'node presence could not be removed'));
    },
  };
}

export type NodePresence = ReturnType<typeof trackNodePresence>;
