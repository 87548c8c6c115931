import { and, count, desc, eq, gt, isNotNull, isNull, lte, ne, or, type Placeholder, type SQL, sql } from 'drizzle-orm';
import { anyOf, type Db, deleteBatch } from '../../platform/db/index.js';
import { sessions, users } from '../../platform/db/schema.js';
import { noUsersChanged, type UsersChanged } from '../users/users.changes.js';
import type { Tx } from '../users/users.store.js';

export type SessionRow = typeof sessions.$inferSelect;

/** Live at `now` (a placeholder in a statement built once). */
const active = (now: Date | Placeholder) => and(isNull(sessions.endedAt), gt(sessions.expiresAt, now));

/**
 * Sessions over (ended, or expired unended) at or before `before`: least() skips a null end, so a
 * session is over at its end or its expiry, whichever came first. The expression is that of the
 * index sessions_over_idx (schema.ts), which the retention sweep reads through.
 */
export function sessionsOver(before: Date): SQL {
  return sql`least(${sessions.endedAt}, ${sessions.expiresAt}) <= ${before.toISOString()}`;
}

/**
 * `onChanged` hears of every write that ends or shortens live sessions (the read caches'
 * invalidation, users.changes.ts); inside a transaction it publishes once that commits.
 */
export function makeSessionsStore(db: Db, onChanged: UsersChanged = noUsersChanged) {
  /** Built once: the look-up behind every handshake and every request the auth cache misses. */
  const resolveQuery = db
    .select({ session: sessions, user: users })
    .from(sessions)
    .innerJoin(users, eq(users.id, sessions.userId))
    .where(and(anyOf(sessions.tokenHash, sql.placeholder('hashes')), active(sql.placeholder('now'))))
    .prepare('sessions_resolve');

  return {
    async insert(values: typeof sessions.$inferInsert, tx: Tx): Promise<SessionRow> {
      const [row] = await tx.insert(sessions).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    /**
     * The live sessions for some token hashes, with their users, in one statement (the service
     * groups the look-ups of one turn: a burst of handshakes or requests missing the auth cache).
     * One answer per hash, in order; undefined where no live session has it.
     */
    async resolve(tokenHashes: string[], now: Date) {
      // A placeholder skips the column's encoder: the instant goes as the column would send it.
      const rows = await resolveQuery.execute({ hashes: tokenHashes, now: now.toISOString() });
      const byHash = new Map(rows.map((r) => [r.session.tokenHash, r]));
      return tokenHashes.map((h) => byHash.get(h));
    },
    /** A live session's user and that user's stored state (undefined: no such live session). */
    async liveOwner(sessionId: number, now: Date) {
      const [row] = await db
        .select({
          userId: users.id,
          state: users.state,
          stateExpiresAt: users.stateExpiresAt,
          thenState: users.thenState,
          thenStateExpiresAt: users.thenStateExpiresAt,
        })
        .from(sessions)
        .innerJoin(users, eq(users.id, sessions.userId))
        .where(and(eq(sessions.id, sessionId), active(now)));
      return row;
    },
    async activeOf(userId: number, now: Date, tx: Tx = db): Promise<SessionRow[]> {
      return tx
        .select()
        .from(sessions)
        .where(and(eq(sessions.userId, userId), active(now)))
        .orderBy(desc(sessions.createdAt), desc(sessions.id));
    },
    async historyOf(userId: number, now: Date, limit: number): Promise<SessionRow[]> {
      return db
        .select()
        .from(sessions)
        .where(and(eq(sessions.userId, userId), or(isNotNull(sessions.endedAt), lte(sessions.expiresAt, now))))
        .orderBy(desc(sessions.createdAt), desc(sessions.id))
        .limit(limit);
    },
    async hasSessionFromIp(userId: number, ip: string, exceptId: number, tx: Tx = db): Promise<boolean> {
      const [row] = await tx
        .select({ n: count() })
        .from(sessions)
        .where(and(eq(sessions.userId, userId), eq(sessions.clientIp, ip), ne(sessions.id, exceptId)));
      return (row?.n ?? 0) > 0;
    },
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
    async endAllOf(userId: number, exceptId: number | null, reason: string, now: Date, tx: Tx = db): Promise<number[]> {
      const rows = await tx
        .update(sessions)
        .set({ endedAt: now, endReason: reason })
        .where(and(eq(sessions.userId, userId), active(now), exceptId === null ? undefined : ne(sessions.id, exceptId)))
        .returning({ id: sessions.id });
      if (rows.length > 0) await onChanged([userId], tx);
      return rows.map((r) => r.id);
    },
    /** Records activity of several sessions at once (the resolver batches a burst's touches). */
    async touch(ids: number[], now: Date): Promise<void> {
      await db.update(sessions).set({ lastSeenAt: now }).where(anyOf(sessions.id, ids));
    },
    /** Deletes up to `limit` sessions over at or before `before` (retention); answers how many. */
    async pruneOver(before: Date, limit: number): Promise<number> {
      return deleteBatch(db, sessions, sessions.id, sessionsOver(before), limit);
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
