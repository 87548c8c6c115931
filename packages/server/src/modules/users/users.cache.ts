import type { User } from '@parlor/protocol';
import { UserCache } from '../../platform/cache.js';
import type { Clock } from '../../platform/clock.js';

/** Own profiles kept per node (a few KB each at most: the linked platforms are a handful). */
export const PROFILE_CACHE_MAX = 10_000;
/** The backstop: a profile is read again from SQL at least this often (ms), invalidation or not. */
export const PROFILE_CACHE_TTL_MS = 10_000;

/**
 * User id → the own profile of GET /v1/users/me (spec 2.1), as presented. Nothing in it depends on
 * the time, so an entry is right until the user, their sessions or linked platforms change, which
 * drops it on every node (users.changes.ts). Entries are frozen: every caller shares them.
 */
export type ProfileCache = UserCache<number, User>;

export function makeProfileCache(clock: Clock, opts: { max?: number; ttlMs?: number } = {}): ProfileCache {
  return new UserCache<number, User>({
    max: opts.max ?? PROFILE_CACHE_MAX,
    ttlMs: opts.ttlMs ?? PROFILE_CACHE_TTL_MS,
    clock,
    userOf: (u) => u.id,
  });
}

/** Freezes a presented profile (and its platform list) before it is shared. */
export function frozenProfile(user: User): User {
  for (const p of user.linked_platforms) Object.freeze(p);
  Object.freeze(user.linked_platforms);
  return Object.freeze(user);
}
