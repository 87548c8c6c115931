import { and, type Column, eq, gt, inArray, isNull, lte, or, type SQL, sql } from 'drizzle-orm';
import type { Db } from '../../platform/db/index.js';
import { chats, moderationActions, users } from '../../platform/db/schema.js';
import { directActive } from '../chats/chats.direct.store.js';
import { lockChatsOfUser } from '../keys/keys.store.js';
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

/** The state (0 Active, 1 Timeout, 2 Banned) and its end (null: none) the records of a user give at `at`. */
function stateAt(userId: Column | number, at: SQL): { state: SQL<number>; expiresAt: SQL<Date | null> } {
  const m = moderationActions;
  const active = sql`from ${m} where ${m.userId} = ${userId} and ${m.actionType} in ('PLATFORM_BAN', 'PLATFORM_TIMEOUT')
    and ${m.isLifted} = false and (${m.expiresAt} is null or ${m.expiresAt} > ${at})`;
  const banned = sql`${m.actionType} = 'PLATFORM_BAN'`;
  return {
    state: sql<number>`(select case when bool_or(${banned}) then 2 when count(*) > 0 then 1 else 0 end ${active})`,
    expiresAt: sql<Date | null>`(select case
      when bool_or(${banned}) then case when bool_or(${banned} and ${m.expiresAt} is null) then null
        else max(${m.expiresAt}) filter (where ${banned}) end
      when bool_or(${m.expiresAt} is null) then null
      else max(${m.expiresAt}) end ${active})`,
  };
}

/**
 * The platform state the records of user `userId` give at `now`, as the four values of the users
 * row (spec 3): Banned while an unlifted, unexpired PLATFORM_BAN exists, until the longest one ends
 * (none: permanent); else Timeout until the latest active PLATFORM_TIMEOUT ends; else Active with
 * no expiry. Then the state the records give when that one ends, and its end: a timeout that
 * outlasts a temporary ban (nothing can follow a timeout, which ends with the last of them).
 * Records from a chat count too (a chat timeout applies platform-wide). The only place the state
 * is computed, so a punishment, an unban and the sweep never disagree. Each is one scalar
 * subquery (an aggregate without grouping: one row even when there is no record).
 */
/** Keyed as the users row's columns, so a statement sets them as they are. */
export function platformState(
  userId: Column | number,
  now: Date,
): {
  state: SQL<number>;
  stateExpiresAt: SQL<Date | null>;
  thenState: SQL<number>;
  thenStateExpiresAt: SQL<Date | null>;
} {
  const current = stateAt(userId, sql`${now.toISOString()}`);
  const then = stateAt(userId, current.expiresAt);
  return {
    state: current.state,
    stateExpiresAt: current.expiresAt,
    thenState: sql<number>`(case when ${current.expiresAt} is null then 0 else ${then.state} end)`,
    thenStateExpiresAt: sql<Date | null>`(case when ${current.expiresAt} is null then null else ${then.expiresAt} end)`,
  };
}

/** `onChanged` hears of the users whose state a punishment or the expiry sweep wrote (read caches, users.changes.ts). */
export function makeModerationStore(db: Db, onChanged: UsersChanged = noUsersChanged) {
  return {
    async record(values: typeof moderationActions.$inferInsert, tx: Tx = db): Promise<ModerationRow> {
      const [row] = await tx.insert(moderationActions).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    /**
     * Lifts the active records of these types (for a chat, or platform-wide with chatId null).
     * A record whose expiry has passed is no longer active: the sweep lifts it, at its expiry
     * (liftExpired), so an unban or unmute after the deadline finds nothing to lift.
     */
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
            or(isNull(moderationActions.expiresAt), gt(moderationActions.expiresAt, at)),
          ),
        )
        .returning({ id: moderationActions.id });
      return rows.length;
    },
    /**
     * Takes the row lock of a chat not deleted (undefined: none) for the rest of the transaction and
     * answers the chat as read under it: what the chat rules of a moderation are decided on (its
     * type and owner; `archived`, read-only, as chats.rules archivedAtOf reads it at `now`).
     * `write`: as strong as the write of its next message id, for an action that writes in the chat;
     * `share`: FOR SHARE, for one that writes nothing there: enough to be ordered with a change of
     * the chat's type or owner (an UPDATE of the row), and such actions do not wait for each other.
     * Taken before the
     * target's users row, in the order of the chat paths (a kick, a chat ban, a new member's join:
     * the chat row, then the user's), so a moderation never holds the user's row while it waits for
     * the chat's.
     */
    async lockChat(
      chatId: number,
      now: Date,
      tx: Tx,
      strength: 'write' | 'share' = 'write',
    ): Promise<{ type: string; ownerUserId: number | null; archived: boolean } | undefined> {
      const [row] = await tx
        .select({
          type: chats.type,
          ownerUserId: chats.ownerUserId,
          archived: sql<boolean>`not ${directActive('chats', sql`${now.toISOString()}::timestamptz`)}`,
        })
        .from(chats)
        .where(and(eq(chats.id, chatId), isNull(chats.deletedAt)))
        .for(strength === 'write' ? 'no key update' : 'share');
      return row;
    },
    /** Every chat the user is a member of, in id order, before the user's row (a ban raises their epochs). */
    lockChatsOf: (userId: number, tx: Tx) => lockChatsOfUser(userId, tx),
    /**
     * Writes the state the user's records give at `now` (platformState) to the users row. Call it
     * with the row locked (UsersStore.byIdForUpdate) before the records were read or written in
     * this transaction, so concurrent punishments of one user each see the others' records.
     */
    async settleState(userId: number, now: Date, tx: Tx): Promise<{ state: number; stateExpiresAt: Date | null }> {
      const [row] = await tx
        .update(users)
        .set({ ...platformState(userId, now), updatedAt: now })
        .where(eq(users.id, userId))
        .returning({ state: users.state, stateExpiresAt: users.stateExpiresAt });
      if (!row) throw new Error('settleState: no such user');
      await onChanged([userId], tx);
      return row;
    },
    /**
     * Marks records whose expiry passed as lifted, at their expiry (when they stopped applying, not
     * when the sweep came by), oldest expiry first; returns them. Safe on many nodes.
     */
    async liftExpired(now: Date, limit: number): Promise<ModerationRow[]> {
      const due = liftDue(now, limit);
      return db
        .update(moderationActions)
        .set({ isLifted: true, liftedAt: sql`${moderationActions.expiresAt}` })
        .where(sql`${moderationActions.id} in (${due})`)
        .returning();
    },
    /**
     * Up to `limit` users whose timeout or temporary ban ended: to the state their records still
     * give (platformState: Active when none is active, Timeout when a timeout outlasts a temporary
     * ban, Banned when a row was written otherwise); answers their ids and new states. Safe on many
     * nodes (each batch skips the users another node is restoring or a punishment holds).
     */
    async restoreExpiredStates(now: Date, limit: number): Promise<{ id: number; state: number }[]> {
      const rows = await db
        .update(users)
        .set({ ...platformState(users.id, now), updatedAt: now })
        .where(sql`${users.id} in (${restoreDue(now, limit)})`)
        .returning({ id: users.id, state: users.state });
      await onChanged(
        rows.map((r) => r.id),
        db,
      );
      return rows;
    },
  };
}

export type ModerationStore = ReturnType<typeof makeModerationStore>;
