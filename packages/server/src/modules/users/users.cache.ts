import type { User } from '@parlor/protocol';
import { UserCache } from '../../platform/cache.js';
import type { Clock } from '../../platform/clock.js';

/** Own profiles kept per node (a few KB each at most: the linked platforms are a handful). */
export const PROFILE_CACHE_MAX = 10_000;
/** The backstop: a profile is read again from SQL at least this often (ms), invalidation or not. */
export const PROFILE_CACHE_TTL_MS = 10_000;

/**
 * An own profile as presented, and when (ms) it stops being right by time alone: the state and
 * subscription it shows are those that applied when it was read (a timeout or a Premium that runs
 * out changes them), so it is served only until `until` (null: no such deadline).
 */
export interface CachedProfile {
  user: User;
  until: number | null;
}

/**
 * User id → the own profile of GET /v1/users/me (spec 2.1), as presented. An entry is right until
 * its `until`, or until the user, their sessions or linked platforms change, which drops it on
 * every node (users.changes.ts). Entries are frozen: every caller shares them.
 */
export type ProfileCache = UserCache<number, CachedProfile>;

export function makeProfileCache(clock: Clock, opts: { max?: number; ttlMs?: number } = {}): ProfileCache {
  return new UserCache<number, CachedProfile>({
    max: opts.max ?? PROFILE_CACHE_MAX,
    ttlMs: opts.ttlMs ?? PROFILE_CACHE_TTL_MS,
    clock,
    userOf: (e) => e.user.id,
  });
}

/** Freezes a presented profile (and its platform list) before it is shared. */
export function frozenProfile(user: User): User {
  for (const p of user.linked_platforms) Object.freeze(p);
  Object.freeze(user.linked_platforms);
  return Object.freeze(user);
}
