import {
  and,
  count,
  desc,
  eq,
  gt,
  inArray,
  isNotNull,
  isNull,
  lt,
  lte,
  ne,
  or,
  type Placeholder,
  type SQL,
  sql,
} from 'drizzle-orm';
import type { Clock } from '../../platform/clock.js';
import { anyOf, type Db, deleteBatch, pastCursor, rowsOf, type SweepCursor } from '../../platform/db/index.js';
import { sessions, users } from '../../platform/db/schema.js';
import { lockAheadOfSessionsEnd } from '../keys/keys.store.js';
import { noUsersChanged, type UsersChanged } from '../users/users.changes.js';
import { lockLiveSessions, type Tx } from '../users/users.store.js';

export type SessionRow = typeof sessions.$inferSelect;

/** Live at `now` (a placeholder in a statement built once): neither ended nor expired. */
export const active = (now: Date | Placeholder) => and(isNull(sessions.endedAt), gt(sessions.expiresAt, now));

/**
 * Sessions over (ended, or expired unended) at or before `before`: least() skips a null end, so a
 * session is over at its end or its expiry, whichever came first. The expression is that of the
 * index sessions_over_idx (schema.ts), which the retention sweep reads through.
 */
export function sessionsOver(before: Date): SQL {
  return sql`least(${sessions.endedAt}, ${sessions.expiresAt}) <= ${before.toISOString()}`;
}

/**
 * How long a session is kept once it is over (its end, else its expiry): the session history lists
 * it and the "new IP login" check counts its address that long, and then the retention sweep
 * deletes it (wiring/retention.ts reads this value).
 */
export const SESSIONS_KEPT_MS = 30 * 24 * 3600_000;

/**
 * Sessions live at `now` or over for less than SESSIONS_KEPT_MS: those the retention sweep keeps
 * (sessionsOver at `now` less the window is the complement). The reads that stop at the window
 * bound themselves by the clock, so what they answer does not wait for the sweep to come by.
 */
function keptAt(now: Date): SQL {
  return liveOrOverAfter(new Date(now.getTime() - SESSIONS_KEPT_MS));
}

/** Sessions live at `since` or over after it (their end, else their expiry, came later): not sessionsOver(since). */
export function liveOrOverAfter(since: Date): SQL {
  return sql`least(${sessions.endedAt}, ${sessions.expiresAt}) > ${since.toISOString()}`;
}

/**
 * Up to `limit` sessions whose expiry passed at `now` and that nothing ended yet, oldest expiry
 * first (then by id), after `after` when given: what the expiry sweep ends, each batch of a tick
 * reading on from the last, so sessions a batch could not end are not read again before the next
 * tick. Read without a lock (the end takes the rows, skipping those another node holds). The
 * predicate is that of the partial index sessions_expiry_idx (schema.ts), exactly.
 */
export function expiryDue(now: Date, limit: number, after?: SweepCursor): SQL {
  const onFrom = pastCursor(sessions.expiresAt, sessions.id, after);
  return sql`select ${sessions.id}, ${sessions.userId}, ${sessions.expiresAt}::text as at from ${sessions} where ${sessions.endedAt} is null and ${sessions.expiresAt} <= ${now.toISOString()} and ${onFrom} order by ${sessions.expiresAt}, ${sessions.id} limit ${limit}`;
}

/**
 * `onChanged` hears of every write that ends or shortens live sessions (the read caches'
 * invalidation, users.changes.ts); inside a transaction it publishes once that commits.
 */
export function makeSessionsStore(db: Db, onChanged: UsersChanged = noUsersChanged) {
  /**
   * Built once: the look-up behind every handshake and every request the auth cache misses. It
   * answers sessions not ended, expired or not: the service ends an expired one it meets.
   */
  const resolveQuery = db
    .select({ session: sessions, user: users })
    .from(sessions)
    .innerJoin(users, eq(users.id, sessions.userId))
    .where(and(anyOf(sessions.tokenHash, sql.placeholder('hashes')), isNull(sessions.endedAt)))
    .prepare('sessions_resolve');

  return {
    async insert(values: typeof sessions.$inferInsert, tx: Tx): Promise<SessionRow> {
      const [row] = await tx.insert(sessions).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    /**
     * The sessions not ended for some token hashes (expired ones included), with their users, in
     * one statement (the service groups the look-ups of one turn: a burst of handshakes or requests
     * missing the auth cache). One answer per hash, in order; undefined where no such session has it.
     */
    async resolve(tokenHashes: string[]) {
      const rows = await resolveQuery.execute({ hashes: tokenHashes });
      const byHash = new Map(rows.map((r) => [r.session.tokenHash, r]));
      return tokenHashes.map((h) => byHash.get(h));
    },
    /**
     * Live sessions' expiries, users, those users' stored states and what a socket's handshake
     * reads of them (level, name), in one statement (a burst of connections is checked together).
     * One answer per id, in order; undefined: no such live session.
     */
    async liveOwners(sessionIds: number[], now: Date) {
      const rows = await db
        .select({
          sessionId: sessions.id,
          expiresAt: sessions.expiresAt,
          userId: users.id,
          permissionLevel: users.permissionLevel,
          username: users.username,
          state: users.state,
          stateExpiresAt: users.stateExpiresAt,
          thenState: users.thenState,
          thenStateExpiresAt: users.thenStateExpiresAt,
        })
        .from(sessions)
        .innerJoin(users, eq(users.id, sessions.userId))
        .where(and(anyOf(sessions.id, sessionIds), active(now)));
      const byId = new Map(rows.map((r) => [r.sessionId, r]));
      return sessionIds.map((id) => byId.get(id));
    },
    async activeOf(userId: number, now: Date, tx: Tx = db): Promise<SessionRow[]> {
      return tx
        .select()
        .from(sessions)
        .where(and(eq(sessions.userId, userId), active(now)))
        .orderBy(desc(sessions.createdAt), desc(sessions.id));
    },
    /** A user's sessions over at `now` but kept (keptAt), newest first: GET /v1/users/me/sessions `history`. */
    async historyOf(userId: number, now: Date, limit: number): Promise<SessionRow[]> {
      return db
        .select()
        .from(sessions)
        .where(
          and(eq(sessions.userId, userId), or(isNotNull(sessions.endedAt), lte(sessions.expiresAt, now)), keptAt(now)),
        )
        .orderBy(desc(sessions.createdAt), desc(sessions.id))
        .limit(limit);
    },
    /**
     * Whether another session of the user, live at `now` or over for less than the window
     * (keptAt), came from `ip`: a login from any other address gets the "new IP login" notification.
     */
    async hasSessionFromIp(userId: number, ip: string, exceptId: number, now: Date, tx: Tx = db): Promise<boolean> {
      const [row] = await tx
        .select({ n: count() })
        .from(sessions)
        .where(and(eq(sessions.userId, userId), eq(sessions.clientIp, ip), ne(sessions.id, exceptId), keptAt(now)));
      return (row?.n ?? 0) > 0;
    },
    /**
     * Before a transaction writes these sessions' rows to end them: the locks that come ahead of
     * session rows (keys.store lockAheadOfSessionsEnd: the user's chats and row, when one has a key).
     */
    lockAheadOfEnding: (userId: number, sessionIds: number[], tx: Tx) => lockAheadOfSessionsEnd(userId, sessionIds, tx),
    /** Locks the live ones among these sessions, in id order; answers their ids (users.store lockLiveSessions). */
    lockLive: (ids: number[], clock: Clock, tx: Tx) => lockLiveSessions(ids, clock, tx),
    /** Ends the given sessions if still live; returns the ids actually ended. */
    async end(ids: number[], reason: string, now: Date, tx: Tx = db): Promise<number[]> {
      if (ids.length === 0) return [];
      const rows = await tx
        .update(sessions)
        .set({ endedAt: now, endReason: reason })
        .where(and(anyOf(sessions.id, ids), active(now)))
        .returning({ id: sessions.id, userId: sessions.userId });
      await onChanged([...new Set(rows.map((r) => r.userId))], tx);
      return rows.map((r) => r.id);
    },
    /**
     * Ends, as over at their expiry, those of a user's sessions `ids` that expired at `now` and
     * that nothing ended yet; rows another transaction holds are skipped (another node is ending
     * them). Returns the ids ended.
     */
    async endExpired(userId: number, ids: number[], now: Date, tx: Tx = db): Promise<number[]> {
      if (ids.length === 0) return [];
      const due = sql`select ${sessions.id} from ${sessions} where ${anyOf(sessions.id, ids)} and ${sessions.userId} = ${userId} and ${sessions.endedAt} is null and ${sessions.expiresAt} <= ${now.toISOString()} for update skip locked`;
      const rows = await tx
        .update(sessions)
        .set({ endedAt: sql`${sessions.expiresAt}`, endReason: 'expired' })
        .where(sql`${sessions.id} in (${due})`)
        .returning({ id: sessions.id });
      if (rows.length > 0) await onChanged([userId], tx);
      return rows.map((r) => r.id);
    },
    /** Up to `limit` sessions expired at `now` that nothing ended yet, oldest first, after `after` (expiryDue). */
    async dueExpired(now: Date, limit: number, after?: SweepCursor): Promise<(SweepCursor & { userId: number })[]> {
      const rows = rowsOf<{ id: number | string; user_id: number | string; at: string }>(
        await db.execute(expiryDue(now, limit, after)),
      );
      return rows.map((r) => ({ id: Number(r.id), userId: Number(r.user_id), at: r.at }));
    },
    async endAllOf(userId: number, exceptId: number | null, reason: string, now: Date, tx: Tx = db): Promise<number[]> {
      const rows = await tx
        .update(sessions)
        .set({ endedAt: now, endReason: reason })
        .where(and(eq(sessions.userId, userId), active(now), exceptId === null ? undefined : ne(sessions.id, exceptId)))
        .returning({ id: sessions.id });
      if (rows.length > 0) await onChanged([userId], tx);
      return rows.map((r) => r.id);
    },
    /**
     * Records activity of several sessions at once (the resolver batches a burst's touches), and
     * of their users: `last_activity_at` (spec 2.1, statistics `active_24h`) moves with the session
     * touch, never backwards. Two statements, each committing on its own: neither holds a row of
     * one table while it waits for a row of the other, so a touch cannot deadlock with a
     * transaction that locks a user and then ends its sessions (login eviction, ban). A user row
     * another transaction holds (a ban, a block, a chat creation) is skipped, not waited for: the
     * request that touches would otherwise wait for that transaction, and the next touch, within
     * a minute, records the activity. No change is published (users.changes.ts): nothing cached
     * depends on it but the own profile, read again within its TTL (users.cache.ts).
     */
    async touch(ids: number[], now: Date): Promise<void> {
      const owners = db.select({ id: sessions.userId }).from(sessions).where(anyOf(sessions.id, ids));
      const free = db
        .select({ id: users.id })
        .from(users)
        .where(and(inArray(users.id, owners), lt(users.lastActivityAt, now)))
        .for('no key update', { skipLocked: true });
      await db.update(users).set({ lastActivityAt: now }).where(inArray(users.id, free));
      await db.update(sessions).set({ lastSeenAt: now }).where(anyOf(sessions.id, ids));
    },
    /**
     * Deletes up to `limit` ended sessions over at or before `before` (retention); answers how many.
     * A session that expired and that nothing ended is not taken: the expiry sweep ends it first as
     * a logout does (its keys out, its chats on a new epoch), which a deletion's cascade would skip.
     */
    async pruneOver(before: Date, limit: number): Promise<number> {
      return deleteBatch(
        db,
        sessions,
        sessions.id,
        sql`${sessions.endedAt} is not null and ${sessionsOver(before)}`,
        limit,
      );
    },
    /** Shortens live sessions to at most `maxExpiry` (after a promotion to a staff level). */
    async clampExpiry(userId: number, maxExpiry: Date, now: Date, tx: Tx = db): Promise<void> {
      await tx
        .update(sessions)
        .set({ expiresAt: maxExpiry })
        .where(and(eq(sessions.userId, userId), active(now), gt(sessions.expiresAt, maxExpiry)));
      await onChanged([userId], tx);
    },
  };
}

export type SessionsStore = ReturnType<typeof makeSessionsStore>;
