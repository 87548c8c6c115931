import { randomBytes } from 'node:crypto';
import { afterCommit, inTransaction } from '../../platform/db/after-commit.js';
import type { StateStore, Unsubscribe } from '../../platform/state/index.js';

/** The coordination channel that tells every node which users changed (under the Redis prefix). */
export const USER_CHANGES_CHANNEL = 'users:changed';

/**
 * The hook the stores call after writing users, their sessions or their linked platforms, with
 * the handle they wrote through (a transaction or the database).
 */
export type UsersChanged = (userIds: number[], tx: object) => Promise<void>;

/** A hook that tells nobody: stores built without the change channel (unit tests). */
export const noUsersChanged: UsersChanged = async () => {};

/** What a cache fed by the channel offers (UserCache does). */
export interface ChangeListener {
  invalidate(userIds: Iterable<number>): void;
  reset(live: boolean): void;
}

export interface UserChangesDeps {
  state: Pick<StateStore, 'publish' | 'subscribe'>;
  /** A publish failed: the write stands, but other nodes may serve the old state up to their caches' TTL. */
  onError(err: unknown): void;
  /** How long a write waits for its own message to come back (ECHO_WAIT_MS by default). */
  echoWaitMs?: number;
}

/**
 * How long a write waits (ms) for its own change message to come back through the channel before
 * it answers anyway: the echo is what shows every node's subscription has been sent the message.
 */
export const ECHO_WAIT_MS = 1_000;

/** A change message: the users, and the publishing node's tag for it (so it knows its own echo). */
export interface ChangeMessage {
  u: number[];
  n?: string;
}

const isIds = (ids: unknown): ids is number[] => Array.isArray(ids) && ids.every((id) => Number.isSafeInteger(id));

/** Parses a message: `{u: ids, n: tag}` or a bare JSON array of ids; null for anything else. */
export function parseChange(message: string): ChangeMessage | null {
  try {
    const m: unknown = JSON.parse(message);
    if (isIds(m)) return { u: m };
    if (typeof m !== 'object' || m === null) return null;
    const { u, n } = m as Record<string, unknown>;
    if (!isIds(u) || (n !== undefined && typeof n !== 'string')) return null;
    return n === undefined ? { u } : { u, n };
  } catch {
    return null;
  }
}

/**
 * The user-change channel that keeps the per-node read caches (sessions and profiles) right.
 *
 * Stores call `changed(userIds, tx)` after each write that a cache could hold. Outside a
 * transaction the statement has committed, so the change is published at once. Inside one it is
 * published only once the transaction commits (platform/db/after-commit.ts), and before the
 * request answers: published earlier, another node could drop its entry, miss again, read the
 * still-uncommitted old row and cache it again for the whole TTL. A read that is in flight when the
 * message arrives does not store what it read (UserCache stamps). So the next request after a
 * write's answer sees the write, on every node.
 *
 * The publishing node drops its own entries first, synchronously, and then waits (up to
 * ECHO_WAIT_MS) for its own message to come back through its subscription before the write
 * answers. Redis answers PUBLISH once the message is queued for every subscriber, but another
 * node reads it from its socket only later: a client that got the answer from node A and asked
 * node B at once could reach B first. Redis sends one message to all subscribers in the same
 * pass, so once A has read its echo, B's copy is on its way as well, ahead of any request the
 * client can make after A's answer. In memory (embedded) delivery is synchronous anyway. While
 * messages may be missed (Redis subscriber connection down), the caches are emptied and bypassed.
 */
export function makeUserChanges({ state, onError, echoWaitMs = ECHO_WAIT_MS }: UserChangesDeps) {
  const listeners: ChangeListener[] = [];
  const pending = new WeakMap<object, Set<number>>();
  /** This node's messages still on their way back: tag → what resolves the waiting write. */
  const echoes = new Map<string, () => void>();
  const node = randomBytes(6).toString('base64url');
  let sequence = 0;
  let unsubscribe: Unsubscribe | null = null;
  let live = false;

  const drop = (ids: number[]) => {
    for (const l of listeners) l.invalidate(ids);
  };
  const resetAll = (isLive: boolean) => {
    live = isLive;
    for (const l of listeners) l.reset(isLive);
    // With delivery lost or back, no echo is worth waiting for: the caches were just emptied.
    if (!isLive) for (const tag of [...echoes.keys()]) echoes.get(tag)?.();
  };

  /** Resolves once the tagged message is back, or after echoWaitMs, or once delivery is lost. */
  const echoOf = (tag: string) => {
    let timer: NodeJS.Timeout | undefined;
    const back = new Promise<void>((resolve) => {
      echoes.set(tag, () => {
        echoes.delete(tag);
        clearTimeout(timer);
        resolve();
      });
      timer = setTimeout(() => echoes.get(tag)?.(), echoWaitMs);
      timer.unref();
    });
    return back;
  };

  const publish = async (ids: number[]) => {
    drop(ids);
    const tag = `${node}:${++sequence}`;
    // Registered first: in memory the echo arrives before publish resolves.
    const back = live ? echoOf(tag) : null;
    try {
      await state.publish(USER_CHANGES_CHANNEL, JSON.stringify({ u: ids, n: tag } satisfies ChangeMessage));
      await back;
    } catch (err) {
      echoes.get(tag)?.();
      onError(err);
    }
  };

  const changed: UsersChanged = async (userIds, tx) => {
    if (userIds.length === 0) return;
    if (!inTransaction(tx)) return publish(userIds);
    let ids = pending.get(tx);
    if (!ids) {
      const batch = new Set<number>();
      ids = batch;
      pending.set(tx, batch);
      // One message per transaction, with every user it changed.
      await afterCommit(tx, () => publish([...batch]));
    }
    for (const id of userIds) ids.add(id);
  };

  return {
    changed,

    /** Feeds caches from the channel; they serve nothing until `start` has subscribed. */
    attach(...caches: ChangeListener[]) {
      for (const cache of caches) {
        listeners.push(cache);
        cache.reset(live);
      }
    },

    /** Subscribes; the caches go live once the subscription is. */
    async start() {
      unsubscribe = await state.subscribe(
        USER_CHANGES_CHANNEL,
        (message) => {
          const change = parseChange(message);
          // An unreadable message names nobody, so every entry may be stale.
          if (change) drop(change.u);
          else resetAll(live);
          if (change?.n !== undefined) echoes.get(change.n)?.();
        },
        resetAll,
      );
      resetAll(true);
    },

    async stop() {
      const stopping = unsubscribe;
      unsubscribe = null;
      resetAll(false);
      await stopping?.();
    },
  };
}

export type UserChanges = ReturnType<typeof makeUserChanges>;
