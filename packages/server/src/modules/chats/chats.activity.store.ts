import { and, desc, eq, gt, type SQL, sql } from 'drizzle-orm';
import { type Db, deleteBatch, rowsOf } from '../../platform/db/index.js';
import { chatActivity, chatMembers, chats } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

export type ActivityRow = typeof chatActivity.$inferSelect;

/**
 * How long membership history is kept (ms, from the entry): the retention sweep deletes older
 * entries, and the list stops at the same window by the clock, whether or not they are deleted yet.
 */
export const CHAT_ACTIVITY_KEPT_MS = 90 * 24 * 60 * 60 * 1000;

/** Entries written at or before `before`: the range the index chat_activity_created_idx serves (retention). */
export function activityBefore(before: Date): SQL {
  return sql`${chatActivity.createdAt} <= ${before.toISOString()}`;
}

/** A chat's membership history (GET /v1/portal/chats/{chat_id}/activity): joins, leaves, kicks, bans. */
export function makeActivityStore(db: Db) {
  return {
    async logActivity(values: typeof chatActivity.$inferInsert, tx: Tx = db): Promise<void> {
      await tx.insert(chatActivity).values(values);
    },
    /**
     * A `leave` entry, by `actorUserId` (null: the operator), in every live chat a user whose
     * account is being deleted is a member of, in the deletion's transaction: its memberships go
     * with its row, and the history would otherwise show joins never closed. Direct chats are left
     * out: the deletion leaves the active ones as a leave does (with its entry), and an archived
     * one was left or expired before. Answers how many.
     */
    async logLeavesOfDeleted(userId: number, actorUserId: number | null, now: Date, tx: Tx): Promise<number> {
      const rows = await tx.execute(sql`
        insert into ${chatActivity} (chat_id, user_id, action, actor_user_id, created_at)
        select ${chatMembers.chatId}, ${userId}, 'leave', ${actorUserId}, ${now.toISOString()}
        from ${chatMembers} join ${chats} on ${chats.id} = ${chatMembers.chatId}
        where ${chatMembers.userId} = ${userId} and ${chatMembers.leftAt} is null
          and ${chats.deletedAt} is null and ${chats.type} <> 'direct'
        returning 1`);
      return rowsOf(rows).length;
    },
    /** A page of the chat's entries newer than CHAT_ACTIVITY_KEPT_MS at `now`, newest first. */
    async activity(chatId: number, offset: number, limit: number, now: Date): Promise<ActivityRow[]> {
      const kept = new Date(now.getTime() - CHAT_ACTIVITY_KEPT_MS);
      return db
        .select()
        .from(chatActivity)
        .where(and(eq(chatActivity.chatId, chatId), gt(chatActivity.createdAt, kept)))
        .orderBy(desc(chatActivity.id))
        .offset(offset)
        .limit(limit);
    },
    /** Deletes up to `limit` entries written at or before `before` (retention); answers how many. */
    async pruneActivity(before: Date, limit: number): Promise<number> {
      return deleteBatch(db, chatActivity, chatActivity.id, activityBefore(before), limit);
    },
  };
}
