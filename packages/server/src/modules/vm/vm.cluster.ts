import { randomUUID } from 'node:crypto';
import { appError, connectionFailure, toErrorBody, UNAVAILABLE_RETRY_AFTER_SECONDS } from '../../platform/errors.js';
import type { StateStore, Unsubscribe } from '../../platform/state/index.js';
import type { VmFrame } from '../../platform/vm/provider.js';

/**
 * Where a room runs: the node that started it, and whether its browser is up yet, or going (a stop
 * in progress there: the room counts as not running, and a start elsewhere waits for the stop).
 */
export interface RoomPlace {
  node: string;
  state: 'starting' | 'running' | 'stopping';
}

const PLACE_STATES: readonly string[] = ['starting', 'running', 'stopping'] satisfies RoomPlace['state'][];

/** Everything a node broadcasts about rooms to every node (itself included). */
export type RoomEvent = { type: 'stopped'; chatId: number; reason: string };

/** An entry in the room map outlives its owner by this long when the owner stops refreshing it. */
export const PLACE_TTL_MS = 15_000;
/** A request to another node fails after this long (that node is gone or stuck). */
const CALL_TIMEOUT_MS = 10_000;

type Handler = (op: string, args: unknown) => Promise<unknown>;

/**
 * The room VM's cluster plumbing over the coordination port (platform/state): the room → node map
 * (`vm:room:<chat>` → `{node, state}`, refreshed by the owner, expiring when it dies), requests to
 * the node that runs a room (`vm:rpc:<node>` with answers on `vm:rpc-reply:<node>`), broadcasts
 * (`vm:events`), and a room's frames for the nodes that have viewers of it (`vm:frames:<chat>`,
 * once per frame whatever the number of viewers). In embedded mode the same code runs on the
 * in-process store: this node owns every room and nothing crosses a node.
 */
export function makeVmCluster(
  state: StateStore,
  opts: {
    /**
     * A failure nobody awaits (a reply that could not be sent), and one this node met serving
     * another node's request: logged, never thrown out.
     */
    log: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };
    nodeId?: string;
  },
) {
  const { log, nodeId = randomUUID() } = opts;
  const key = (chatId: number) => `vm:room:${chatId}`;
  const pending = new Map<string, { resolve(v: unknown): void; reject(e: unknown): void; timer: NodeJS.Timeout }>();
  const eventHandlers = new Set<(e: RoomEvent) => void>();
  const subscriptions: Promise<Unsubscribe>[] = [];
  let handler: Handler = async () => {
    throw appError('ERR_INTERNAL');
  };

  const parsePlace = (raw: string | null): RoomPlace | null => {
    if (!raw) return null;
    try {
      const p = JSON.parse(raw) as RoomPlace;
      return typeof p.node === 'string' && PLACE_STATES.includes(p.state) ? p : null;
    } catch {
      return null;
    }
  };

  const ready = Promise.all([
    state.subscribe(`vm:rpc:${nodeId}`, (raw) => {
      const msg = JSON.parse(raw) as { id: string; from: string; op: string; args: unknown };
      // Nobody awaits the reply: a publish that fails (a Redis blip) is logged, and the caller
      // times out (CALL_TIMEOUT_MS). Unhandled, it would end the process.
      handler(msg.op, msg.args)
        .then(
          (result) => state.publish(`vm:rpc-reply:${msg.from}`, JSON.stringify({ id: msg.id, result })),
          (err: unknown) => {
            const error = replyError(err, log, { op: msg.op, from: msg.from });
            return state.publish(`vm:rpc-reply:${msg.from}`, JSON.stringify({ id: msg.id, error }));
          },
        )
        .catch((err: unknown) => log.warn({ err, op: msg.op, to: msg.from }, 'room VM reply to another node failed'));
    }),
    state.subscribe(`vm:rpc-reply:${nodeId}`, (raw) => {
      const msg = JSON.parse(raw) as {
        id: string;
        result?: unknown;
        error?: { code: never; message: string; extra?: never };
      };
      const p = pending.get(msg.id);
      if (!p) return;
      pending.delete(msg.id);
      clearTimeout(p.timer);
      if (msg.error) p.reject(appError(msg.error.code, msg.error.message, msg.error.extra));
      else p.resolve(msg.result);
    }),
    state.subscribe('vm:events', (raw) => {
      const e = JSON.parse(raw) as RoomEvent;
      for (const h of eventHandlers) h(e);
    }),
  ]);
  // Failed subscriptions reject `ready` (start-up awaits it); this copy of it must not reject unheard.
  subscriptions.push(
    ready.then(
      (u) => async () => void (await Promise.all(u.map((f) => f()))),
      () => async () => {},
    ),
  );

  return {
    nodeId,
    /** Resolves once this node hears requests and broadcasts. */
    ready: ready.then(() => {}),

    async placeOf(chatId: number): Promise<RoomPlace | null> {
      return parsePlace(await state.get(key(chatId)));
    },
    /** Claims a stopped room for this node (state starting); the current place when another holds it. */
    async claim(chatId: number): Promise<RoomPlace | null> {
      const mine: RoomPlace = { node: nodeId, state: 'starting' };
      if (await state.setIfAbsent(key(chatId), JSON.stringify(mine), PLACE_TTL_MS)) return null;
      return (await this.placeOf(chatId)) ?? { node: '', state: 'starting' };
    },
    /**
     * The owner keeps its rooms in the map (called every sweep; the entry expires if it stops). An
     * entry another node holds is left alone (this node paused past the lifetime and the room was
     * claimed meanwhile): answers false, and the caller's room is not this node's any more. So is
     * this node's own entry marked stopping, but by the stop itself: the stop releases it, and a
     * sweep's refresh racing the stop must not mark the room running again.
     */
    async hold(chatId: number, s: RoomPlace['state']): Promise<boolean> {
      const value = JSON.stringify({ node: nodeId, state: s });
      const mine = (p: RoomPlace | null) => p?.node === nodeId && (p.state !== 'stopping' || s === 'stopping');
      // A write of this node's own in between (the sweep's hold and a launch's) changes the value
      // but not its holder: read again. Another node's entry, or a stop's, ends it.
      for (let attempt = 0; attempt < 5; attempt++) {
        const raw = await state.get(key(chatId));
        if (raw === null) {
          if (await state.setIfAbsent(key(chatId), value, PLACE_TTL_MS)) return true;
        } else if (!mine(parsePlace(raw))) return false;
        else if (await state.replaceIf(key(chatId), raw, value, PLACE_TTL_MS)) return true;
      }
      return mine(await this.placeOf(chatId));
    },
    /** Removes this node's entry; never one another node holds (compare-and-delete). */
    async release(chatId: number): Promise<void> {
      const raw = await state.get(key(chatId));
      if (raw !== null && parsePlace(raw)?.node === nodeId) await state.delIf(key(chatId), raw);
    },

    /** Serves requests from other nodes (`call`): one handler for every operation. */
    serve(h: Handler): void {
      handler = h;
    },
    /** Runs `op` on `node` (this node: directly) and answers what its handler answered or threw. */
    async call<T>(node: string, op: string, args: unknown): Promise<T> {
      if (node === nodeId) return (await handler(op, args)) as T;
      const id = randomUUID();
      const answer = new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => {
          pending.delete(id);
          reject(appError('ERR_ROOM_NOT_RUNNING', 'The node running this room did not answer.'));
        }, CALL_TIMEOUT_MS);
        timer.unref();
        pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer });
      });
      try {
        await state.publish(`vm:rpc:${node}`, JSON.stringify({ id, from: nodeId, op, args }));
      } catch (err) {
        // Not sent: no answer will come, so no timeout may reject `answer` later with nobody listening.
        clearTimeout(pending.get(id)?.timer);
        pending.delete(id);
        throw err;
      }
      return answer;
    },

    async broadcast(e: RoomEvent): Promise<void> {
      await state.publish('vm:events', JSON.stringify(e));
    },
    onEvent(h: (e: RoomEvent) => void): void {
      eventHandlers.add(h);
    },

    async publishFrame(chatId: number, f: VmFrame): Promise<void> {
      await state.publish(`vm:frames:${chatId}`, encodeFrame(f));
    },
    subscribeFrames(chatId: number, onFrame: (f: VmFrame) => void): Promise<Unsubscribe> {
      return state.subscribe(`vm:frames:${chatId}`, (raw) => onFrame(decodeFrame(raw)));
    },

    async close(): Promise<void> {
      for (const p of pending.values()) clearTimeout(p.timer);
      pending.clear();
      await Promise.all(subscriptions.map((s) => s.then((u) => u()).catch(() => {})));
    },
  };
}

/**
 * What the caller of a failed request is told: a refusal (AppError) as it is; a store this node
 * cannot reach as 503 ERR_SERVICE_UNAVAILABLE with Retry-After, as every outage is answered; anything
 * else as a bare ERR_INTERNAL. Only this node has the error, so it logs the last two as the error
 * handler does (errors.ts): the outage at warn without a stack, the unexpected failure at error
 * with its stack. `request` names the request in the log line.
 */
function replyError(
  err: unknown,
  log: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void },
  request: { op: string; from: string },
) {
  const { body, unexpected, unavailable } = toErrorBody(err);
  const { code, message, ...extra } = body;
  if (unexpected) log.error({ err, ...request }, 'unexpected error serving another node');
  if (unavailable) {
    const cause = connectionFailure(err);
    log.warn(
      { store_error: { type: cause?.name, code: cause?.code, message: cause?.message }, ...request },
      'backing store unavailable',
    );
    return { code, message, extra: { retry_after: UNAVAILABLE_RETRY_AFTER_SECONDS } };
  }
  return { code, message, extra };
}

export function encodeFrame(f: VmFrame): string {
  return JSON.stringify({ seq: f.seq, width: f.width, height: f.height, data: f.data.toString('base64') });
}

export function decodeFrame(raw: string): VmFrame {
  const b = JSON.parse(raw) as { seq: number; width: number; height: number; data: string };
  return { seq: b.seq, mime: 'image/jpeg', width: b.width, height: b.height, data: Buffer.from(b.data, 'base64') };
}

export type VmCluster = ReturnType<typeof makeVmCluster>;
