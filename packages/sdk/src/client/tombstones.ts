/**
 * How long a deleted message id is kept as a tombstone: the recovery window (docs/api.md, Cluster
 * mode). A `message:new` sent through another node may arrive after the deletion of its message;
 * a connection away longer is not recovered and reads history afresh, where the message is gone.
 */
export const TOMBSTONE_TTL_MS = 2 * 60_000;
/** The most tombstones kept: past it the oldest go first, so a burst of deletions stays bounded. */
export const TOMBSTONES_MAX = 10_000;

/**
 * The ids of deleted messages, per chat, each for `ttlMs`: a `message:new` naming one is dropped.
 * Ids are kept in the order they were deleted, which is their order of expiry.
 */
export class Tombstones {
  readonly #expiry = new Map<string, number>();
  readonly #now: () => number;
  readonly #ttlMs: number;
  readonly #max: number;

  constructor(opts: { now?: () => number; ttlMs?: number; max?: number } = {}) {
    this.#now = opts.now ?? Date.now;
    this.#ttlMs = opts.ttlMs ?? TOMBSTONE_TTL_MS;
    this.#max = opts.max ?? TOMBSTONES_MAX;
  }

  /** How many are kept (expired ones may remain until the next `add` or `has`). */
  get size(): number {
    return this.#expiry.size;
  }

  add(chatId: number, ids: readonly string[]): void {
    this.#prune();
    const until = this.#now() + this.#ttlMs;
    for (const id of ids) {
      const key = `${chatId}:${id}`;
      this.#expiry.delete(key); // Re-inserted last: the order stays the order of expiry.
      this.#expiry.set(key, until);
    }
    for (const key of this.#expiry.keys()) {
      if (this.#expiry.size <= this.#max) break;
      this.#expiry.delete(key);
    }
  }

  has(chatId: number, id: string): boolean {
    this.#prune();
    return this.#expiry.has(`${chatId}:${id}`);
  }

  #prune(): void {
    const now = this.#now();
    for (const [key, until] of this.#expiry) {
      if (until > now) break;
      this.#expiry.delete(key);
    }
  }
}
