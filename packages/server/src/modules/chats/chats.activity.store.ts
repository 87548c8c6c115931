import { desc, eq, type SQL, sql } from 'drizzle-orm';
import { type Db, deleteBatch } from '../../platform/db/index.js';
import { chatActivity } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

export type ActivityRow = typeof chatActivity.$inferSelect;

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
    async activity(chatId: number, offset: number, limit: number): Promise<ActivityRow[]> {
      return db
        .select()
        .from(chatActivity)
        .where(eq(chatActivity.chatId, chatId))
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
