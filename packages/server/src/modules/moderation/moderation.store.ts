import { and, eq, inArray, isNull, lte, type SQL, sql } from 'drizzle-orm';
import type { Db } from '../../platform/db/index.js';
import { moderationActions, users } from '../../platform/db/schema.js';
import { noUsersChanged, type UsersChanged } from '../users/users.changes.js';
import type { Tx } from '../users/users.store.js';

export type ModerationRow = typeof moderationActions.$inferSelect;

/**
 * Records not yet lifted whose expiry passed, up to `limit`, rows another node holds skipped. The
 * predicate is that of the partial index moderation_actions_expiry_idx (schema.ts), exactly.
 */
export function liftDue(now: Date, limit: number): SQL {
  return sql`select ${moderationActions.id} from ${moderationActions} where ${moderationActions.isLifted} = false and ${moderationActions.expiresAt} <= ${now.toISOString()} order by ${moderationActions.expiresAt} limit ${limit} for update skip locked`;
}

/**
 * Users in Timeout or Banned whose state expired: the predicate of the partial index
 * users_state_expiry_idx (schema.ts). The states are literals, not parameters, so that the
 * planner can match the index's predicate in a prepared statement's generic plan too.
 */
export function stateExpired(now: Date): SQL {
  return sql`${users.state} in (1, 2) and ${lte(users.stateExpiresAt, now)}`;
}

/**
 * The ids of up to `limit` users whose Timeout or Ban expired at `now`, oldest expiry first, rows
 * another node holds skipped (SKIP LOCKED): read through users_state_expiry_idx.
 */
export function restoreDue(now: Date, limit: number): SQL {
  return sql`select ${users.id} from ${users} where ${stateExpired(now)} order by ${users.stateExpiresAt} limit ${limit} for update skip locked`;
}

/** `onChanged` hears of the users whose state the expiry sweep restored (read caches, users.changes.ts). */
export function makeModerationStore(db: Db, onChanged: UsersChanged = noUsersChanged) {
  return {
    async record(values: typeof moderationActions.$inferInsert, tx: Tx = db): Promise<ModerationRow> {
      const [row] = await tx.insert(moderationActions).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    /** Lifts the active records of these types (for a chat, or platform-wide with chatId null). */
    async lift(userId: number, types: string[], chatId: number | null, at: Date, tx: Tx = db): Promise<number> {
      const rows = await tx
        .update(moderationActions)
        .set({ isLifted: true, liftedAt: at })
        .where(
          and(
            eq(moderationActions.userId, userId),
            inArray(moderationActions.actionType, types),
            chatId === null ? isNull(moderationActions.chatId) : eq(moderationActions.chatId, chatId),
            eq(moderationActions.isLifted, false),
          ),
        )
        .returning({ id: moderationActions.id });
      return rows.length;
    },
    /** Marks records whose expiry passed as lifted, oldest expiry first; returns them. Safe on many nodes. */
    async liftExpired(now: Date, limit: number): Promise<ModerationRow[]> {
      const due = liftDue(now, limit);
      return db
        .update(moderationActions)
        .set({ isLifted: true, liftedAt: now })
        .where(sql`${moderationActions.id} in (${due})`)
        .returning();
    },
    /**
     * Up to `limit` users whose timeout or temporary ban ended: back to Active; answers their ids.
     * Safe on many nodes (each batch skips the users another node is restoring).
     */
    async restoreExpiredStates(now: Date, limit: number): Promise<number[]> {
      const rows = await db
        .update(users)
        .set({ state: 0, stateExpiresAt: null, updatedAt: now })
        .where(sql`${users.id} in (${restoreDue(now, limit)})`)
        .returning({ id: users.id });
      const ids = rows.map((r) => r.id);
      await onChanged(ids, db);
      return ids;
    },
  };
}

export type ModerationStore = ReturnType<typeof makeModerationStore>;
