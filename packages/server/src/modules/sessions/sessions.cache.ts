import type { AuthUser, Principal } from '../../platform/auth.js';
import { UserCache } from '../../platform/cache.js';
import type { Clock } from '../../platform/clock.js';
import { effectiveStateOf, type StoredState } from '../users/users.presenter.js';
import type { UserRow } from '../users/users.store.js';
import type { SessionRow } from './sessions.store.js';

/** Live sessions kept per node (about 0.5 KB each). */
export const AUTH_CACHE_MAX = 10_000;
/** The backstop: an entry is read again from SQL at least this often (ms), invalidation or not. */
export const AUTH_CACHE_TTL_MS = 10_000;

/**
 * What the session guard needs of a live session and its user, as stored: the state is the stored
 * one with its deadline and what follows it, so a timeout that runs out is seen at once
 * (effectiveStateOf on each read).
 */
export interface AuthEntry {
  session: NonNullable<Principal['session']>;
  user: Omit<AuthUser, 'state' | 'stateExpiresAt'> & { stored: StoredState };
  /** When the session last recorded activity (ms): it is written at most once a minute. */
  lastSeenAt: number;
}

/** Token hash → its live session and user, invalidated by user id. */
export type AuthCache = UserCache<string, AuthEntry>;

export function makeAuthCache(clock: Clock, opts: { max?: number; ttlMs?: number } = {}): AuthCache {
  return new UserCache<string, AuthEntry>({
    max: opts.max ?? AUTH_CACHE_MAX,
    ttlMs: opts.ttlMs ?? AUTH_CACHE_TTL_MS,
    clock,
    userOf: (e) => e.user.id,
  });
}

/** The entry for a session row and its user row, as SQL returned them. */
export function toAuthEntry(session: SessionRow, user: UserRow): AuthEntry {
  return {
    session: { id: session.id, userId: user.id, expiresAt: session.expiresAt, tokenSuffix: session.tokenSuffix },
    user: {
      id: user.id,
      username: user.username,
      permissionLevel: user.permissionLevel,
      stored: {
        state: user.state,
        stateExpiresAt: user.stateExpiresAt,
        thenState: user.thenState,
        thenStateExpiresAt: user.thenStateExpiresAt,
      },
      stranger: user.isStranger,
      matchBlocked: user.matchBlockedAt !== null,
    },
    lastSeenAt: session.lastSeenAt.getTime(),
  };
}

/** What the resolver answers for an entry at `now`: fresh objects, so callers cannot touch the cache. */
export function resolvedOf(entry: AuthEntry, now: Date): { session: AuthEntry['session']; user: AuthUser } {
  const { session: s, user: u } = entry;
  const state = effectiveStateOf(u.stored, now);
  return {
    session: { id: s.id, userId: s.userId, expiresAt: s.expiresAt, tokenSuffix: s.tokenSuffix },
    user: {
      id: u.id,
      username: u.username,
      permissionLevel: u.permissionLevel,
      state: state.state,
      stateExpiresAt: state.expiresAt,
      stranger: u.stranger,
      matchBlocked: u.matchBlocked,
    },
  };
}
