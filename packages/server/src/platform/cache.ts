import type { Clock } from './clock.js';

export interface UserCacheOptions<V> {
  /** Most entries kept; past it the least recently used entry goes. */
  max: number;
  /** Milliseconds an entry lives at most: a backstop, since invalidation is what keeps it right. */
  ttlMs: number;
  clock: Clock;
  /** The user an entry describes: invalidation drops every entry of a user at once. */
  userOf(value: V): number;
}

interface Slot<V> {
  value: V;
  userId: number;
  expiresAt: number;
}

/**
 * An in-process read cache of per-user data: LRU-bounded, with a TTL backstop, and invalidated by
 * user id (by the user-change channel, on every node).
 *
 * A read that misses goes to SQL and then stores what it read. If the user changed while that read
 * was in flight, what it read may already be old, so it must not be stored: `begin()` stamps the
 * read, every invalidation moves a counter on, and `set` refuses a value whose user was
 * invalidated after its stamp. `reset` (delivery of invalidations lost or back) empties the cache
 * and refuses every read begun before it.
 *
 * `load` also coalesces concurrent misses of one key into one read (no stampede on a hot user when
 * an entry expires), but a caller only joins a read begun since the last invalidation: joining an
 * older one could hand it a value read before a write that has already answered.
 */
export class UserCache<K, V> {
  private readonly slots = new Map<K, Slot<V>>();
  /** Reads in flight by key, with the epoch they began in. */
  private readonly loading = new Map<K, { stamp: number; value: Promise<V | null> }>();
  private readonly keysOf = new Map<number, Set<K>>();
  /** Moves on with every invalidation and reset. */
  private epoch = 0;
  /** User id → the epoch of its last invalidation (for reads still in flight). */
  private readonly droppedAt = new Map<number, number>();
  /** Reads stamped before this epoch never store (after a reset, or once droppedAt was trimmed). */
  private floor = 0;
  /** False while invalidations may be missed: nothing is served or stored. */
  private live = true;

  constructor(private readonly opts: UserCacheOptions<V>) {}

  private now(): number {
    return this.opts.clock.now().getTime();
  }

  get size(): number {
    return this.slots.size;
  }

  /** The live entry for `key`, which becomes the most recently used; undefined on a miss. */
  get(key: K): V | undefined {
    const slot = this.slots.get(key);
    if (!slot) return undefined;
    if (slot.expiresAt <= this.now()) {
      this.remove(key, slot);
      return undefined;
    }
    this.slots.delete(key);
    this.slots.set(key, slot);
    return slot.value;
  }

  /**
   * The entry for `key` from the cache, or else from `read` (null: nothing to cache), stored
   * unless its user changed meanwhile. Concurrent misses of a key share one read (see above).
   */
  async load(key: K, read: () => Promise<V | null>): Promise<V | null> {
    const cached = this.get(key);
    if (cached !== undefined) return cached;
    const pending = this.loading.get(key);
    if (pending && pending.stamp === this.epoch) return pending.value;
    const stamp = this.epoch;
    const value = read().then((v) => {
      if (v !== null) this.set(key, v, stamp);
      return v;
    });
    const mine = { stamp, value };
    this.loading.set(key, mine);
    try {
      return await value;
    } finally {
      if (this.loading.get(key) === mine) this.loading.delete(key);
    }
  }

  /** Stamps a read that is about to go to the source; pass the stamp to `set`. */
  begin(): number {
    return this.epoch;
  }

  /** Stores what a read stamped `stamp` found, unless its user changed since; true when stored. */
  set(key: K, value: V, stamp: number): boolean {
    const userId = this.opts.userOf(value);
    if (!this.live || stamp < this.floor || (this.droppedAt.get(userId) ?? -1) > stamp) return false;
    const old = this.slots.get(key);
    if (old) this.remove(key, old);
    this.slots.set(key, { value, userId, expiresAt: this.now() + this.opts.ttlMs });
    let keys = this.keysOf.get(userId);
    if (!keys) {
      keys = new Set();
      this.keysOf.set(userId, keys);
    }
    keys.add(key);
    for (const [oldest, slot] of this.slots) {
      if (this.slots.size <= this.opts.max) break;
      this.remove(oldest, slot);
    }
    return true;
  }

  delete(key: K): void {
    const slot = this.slots.get(key);
    if (slot) this.remove(key, slot);
  }

  /** Drops every entry of these users, and any read of them still in flight. */
  invalidate(userIds: Iterable<number>): void {
    this.epoch += 1;
    for (const id of userIds) {
      this.droppedAt.set(id, this.epoch);
      const keys = this.keysOf.get(id);
      if (!keys) continue;
      for (const key of keys) this.slots.delete(key);
      this.keysOf.delete(id);
    }
    // Bounded memory: forget per-user epochs and refuse every read in flight instead.
    if (this.droppedAt.size > this.opts.max) {
      this.droppedAt.clear();
      this.floor = this.epoch;
    }
  }

  /** Empties the cache and refuses reads in flight; while not `live`, it neither serves nor stores. */
  reset(live: boolean): void {
    this.epoch += 1;
    this.floor = this.epoch;
    this.slots.clear();
    this.keysOf.clear();
    this.droppedAt.clear();
    this.live = live;
  }

  private remove(key: K, slot: Slot<V>): void {
    this.slots.delete(key);
    const keys = this.keysOf.get(slot.userId);
    keys?.delete(key);
    if (keys?.size === 0) this.keysOf.delete(slot.userId);
  }
}

/**
 * A value read at most once per `ttlMs` on this node (a figure everyone may ask for, like the public
 * statistics): calls within the window get the value read at its start, and calls while it is
 * being read again share that read. A failed read is not kept: the next call reads again.
 */
export function cachedFor<T>(ttlMs: number, clock: Clock, read: () => Promise<T>): () => Promise<T> {
  let kept: { at: number; value: T } | null = null;
  let reading: Promise<T> | null = null;
  return () => {
    const now = clock.now().getTime();
    if (kept && now - kept.at < ttlMs) return Promise.resolve(kept.value);
    reading ??= read()
      .then((value) => {
        kept = { at: now, value };
        return value;
      })
      .finally(() => {
        reading = null;
      });
    return reading;
  };
}
