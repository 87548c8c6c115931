import { AuditCodes } from '@parlor/protocol';
import { and, count, desc, eq, inArray, isNull, lt, min, notInArray, type SQL, sql } from 'drizzle-orm';
import { anyOf, type Db, deleteBatch, rowsOf } from '../../platform/db/index.js';
import { auditLog, notifications } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

/** The first key of the advisory lock a broadcast's deletion takes (the second: the broadcast id's hash). */
const BROADCAST_DELETION_LOCK = 7245;

export type NotificationRow = typeof notifications.$inferSelect;
export type NotificationInsert = typeof notifications.$inferInsert;

/**
 * How long a notification, read or not, is kept from its creation: the list, the unread count and
 * the reads stop at this window by the clock (`keptAt`), so what they answer does not wait for the
 * retention sweep, which deletes what is older (wiring/retention.ts reads this value).
 */
export const NOTIFICATIONS_KEPT_MS = 90 * 24 * 3600_000;

/** Notifications created after `now` less NOTIFICATIONS_KEPT_MS: those the retention sweep keeps. */
function keptAt(now: Date): SQL {
  return sql`${notifications.createdAt} > ${new Date(now.getTime() - NOTIFICATIONS_KEPT_MS).toISOString()}`;
}

/** Whether a notification is within the window at `now` (keptAt, for a row already read). */
export function isKeptAt(row: Pick<NotificationRow, 'createdAt'>, now: Date): boolean {
  return row.createdAt.getTime() > now.getTime() - NOTIFICATIONS_KEPT_MS;
}

/** Notifications created at or before `before`: the range of the index notifications_created_idx (retention). */
export function notificationsBefore(before: Date): SQL {
  return sql`${notifications.createdAt} <= ${before.toISOString()}`;
}

export function makeNotificationsStore(db: Db) {
  return {
    /** Deletes up to `limit` notifications, read or not, created at or before `before` (retention). */
    async prune(before: Date, limit: number): Promise<number> {
      return deleteBatch(db, notifications, notifications.id, notificationsBefore(before), limit);
    },

    async insert(values: NotificationInsert, tx: Tx = db): Promise<NotificationRow> {
      const [row] = await tx.insert(notifications).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },

    async insertMany(values: NotificationInsert[], tx: Tx = db): Promise<NotificationRow[]> {
      if (values.length === 0) return [];
      return tx.insert(notifications).values(values).returning();
    },

    /**
     * One copy per registered user (anonymous strangers have no notifications), in one
     * INSERT … SELECT over the users table: no loop, however many users.
     * Answers how many were written and the lowest id among them (null when there are no users).
     *
     * The users read are locked FOR KEY SHARE, in id order. Without it the SELECT saw, in its
     * snapshot, a user whose deletion had not committed yet; the foreign-key check of that copy
     * then waited for the deletion and failed once it committed (a 500, nothing written). A row
     * lock taken by the SELECT itself waits there instead and, under READ COMMITTED, skips a row
     * deleted meanwhile (PostgreSQL re-checks a locked row's latest version), so the users left get
     * their copies. It is the very lock the foreign-key checks take on each recipient's row until
     * the commit anyway, only taken earlier: it does not conflict with ordinary updates of a user
     * (FOR NO KEY UPDATE), only with deletions and FOR UPDATE (the admin actions' row locks), which
     * wait for the broadcast as they did before. Id order is the order those take their locks in
     * (admin.store lockUsersInIdOrder), so they cannot deadlock with a broadcast.
     */
    async insertBroadcast(
      values: {
        title: string;
        body: string;
        type: string;
        createdBy: number | null;
        createdAt: Date;
        broadcastId: string;
      },
      tx: Tx = db,
    ): Promise<{ recipients: number; firstId: number | null }> {
      // Raw sql`` parameters must be strings or numbers: postgres-js does not serialise Date there.
      const result = await tx.execute(sql`
        with inserted as (
          insert into notifications (user_id, title, body, type, created_by, created_at, broadcast_id)
          select id, ${values.title}, ${values.body}, ${values.type}, ${values.createdBy}::integer,
                 ${values.createdAt.toISOString()}::timestamptz, ${values.broadcastId}::uuid
          from users
          where not is_stranger
          order by id
          for key share
          returning id
        )
        select count(*)::integer as recipients, min(id)::integer as first_id from inserted`);
      const [row] = rowsOf<{ recipients: number | string; first_id: number | string | null }>(result);
      return {
        recipients: Number(row?.recipients ?? 0),
        firstId: row?.first_id === null || row?.first_id === undefined ? null : Number(row.first_id),
      };
    },

    async byId(id: number, tx: Tx = db): Promise<NotificationRow | undefined> {
      const [row] = await tx.select().from(notifications).where(eq(notifications.id, id)).limit(1);
      return row;
    },

    /** The copies of a broadcast held by some users (to tell each connected recipient its own id). */
    async broadcastCopies(broadcastId: string, userIds: number[]): Promise<NotificationRow[]> {
      if (userIds.length === 0) return [];
      return db
        .select()
        .from(notifications)
        .where(and(eq(notifications.broadcastId, broadcastId), anyOf(notifications.userId, userIds)));
    },

    /** A page of one user's kept notifications, newest first, strictly older than `before` when given. */
    async page(userId: number, before: number | undefined, limit: number, now: Date): Promise<NotificationRow[]> {
      const filters = [eq(notifications.userId, userId), keptAt(now)];
      if (before !== undefined) filters.push(lt(notifications.id, before));
      return db
        .select()
        .from(notifications)
        .where(and(...filters))
        .orderBy(desc(notifications.id))
        .limit(limit);
    },

    async unreadCount(userId: number, now: Date): Promise<number> {
      const [row] = await db
        .select({ n: count() })
        .from(notifications)
        .where(and(eq(notifications.userId, userId), isNull(notifications.readAt), keptAt(now)));
      return row?.n ?? 0;
    },

    /**
     * Marks one unread kept notification of the user read (at `at`, the clock's now); undefined when
     * it is absent, not theirs, past the window or read.
     */
    async markRead(userId: number, id: number, at: Date): Promise<NotificationRow | undefined> {
      const [row] = await db
        .update(notifications)
        .set({ readAt: at })
        .where(
          and(eq(notifications.id, id), eq(notifications.userId, userId), isNull(notifications.readAt), keptAt(at)),
        )
        .returning();
      return row;
    },

    /** Marks every unread kept notification of the user read (at `at`, the clock's now); answers how many changed. */
    async markAllRead(userId: number, at: Date): Promise<number> {
      const rows = await db
        .update(notifications)
        .set({ readAt: at })
        .where(and(eq(notifications.userId, userId), isNull(notifications.readAt), keptAt(at)))
        .returning({ id: notifications.id });
      return rows.length;
    },

    async deleteById(id: number, tx: Tx = db): Promise<number> {
      const rows = await tx.delete(notifications).where(eq(notifications.id, id)).returning({ id: notifications.id });
      return rows.length;
    },

    /**
     * The lowest copy id of a broadcast (the copy every deletion of it keeps to the end, see
     * notifications.admin removeBroadcast) and how many copies it has; undefined when none is left.
     */
    async broadcastExtent(broadcastId: string): Promise<{ anchorId: number; copies: number } | undefined> {
      const [row] = await db
        .select({ anchorId: min(notifications.id), copies: count() })
        .from(notifications)
        .where(eq(notifications.broadcastId, broadcastId));
      if (!row || row.anchorId === null) return undefined;
      return { anchorId: row.anchorId, copies: row.copies };
    },

    /**
     * Deletes up to `limit` copies of a broadcast, all but the copies `keepIds` (read through
     * notifications_broadcast_idx); answers how many. One bounded statement: a broadcast has a copy
     * per registered user, so deleting them all at once would grow with the user base.
     *
     * Unlike platform/db deleteBatch (a sweep's batch), it waits for copies another transaction
     * holds (a recipient marking its copy read) instead of skipping them: the admin's request
     * answers 200 only once every copy is gone. The picked copies are locked in id order, so two
     * deletions of one broadcast at once lock in the same order and cannot deadlock; a copy that
     * the other one deleted meanwhile is left out, so a short batch does not prove that none is
     * left (otherBroadcastCopy does).
     */
    async deleteBroadcastBatch(broadcastId: string, keepIds: readonly number[], limit: number): Promise<number> {
      const picked = db
        .select({ id: notifications.id })
        .from(notifications)
        .where(and(eq(notifications.broadcastId, broadcastId), notInArray(notifications.id, [...keepIds])))
        .limit(limit);
      const locked = db
        .select({ id: notifications.id })
        .from(notifications)
        .where(inArray(notifications.id, picked))
        .orderBy(notifications.id)
        .for('update');
      const rows = await db
        .delete(notifications)
        .where(inArray(notifications.id, locked))
        .returning({ id: notifications.id });
      return rows.length;
    },

    /** Whether a broadcast still has a copy other than `keepIds` (one an open transaction is deleting counts). */
    async otherBroadcastCopy(broadcastId: string, keepIds: readonly number[]): Promise<boolean> {
      const [row] = await db
        .select({ id: notifications.id })
        .from(notifications)
        .where(and(eq(notifications.broadcastId, broadcastId), notInArray(notifications.id, [...keepIds])))
        .limit(1);
      return row !== undefined;
    },

    /**
     * Holds the broadcast's deletion lock until the transaction ends (an advisory lock on its id):
     * the last step of two deletions of one broadcast runs one after the other.
     */
    async lockBroadcastDeletion(broadcastId: string, tx: Tx): Promise<void> {
      await tx.execute(sql`select pg_advisory_xact_lock(${BROADCAST_DELETION_LOCK}, hashtext(${broadcastId}))`);
    },

    /** Whether a deletion of this broadcast has been recorded (audit 803 `delete-broadcast`). */
    async broadcastDeletionRecorded(broadcastId: string, tx: Tx): Promise<boolean> {
      const [row] = await tx
        .select({ id: auditLog.id })
        .from(auditLog)
        .where(
          and(
            eq(auditLog.code, AuditCodes.NOTIFICATION_DELETE),
            eq(auditLog.action, 'delete-broadcast'),
            sql`${auditLog.data}->>'broadcast_id' = ${broadcastId}`,
          ),
        )
        .limit(1);
      return row !== undefined;
    },

    /** Deletes the given copies of a broadcast; answers how many were still there. */
    async deleteBroadcastCopies(broadcastId: string, ids: readonly number[], tx: Tx = db): Promise<number> {
      const rows = await tx
        .delete(notifications)
        .where(and(eq(notifications.broadcastId, broadcastId), anyOf(notifications.id, ids)))
        .returning({ id: notifications.id });
      return rows.length;
    },
  };
}

export type NotificationsStore = ReturnType<typeof makeNotificationsStore>;
