import { Limits } from '@parlor/protocol';

/**
 * The match queue port (coordination): users searching on interest tags, paired atomically so that
 * nobody is ever matched twice, even when nodes race. Embedded: in process (match-queue.memory.ts);
 * cluster: Redis scripts (match-queue.redis.ts, its Lua in match-queue.lua.ts).
 * Both pass the same cases (match-queue.test.ts).
 */
export interface QueueEntry {
  userId: number;
  /** 1-3 tags, in the order the user gave them (pairing tries them in this order). */
  tags: string[];
  enqueuedAt: number;
  /** When the search gives up (ms since epoch). */
  deadline: number;
  /**
   * Users this one blocked (its own blocks only: those who blocked it exclude it in their own
   * entries), and the peers a pairing of this search was refused with, added when it went back.
   */
  exclude: number[];
  country: string | null;
}

/**
 * Entries past their deadline that a placing met among the candidates it looked at and took out
 * of the queue (in the order met): their searches have ended, and nobody else will return them
 * (`popExpired` no longer sees them), so the caller tells their users, as at the deadline.
 */
export interface Dropped {
  dropped: QueueEntry[];
}

export type EnqueueResult = (
  | { kind: 'queued' }
  | { kind: 'already' }
  /**
   * Paired with `peer` (now out of the queue) on `tag`; the caller was never queued, but reads as
   * searching like the peer until `release` (its other enqueues answer `already`).
   */
  | { kind: 'paired'; peer: QueueEntry; tag: string }
  /** Refused: the user is barred (see `bar`); nothing changed. */
  | { kind: 'barred' }
  /** Refused: the user's direct-chat slots filled after the entry's `enqueuedAt` (see `markFull`). */
  | { kind: 'full' }
  /** Refused: the user may no longer search since the entry's `enqueuedAt` (see `endRestricted`). */
  | { kind: 'restricted' }
) &
  Dropped;

/**
 * What putting back a peer taken out by a pairing that then failed did: `restored`, as it was;
 * paired at once with a compatible user that queued while it was out (`peer`, now out of the
 * queue); `expired`, not restored (its deadline passed meanwhile); `already`, not restored (the
 * user searches again, on a newer entry); `barred`, not restored; `full`, not restored (its
 * direct-chat slots filled since it queued); `restricted`, not restored (`endRestricted` since it
 * queued); `cancelled`, not restored (the user's search was ended by `dequeue` since it queued).
 */
export type RestoreResult = (
  | { kind: 'restored' }
  | { kind: 'expired' }
  | { kind: 'already' }
  | { kind: 'barred' }
  | { kind: 'full' }
  | { kind: 'restricted' }
  | { kind: 'cancelled' }
  | { kind: 'paired'; peer: QueueEntry; tag: string }
) &
  Dropped;

export interface MatchQueue {
  /**
   * Pairs the entry with the longest-waiting compatible user on its first tag that has one, else
   * queues it. On each tag it looks at up to CANDIDATE_SCAN_LIMIT waiting users, in line order
   * (Redis reads them CANDIDATES_PER_TAG at a time); expired ones it meets leave the queue
   * (`dropped`, up to DROPPED_SCAN_LIMIT a placing, not counted among those looked at). A peer it
   * takes out reads as searching (`get`, and `already` to its user's enqueues) until `release`,
   * a restore or a dequeue of it, or its deadline; so does the caller of a pairing (a second
   * search of its user beside this one is refused `already`). The user's own expired entry, if any, is
   * replaced (not in `dropped`: the user has moved on to this search).
   */
  enqueue(entry: QueueEntry, now: number): Promise<EnqueueResult>;
  /**
   * Puts back an entry that `enqueue` answered as a peer, exactly as it was (its place in line,
   * deadline and exclusions): for when the pair could not be made. A compatible user that queued
   * while it was out (and so could not pair with it) is paired with it instead, as `enqueue` would
   * (expired users it meets on the way: `dropped`); the entry then reads as searching, as the peer
   * does, until `release`.
   */
  restore(entry: QueueEntry, now: number): Promise<RestoreResult>;
  /**
   * Ends a user's search at `now` (ms): removes its entry (false when none was queued) and, in the
   * same atomic step, marks the user cancelled at `now` for CANCEL_MARK_MS, so that a restore of
   * an entry of its that began at or before then is refused (`cancelled`): a pairing may have had
   * the entry out of the queue meanwhile, and the search it ended must not come back. An entry a
   * pairing has out no longer reads as searching.
   */
  dequeue(userId: number, now: number): Promise<boolean>;
  /**
   * `dequeue` for a user who may no longer search (a ban, a timeout, a stranger's session ended),
   * and in the same step marks the user restricted at `now` for FULL_MARK_MS: an enqueue or restore
   * of an entry that began at or before the mark is refused (`restricted`), whatever its node read
   * before (an enqueue in flight). Unlike the cancelled mark, a new search does not lower it.
   */
  endRestricted(userId: number, now: number): Promise<boolean>;
  /**
   * A pairing that took these entries out is over (its chat made, or refused): they no longer
   * read as searching. A marker of a newer entry of the user is left alone.
   */
  release(entries: readonly Pick<QueueEntry, 'userId' | 'enqueuedAt'>[]): Promise<void>;
  /**
   * Of these searches (the two of a pair being made), the users whose search `dequeue` ended: the
   * user's cancelled mark is at or after the entry's `enqueuedAt`, as `restore` reads it. A
   * pairing asks once it holds its users' locks, so that a dequeue either comes after the chat or
   * stops it (matchmaking.service `dequeue`). Changes nothing.
   */
  cancelledOf(entries: readonly Pick<QueueEntry, 'userId' | 'enqueuedAt'>[]): Promise<number[]>;
  /**
   * Removes a user from the queue and, in the same atomic step, refuses its enqueues (and
   * restores) until `until` (ms): a block being written elsewhere holds from here, whatever an
   * enqueue already in flight read before it. Bars past their time at `now` are forgotten. Bars
   * of one user add up: the user stays barred until the latest `until`, unless every bar placed
   * since the last one ended has been lifted. Answers the entry it took out (null: none), so that
   * its user can be told its search ended.
   */
  bar(userId: number, until: number, now: number): Promise<QueueEntry | null>;
  /**
   * Users whose direct-chat slots a new chat just filled, at `since` (ms, after its commit): an
   * entry of theirs that began at or before `since` leaves the queue (returned: a search in
   * parallel with the one that paired, whose pre-check read the slots before that commit), and for
   * FULL_MARK_MS enqueues and restores of such an entry are refused (`full`): their pre-check may
   * predate the commit too. Entries that began later read the filled slots themselves (a user who
   * left the chat at once and searches again) and are left alone.
   */
  markFull(userIds: number[], since: number): Promise<QueueEntry[]>;
  /**
   * Lifts one bar (the block it announced did not happen). Another bar of the user not lifted (a
   * concurrent block that did happen, or is still being written) keeps the user barred.
   */
  unbar(userId: number): Promise<void>;
  /** The user's search before its deadline: queued, or out of the queue in a pairing (see `enqueue`). */
  get(userId: number, now: number): Promise<QueueEntry | null>;
  /** Takes out up to `limit` entries whose deadline passed; each is returned to exactly one caller. */
  popExpired(now: number, limit: number): Promise<QueueEntry[]>;
  /**
   * The `n` tags with the most users queued on them, most first, ties by tag in code-unit order
   * (what Redis orders equal scores by). Entries past their deadline count until they leave the
   * queue (`popExpired`, or a placing that meets them).
   */
  topTags(n: number): Promise<{ tag: string; searching: number }[]>;
}

/** What one placing did: an enqueue answers `queued` for an entry it queued, a restore `restored`. */
export type Placing = EnqueueResult | RestoreResult;

/** The answer of an enqueue's placing (never restored, expired nor cancelled: those are a restore's). */
export function enqueueResult(placed: Placing): EnqueueResult {
  if (placed.kind === 'restored' || placed.kind === 'expired' || placed.kind === 'cancelled')
    throw new Error(`an enqueue placed ${placed.kind}`);
  return placed;
}

/** The answer of a restore's placing (never queued: that is an enqueue's). */
export function restoreResult(placed: Placing): RestoreResult {
  if (placed.kind === 'queued') throw new Error('a restore placed queued');
  return placed;
}

/**
 * How many waiting users a placing reads at a time on a tag (one ZRANGE in Redis). The first
 * page is all that a pairing reads when one of the first users in line fits, the common case.
 */
export const CANDIDATES_PER_TAG = 50;

/**
 * How many waiting users a placing looks at on one tag at most, page after page, before it gives
 * up on that tag (a Lua script blocks Redis while it runs, so its work must stay bounded). A user
 * is incompatible only through a block between the two; those the newcomer blocked (its
 * `exclude`, read at its enqueue) are passed over without reading their entries, those who blocked
 * it are skipped on their entry's own `exclude`. It is
 * at least Limits.BLOCKS_PER_USER (1,000), so no user's own blocks can hide a compatible peer from
 * it; only more than this many incompatible users ahead on a tag can (docs/api.md, Matchmaking).
 */
export const CANDIDATE_SCAN_LIMIT = 1_000;

/**
 * How many expired entries one placing takes out on its way at most (`dropped`), over all its
 * tags. They do not count toward CANDIDATE_SCAN_LIMIT, so expired entries ahead do not hide a
 * compatible user; past this many, further expired ones are passed over like any other user looked
 * at (they stay for the deadline sweep), so one placing's work stays bounded.
 */
export const DROPPED_SCAN_LIMIT = 1_000;

/**
 * How long the queue keeps a user's slots-filled mark (`markFull`). Callers must reach the queue
 * well within this time of an entry's `enqueuedAt` (matchmaking.service refuses older enqueues).
 */
export const FULL_MARK_MS = 60_000;

/**
 * How long the queue keeps a user's cancelled mark (`dequeue`): a search's whole life
 * (Limits.MATCH_QUEUE_WAIT_MS), so an entry that began at or before the mark is past its deadline
 * (a restore answers `expired`) by the time the mark is forgotten, however long the pairing that
 * took it out ran.
 */
export const CANCEL_MARK_MS = Limits.MATCH_QUEUE_WAIT_MS;

/** Code-unit order (Redis's order of equal scores), not the locale's. */
export const byCodeUnits = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
