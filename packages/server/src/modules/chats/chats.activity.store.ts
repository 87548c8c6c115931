import { and, desc, eq, gt, type SQL, sql } from 'drizzle-orm';
import { type Db, deleteBatch } from '../../platform/db/index.js';
import { chatActivity } from '../../platform/db/schema.js';
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
