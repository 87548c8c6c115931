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
}

/** Parses a message: a JSON array of user ids, or null for anything else. */
function parseIds(message: string): number[] | null {
  try {
    const ids: unknown = JSON.parse(message);
    return Array.isArray(ids) && ids.every((id) => Number.isSafeInteger(id)) ? (ids as number[]) : null;
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
 * The publishing node drops its own entries first, synchronously: Redis also echoes the message
 * back to it, but asynchronously. In memory (embedded) delivery is synchronous anyway. While
 * messages may be missed (Redis subscriber connection down), the caches are emptied and bypassed.
 */
export function makeUserChanges({ state, onError }: UserChangesDeps) {
  const listeners: ChangeListener[] = [];
  const pending = new WeakMap<object, Set<number>>();
  let unsubscribe: Unsubscribe | null = null;
  let live = false;

  const drop = (ids: number[]) => {
    for (const l of listeners) l.invalidate(ids);
  };
  const resetAll = (isLive: boolean) => {
    live = isLive;
    for (const l of listeners) l.reset(isLive);
  };

  const publish = async (ids: number[]) => {
    drop(ids);
    try {
      await state.publish(USER_CHANGES_CHANNEL, JSON.stringify(ids));
    } catch (err) {
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
          const ids = parseIds(message);
          // An unreadable message names nobody, so every entry may be stale.
          if (ids) drop(ids);
          else resetAll(live);
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
