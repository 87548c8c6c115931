import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import { trackCommits } from '../../platform/db/after-commit.js';
import type { Db } from '../../platform/db/index.js';
import type { GeoLookup } from '../../platform/geo.js';
import { sha256Hex } from '../../platform/secrets.js';
import type { UserRow } from '../users/users.store.js';
import { AUTH_CACHE_TTL_MS, makeAuthCache } from './sessions.cache.js';
import { makeSessionsService } from './sessions.service.js';
import type { SessionRow, SessionsStore } from './sessions.store.js';

const TOKEN = 'a-session-token';
const TOKEN2 = 'another-session-token';

/** The session resolver over a store that counts its queries, with a cache and a fake clock. */
function setup(opts: { ttlMs?: number } = {}) {
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const now = clock.now();
  const user = {
    id: 7,
    username: 'ada',
    permissionLevel: 0,
    state: 0,
    stateExpiresAt: null,
    thenState: 0,
    thenStateExpiresAt: null,
    isStranger: false,
    matchBlockedAt: null,
  } as Partial<UserRow> as UserRow;
  const session = {
    id: 70,
    userId: 7,
    tokenHash: sha256Hex(TOKEN),
    tokenSuffix: 'suffix',
    expiresAt: new Date(now.getTime() + 3600_000),
    endedAt: null,
    lastSeenAt: now,
  } as Partial<SessionRow> as SessionRow;
  // A second session of the same user, for batching.
  const other = { ...session, id: 71, tokenHash: sha256Hex(TOKEN2), tokenSuffix: 'other' };
  const calls = { resolve: 0, touch: [] as number[], touched: [] as number[][], ended: [] as [number, number[]][] };
  const store = {
    /** Sessions not ended, expired ones included (the service ends those). */
    async resolve(hashes: string[]) {
      calls.resolve += 1;
      return hashes.map((hash) => {
        const s = [session, other].find((x) => x.tokenHash === hash);
        return s && s.endedAt === null ? { session: { ...s }, user: { ...user } } : undefined;
      });
    },
    /** No keys here: nothing to lock ahead of the session rows (keys.store lockAheadOfSessionsEnd). */
    async lockAheadOfEnding() {},
    async endExpired(userId: number, ids: number[], at: Date) {
      calls.ended.push([userId, ids]);
      const gone = [session, other].filter((x) => ids.includes(x.id) && x.endedAt === null && x.expiresAt <= at);
      for (const s of gone) s.endedAt = s.expiresAt;
      return gone.map((x) => x.id);
    },
    async touch(ids: number[], at: Date) {
      calls.touch.push(at.getTime());
      calls.touched.push(ids);
      for (const s of [session, other]) if (ids.includes(s.id)) s.lastSeenAt = at;
    },
  } as Partial<SessionsStore> as SessionsStore;
  const cache = makeAuthCache(clock, opts);
  const geo: GeoLookup = { lookup: async () => ({}) } as unknown as GeoLookup;
  // A database whose transactions run at once (the key hooks are not wired here).
  const db = trackCommits({ transaction: async (fn: (tx: object) => Promise<unknown>) => fn({}) } as unknown as Db);
  const service = makeSessionsService({ db, store, clock, geo, cache });
  const resolver = service.resolver();
  return { clock, user, session, calls, cache, resolver, service };
}

describe('session resolver with the auth cache', () => {
  it('reads SQL once, then answers from the cache', async () => {
    const { calls, resolver } = setup();
    const first = await resolver.resolve(TOKEN);
    const second = await resolver.resolve(TOKEN);
    expect(calls.resolve).toBe(1);
    expect(second).toEqual(first);
    expect(second?.user).toMatchObject({ id: 7, username: 'ada', state: 0, stranger: false, matchBlocked: false });
    expect(second?.session).toMatchObject({ id: 70, userId: 7, tokenSuffix: 'suffix' });
  });

  it('reads SQL once for concurrent requests of a token the cache does not hold', async () => {
    const { calls, resolver } = setup();
    const answers = await Promise.all(Array.from({ length: 5 }, () => resolver.resolve(TOKEN)));
    expect(calls.resolve).toBe(1);
    expect(answers.every((a) => a?.user.id === 7)).toBe(true);
  });

  it('hands out copies: changing an answer does not change the next one', async () => {
    const { resolver } = setup();
    const first = await resolver.resolve(TOKEN);
    if (first) first.user.permissionLevel = 3;
    expect((await resolver.resolve(TOKEN))?.user.permissionLevel).toBe(0);
  });

  it('reads SQL again once the user is invalidated', async () => {
    const { calls, cache, user, resolver } = setup();
    await resolver.resolve(TOKEN);
    user.username = 'ada2';
    cache.invalidate([7]);
    expect((await resolver.resolve(TOKEN))?.user.username).toBe('ada2');
    expect(calls.resolve).toBe(2);
  });

  it('reads SQL again after the TTL', async () => {
    const { clock, calls, resolver } = setup();
    await resolver.resolve(TOKEN);
    clock.advance(AUTH_CACHE_TTL_MS);
    await resolver.resolve(TOKEN);
    expect(calls.resolve).toBe(2);
  });

  it('does not cache an unknown token', async () => {
    const { calls, resolver } = setup();
    expect(await resolver.resolve('unknown')).toBeNull();
    expect(await resolver.resolve('unknown')).toBeNull();
    expect(calls.resolve).toBe(2);
  });

  it('answers null for a cached session whose expiry has passed, without reading SQL, and ends it', async () => {
    const { clock, session, calls, resolver, service } = setup();
    const ends: unknown[] = [];
    service.onEnded((e) => ends.push(e));
    session.expiresAt = new Date(clock.now().getTime() + 5_000);
    await resolver.resolve(TOKEN);
    clock.advance(5_000);
    expect(await resolver.resolve(TOKEN)).toBeNull();
    expect(calls.resolve).toBe(1);
    expect(calls.ended).toEqual([[7, [70]]]);
    expect(ends).toEqual([{ userId: 7, sessionIds: [70], reason: 'expired' }]);
    // Ended: the next look-up finds no session and ends nothing more.
    expect(await resolver.resolve(TOKEN)).toBeNull();
    expect(calls.ended).toHaveLength(1);
  });

  it('ends an expired session that SQL returns (not in the cache) and answers null', async () => {
    const { clock, session, calls, resolver } = setup();
    session.expiresAt = new Date(clock.now().getTime() - 1);
    expect(await resolver.resolve(TOKEN)).toBeNull();
    expect(calls.ended).toEqual([[7, [70]]]);
    expect(session.endedAt).toEqual(session.expiresAt);
  });

  it('sees a timeout run out on a cached entry (state from the deadline, not the stored value)', async () => {
    const { clock, user, resolver } = setup();
    user.state = 1;
    user.stateExpiresAt = new Date(clock.now().getTime() + 3_000);
    expect((await resolver.resolve(TOKEN))?.user.state).toBe(1);
    clock.advance(3_000);
    expect((await resolver.resolve(TOKEN))?.user.state).toBe(0);
  });

  it('applies the stored follow-on state when a temporary ban runs out on a cached entry (a timeout outlasting it)', async () => {
    const { clock, user, resolver } = setup();
    const t = clock.now().getTime();
    Object.assign(user, {
      state: 2,
      stateExpiresAt: new Date(t + 3_000),
      thenState: 1,
      thenStateExpiresAt: new Date(t + 8_000),
    });
    expect((await resolver.resolve(TOKEN))?.user).toMatchObject({ state: 2, stateExpiresAt: new Date(t + 3_000) });
    clock.advance(3_000);
    expect((await resolver.resolve(TOKEN))?.user).toMatchObject({ state: 1, stateExpiresAt: new Date(t + 8_000) });
    clock.advance(5_000);
    expect((await resolver.resolve(TOKEN))?.user).toMatchObject({ state: 0, stateExpiresAt: null });
  });

  it('records activity at most once a minute, hits included', async () => {
    const { clock, calls, resolver } = setup({ ttlMs: 600_000 });
    const start = clock.now().getTime();
    await resolver.resolve(TOKEN);
    clock.advance(30_000);
    await resolver.resolve(TOKEN);
    clock.advance(31_000);
    await Promise.all([resolver.resolve(TOKEN), resolver.resolve(TOKEN)]);
    clock.advance(30_000);
    await resolver.resolve(TOKEN);
    expect(calls.touch).toEqual([start + 61_000]);
  });

  it('records the activity of the sessions seen in one turn with one write', async () => {
    const { clock, calls, resolver } = setup({ ttlMs: 600_000 });
    await Promise.all([resolver.resolve(TOKEN), resolver.resolve(TOKEN2)]);
    clock.advance(61_000);
    await Promise.all([resolver.resolve(TOKEN), resolver.resolve(TOKEN2), resolver.resolve(TOKEN)]);
    expect(calls.touched).toEqual([[70, 71]]);
  });
});
