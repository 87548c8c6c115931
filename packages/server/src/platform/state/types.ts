/**
 * The coordination port: short-lived shared state (login codes, pending sets, rate limits).
 * Embedded mode keeps it in process; cluster mode keeps it in Redis so every node sees the same.
 * Both implementations pass one contract suite (state.contract.ts).
 */
export interface StateStore {
  readonly kind: 'memory' | 'redis';
  get(key: string): Promise<string | null>;
  /** Sets a value that disappears after ttlMs. */
  set(key: string, value: string, ttlMs: number): Promise<void>;
  /** Sets only if the key is absent; true when this call set it. */
  setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean>;
  /** Atomically reads and deletes: of two concurrent takes, one gets the value. */
  take(key: string): Promise<string | null>;
  del(...keys: string[]): Promise<void>;
  /** Deletes the key only while it holds `expected`; atomic. True when this call deleted it. */
  delIf(key: string, expected: string): Promise<boolean>;
  /**
   * Sets `value` with a new lifetime only while the key holds `expected` (an absent key is never
   * replaced: see setIfAbsent); atomic. True when this call set it.
   */
  replaceIf(key: string, expected: string, value: string, ttlMs: number): Promise<boolean>;
  /**
   * Adds `members` to an expiring set with one deadline (each member keeps its own: a member added
   * again takes the new one), drops members whose deadline has passed, and returns how many remain
   * and the earliest remaining deadline (`expiresAtMs` when none remain).
   */
  addExpiring(setKey: string, members: string[], expiresAtMs: number): Promise<{ count: number; earliest: number }>;
  removeExpiring(setKey: string, member: string): Promise<void>;
  /**
   * Atomically reads the live members of an expiring set (in no set order) and deletes the set: of
   * two concurrent takes, one gets the members and the other none.
   */
  takeExpiring(setKey: string): Promise<string[]>;
  /**
   * setIfAbsent that counts what it sets, in one atomic step: sets `key` (lifetime ttlMs) only if
   * it is absent and `count.member` fits into the expiring set `count.setKey` (deadline
   * `count.expiresAtMs`) without the set holding more than `count.max` live members, and then adds
   * the member. Answers 'set'; 'present' when the key exists (nothing changes, however full the
   * set is); or `{ full }`, the set's earliest deadline, when the member does not fit (nothing
   * changes). A member already in the set fits (it is counted once).
   */
  setIfAbsentCounted(key: string, value: string, ttlMs: number, count: CountedIn): Promise<CountedSet>;
  countExpiring(setKey: string): Promise<number>;
  /** Whether a member is in the expiring set and not expired. */
  hasExpiring(setKey: string, member: string): Promise<boolean>;
  /**
   * A fixed-window limiter over `points` per `durationMs`, shared by every node. Limiters of one
   * name (and duration) share one count per key whatever their points, each comparing it with its
   * own: a limit that changes (a limiter made anew with other points) applies to what was spent.
   */
  limiter(name: string, points: number, durationMs: number): Limiter;
  /**
   * Sends `message` to every subscriber of `channel` on every node, this one included. Nothing is
   * stored: a node that is not subscribed at that moment never sees it. Resolves once the message
   * is on its way to every subscriber (in Redis, PUBLISH has answered; in memory, the handlers ran).
   */
  publish(channel: string, message: string): Promise<void>;
  /**
   * Calls `handler` with each message published on `channel` from the moment the returned promise
   * resolves, in publish order (per publisher). Handlers must not throw; what they throw is dropped.
   * `onDelivery(false)` says messages may be missed from now on (the subscriber connection dropped),
   * `onDelivery(true)` that delivery is back; a cache fed by the channel must forget everything on
   * both. The in-process store never calls it. Resolves to the function that unsubscribes.
   */
  subscribe(
    channel: string,
    handler: (message: string) => void,
    onDelivery?: (live: boolean) => void,
  ): Promise<Unsubscribe>;
  /** Also ends every subscription. */
  close(): Promise<void>;
}

/** Where setIfAbsentCounted counts the value it sets: a member of an expiring set of at most `max`. */
export interface CountedIn {
  setKey: string;
  member: string;
  expiresAtMs: number;
  max: number;
}

/** What setIfAbsentCounted did: set the key, found it present, or found the set full (its earliest deadline). */
export type CountedSet = 'set' | 'present' | { full: number };

/** Ends one subscription; calling it again does nothing. */
export type Unsubscribe = () => Promise<void>;

export interface LimitResult {
  allowed: boolean;
  remaining: number;
  /** Milliseconds until the window allows another point. */
  retryAfterMs: number;
}

/** What consume answers: its result, and the window the points went to (what `refund` names). */
export interface Consumed extends LimitResult {
  /** The window's identity, opaque: each window of a key has its own. */
  window: string;
}

export interface Limiter {
  /** Spends `points` (default 1) for `key`. */
  consume(key: string, points?: number): Promise<Consumed>;
  /**
   * Gives back `points` (default 1) spent in `window` (consume's answer), as if they never were,
   * while that window is the key's open one. Once it has ended nothing comes back: the key's next
   * window, which later spends opened, keeps its whole count (and its limit).
   */
  refund(key: string, window: string, points?: number): Promise<void>;
  /** Reads without spending. */
  peek(key: string): Promise<LimitResult>;
  reset(key: string): Promise<void>;
}
