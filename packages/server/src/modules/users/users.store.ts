import { and, asc, count, desc, eq, gt, ilike, inArray, isNull, lt, type SQL, sql } from 'drizzle-orm';
import type { Clock } from '../../platform/clock.js';
import { anyOf, type Db } from '../../platform/db/index.js';
import {
  auditLog,
  chatMembers,
  chats,
  linkedPlatforms,
  moderationActions,
  sessions,
  users,
} from '../../platform/db/schema.js';
import { noUsersChanged, type UsersChanged } from './users.changes.js';

export type UserRow = typeof users.$inferSelect;
export type LinkedPlatformRow = typeof linkedPlatforms.$inferSelect;
export type PunishmentRow = typeof moderationActions.$inferSelect;
export type AuditRow = typeof auditLog.$inferSelect;

/** Any drizzle handle: the database or a transaction inside it. */
export type Tx = Pick<Db, 'select' | 'insert' | 'update' | 'delete' | 'execute'>;

/**
 * `hasPremium` (users.presenter.ts) as a SQL condition on a `users` row at `at`, for statements
 * that must decide it under their own locks (matchmaking's direct-chat slots).
 */
export const premiumAtSql = (at: SQL) =>
  sql`(subscription_tier <> 0 and (subscription_expires_at is null or subscription_expires_at > ${at}))`;

/** True when a query failed on a unique index (PostgreSQL 23505), whichever driver raised it. */
export function isUniqueViolation(e: unknown): boolean {
  let cur: unknown = e;
  for (let i = 0; i < 4 && cur && typeof cur === 'object'; i++) {
    if ((cur as { code?: unknown }).code === '23505') return true;
    cur = (cur as { cause?: unknown }).cause;
  }
  return false;
}

/** Escapes LIKE wildcards so a search for "a_b" finds "a_b" only. */
export function likeEscape(s: string): string {
  return s.replace(/[\\%_]/g, (c) => `\\${c}`);
}

/**
 * Locks those of the given sessions that are live (neither ended nor expired), in id
 * order, and answers their ids. FOR NO KEY UPDATE: rows that only reference a session are still
 * inserted meanwhile. A session that ended while the caller waited on its lock is not among them
 * (its row is read again once the lock is free): what a request acting for its own session checks
 * before it writes, the locks ahead of session rows taken (docs/api.md Moderation). Id order, so
 * two transactions locking the same sessions (two sessions destroying each other) wait for each
 * other instead of deadlocking. Here, next to Tx, for every module that locks a session row
 * (sessions, keys, the own account).
 *
 * Expiry is decided on the clock's time once the rows are locked: PostgreSQL re-reads a row it
 * waited for against the statement's own parameters, so a time read before the wait would still
 * count a session that expired during it as live.
 */
export async function lockLiveSessions(ids: number[], clock: Clock, tx: Tx): Promise<number[]> {
  if (ids.length === 0) return [];
  const rows = await tx
    .select({ id: sessions.id, expiresAt: sessions.expiresAt })
    .from(sessions)
    .where(and(anyOf(sessions.id, ids), isNull(sessions.endedAt), gt(sessions.expiresAt, clock.now())))
    .orderBy(asc(sessions.id))
    .for('no key update');
  const now = clock.now();
  return rows.filter((r) => r.expiresAt > now).map((r) => r.id);
}

/**
 * `onChanged` hears of every write to a user row or its linked platforms (the read caches'
 * invalidation, users.changes.ts); inside a transaction it publishes once that commits.
 */
export function makeUsersStore(db: Db, onChanged: UsersChanged = noUsersChanged) {
  return {
    /** Runs `work` in one transaction (the database's: a deadlock's victim runs again, after-commit work runs). */
    transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T> {
      return db.transaction(work);
    },
    async byId(id: number, tx: Tx = db): Promise<UserRow | undefined> {
      const [row] = await tx.select().from(users).where(eq(users.id, id)).limit(1);
      return row;
    },
    async byIdForUpdate(id: number, tx: Tx): Promise<UserRow | undefined> {
      const [row] = await tx.select().from(users).where(eq(users.id, id)).limit(1).for('update');
      return row;
    },
    async byUsername(username: string, tx: Tx = db): Promise<UserRow | undefined> {
      const [row] = await tx.select().from(users).where(sql`lower(${users.username}) = lower(${username})`).limit(1);
      return row;
    },
    async byIdentity(platform: string, platformUserId: string, tx: Tx = db): Promise<UserRow | undefined> {
      const [row] = await tx
        .select({ user: users })
        .from(linkedPlatforms)
        .innerJoin(users, eq(users.id, linkedPlatforms.userId))
        .where(and(eq(linkedPlatforms.platform, platform), eq(linkedPlatforms.platformUserId, platformUserId)))
        .limit(1);
      return row?.user;
    },
    async platformsOf(userId: number, tx: Tx = db): Promise<LinkedPlatformRow[]> {
      return tx
        .select()
        .from(linkedPlatforms)
        .where(eq(linkedPlatforms.userId, userId))
        .orderBy(asc(linkedPlatforms.linkedAt), asc(linkedPlatforms.id));
    },
    async platformsOfMany(userIds: number[]): Promise<LinkedPlatformRow[]> {
      if (userIds.length === 0) return [];
      return db
        .select()
        .from(linkedPlatforms)
        .where(anyOf(linkedPlatforms.userId, userIds))
        .orderBy(asc(linkedPlatforms.linkedAt), asc(linkedPlatforms.id));
    },
    async insertUser(values: typeof users.$inferInsert, tx: Tx): Promise<UserRow> {
      const [row] = await tx.insert(users).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    async insertPlatform(values: typeof linkedPlatforms.$inferInsert, tx: Tx): Promise<void> {
      await tx.insert(linkedPlatforms).values(values);
      await onChanged([values.userId], tx);
    },
    async touchPlatform(
      platform: string,
      platformUserId: string,
      at: Date,
      profile: { username: string; avatarUrl: string } | null,
      tx: Tx,
    ): Promise<void> {
      const rows = await tx
        .update(linkedPlatforms)
        .set({
          lastAuthenticatedAt: at,
          ...(profile ? { platformUsername: profile.username, platformAvatarUrl: profile.avatarUrl } : {}),
        })
        .where(and(eq(linkedPlatforms.platform, platform), eq(linkedPlatforms.platformUserId, platformUserId)))
        .returning({ userId: linkedPlatforms.userId });
      await onChanged(
        rows.map((r) => r.userId),
        tx,
      );
    },
    async update(id: number, values: Partial<typeof users.$inferInsert>, tx: Tx = db): Promise<UserRow | undefined> {
      const [row] = await tx.update(users).set(values).where(eq(users.id, id)).returning();
      if (row) await onChanged([id], tx);
      return row;
    },
    /**
     * Deletes the account row. Its linked identities, sessions (and their keys), memberships,
     * notifications, punishments and blocks go with it (ON DELETE CASCADE); chats it owned keep
     * going without an owner (SET NULL).
     */
    async remove(id: number, tx: Tx): Promise<boolean> {
      const rows = await tx.delete(users).where(eq(users.id, id)).returning({ id: users.id });
      if (rows.length > 0) await onChanged([id], tx);
      return rows.length > 0;
    },
    /**
     * Deletes up to `limit` dead stranger accounts in one statement and answers their ids: anonymous
     * accounts created before `cutoff` whose every session ended, and was over (its end, else its
     * expiry) before `cutoff`, and that have no membership row in a chat that still exists (an
     * active or archived direct chat keeps showing them to the peer). A session that expired and
     * that nothing ended keeps its account until the expiry sweep has ended it as a logout does.
     * Rows are taken with SKIP LOCKED, so nodes sweep side by side. What hangs off the row goes by
     * ON DELETE CASCADE (sessions and their keys, memberships of removed chats, punishments,
     * notifications, blocks); audit entries keep the bare id (no FK).
     */
    async removeDeadStrangers(cutoff: Date, limit: number): Promise<number[]> {
      // Raw sql`` parameters must be strings: the postgres-js driver does not serialise Date there.
      const before = cutoff.toISOString();
      // least() skips nulls: a session is over at its end or its expiry, whichever came first.
      const dead = sql`select ${users.id} from ${users}
        where ${users.isStranger} and ${users.createdAt} <= ${before}
          and not exists (select 1 from ${sessions} where ${sessions.userId} = ${users.id}
            and (${sessions.endedAt} is null or least(${sessions.endedAt}, ${sessions.expiresAt}) > ${before}))
          and not exists (select 1 from ${chatMembers} join ${chats} on ${chats.id} = ${chatMembers.chatId}
            where ${chatMembers.userId} = ${users.id} and ${chats.deletedAt} is null)
        order by ${users.id} limit ${limit} for update skip locked`;
      const rows = await db.delete(users).where(sql`${users.id} in (${dead})`).returning({ id: users.id });
      const ids = rows.map((r) => r.id);
      if (ids.length > 0) await onChanged(ids, db);
      return ids;
    },
    async search(q: string, opts: { belowLevel: number | null; offset: number; limit: number }): Promise<UserRow[]> {
      // Anonymous strangers are no accounts to find (their peers read their profile by id).
      const filters = [ilike(users.username, `%${likeEscape(q)}%`), eq(users.isStranger, false)];
      if (opts.belowLevel !== null) filters.push(lt(users.permissionLevel, opts.belowLevel));
      return db
        .select()
        .from(users)
        .where(and(...filters))
        .orderBy(asc(sql`length(${users.username})`), asc(users.username))
        .offset(opts.offset)
        .limit(opts.limit);
    },
    async punishments(userId: number, offset: number, limit: number): Promise<PunishmentRow[]> {
      return db
        .select()
        .from(moderationActions)
        .where(eq(moderationActions.userId, userId))
        .orderBy(desc(moderationActions.createdAt), desc(moderationActions.id))
        .offset(offset)
        .limit(limit);
    },
    async auditFor(userId: number, codes: number[], tx: Tx = db): Promise<AuditRow[]> {
      return tx
        .select()
        .from(auditLog)
        .where(and(eq(auditLog.targetUserId, userId), inArray(auditLog.code, codes)))
        .orderBy(desc(auditLog.createdAt), desc(auditLog.id));
    },
    async hasAudit(userId: number, code: number, action: string, tx: Tx = db): Promise<boolean> {
      const [row] = await tx
        .select({ n: count() })
        .from(auditLog)
        .where(and(eq(auditLog.targetUserId, userId), eq(auditLog.code, code), eq(auditLog.action, action)));
      return (row?.n ?? 0) > 0;
    },
    /**
     * The figures of GET /statistics/users and /statistics/app. The user counts are of registered
     * accounts: anonymous strangers (matchmaking-only, swept once their session is over) are not
     * users there. `sessionsActive` counts every live session, strangers' included.
     */
    async statistics(now: Date) {
      // Raw sql`` parameters must be strings: the postgres-js driver does not serialise Date there.
      const dayAgo = new Date(now.getTime() - 24 * 3600 * 1000).toISOString();
      const at = now.toISOString();
      const [row] = await db
        .select({
          total: count(),
          active24h: sql<number>`count(*) filter (where ${users.lastActivityAt} > ${dayAgo})`.mapWith(Number),
          new24h: sql<number>`count(*) filter (where ${users.createdAt} > ${dayAgo})`.mapWith(Number),
          premium:
            sql<number>`count(*) filter (where ${users.subscriptionTier} > 0 and (${users.subscriptionExpiresAt} is null or ${users.subscriptionExpiresAt} > ${at}))`.mapWith(
              Number,
            ),
          // Banned now: a temporary ban whose end passed no longer counts, before the sweep writes it
          // (only a timeout follows a ban, never another ban: effectiveStateOf).
          banned:
            sql<number>`count(*) filter (where ${users.state} = 2 and (${users.stateExpiresAt} is null or ${users.stateExpiresAt} > ${at}))`.mapWith(
              Number,
            ),
        })
        .from(users)
        .where(eq(users.isStranger, false));
      const [s] = await db
        .select({ n: count() })
        .from(sessions)
        .where(and(isNull(sessions.endedAt), gt(sessions.expiresAt, now)));
      return { ...(row ?? { total: 0, active24h: 0, new24h: 0, premium: 0, banned: 0 }), sessionsActive: s?.n ?? 0 };
    },
  };
}

export type UsersStore = ReturnType<typeof makeUsersStore>;
