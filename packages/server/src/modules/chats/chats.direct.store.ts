import { and, eq, getTableColumns, isNull, type SQL, sql } from 'drizzle-orm';
import { anyOf, type Db } from '../../platform/db/index.js';
import { chatMembers, chats } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

type ChatRow = typeof chats.$inferSelect;

/**
 * The steps of a direct chat's life after the match: expired → archived → removed. A removed chat
 * is purged with every other deleted chat (chats.purge.store.ts).
 */
export type DirectStep = 'archive' | 'remove';

/** The current members of the chat a statement over `chats` is at (the archive's RETURNING). */
const membersNow = sql<number>`(select count(*) from ${chatMembers}
  where ${chatMembers.chatId} = ${chats.id} and ${chatMembers.leftAt} is null)`.mapWith(Number);

/**
 * The ids of up to `limit` direct chats due for `step` at `cutoff`, oldest first, rows another
 * node is handling skipped (SKIP LOCKED). Each predicate is exactly that of a partial index of
 * schema.ts (`chats_direct_*_idx`), so a sweep reads only the chats it acts on. Exported for the
 * test that checks the plans use them.
 */
export function dueDirect(step: DirectStep, cutoff: Date, limit: number): SQL {
  // Raw sql`` parameters must be strings or numbers: postgres-js does not serialise Date there.
  const at = cutoff.toISOString();
  const [due, oldest] =
    step === 'archive'
      ? [
          sql`${chats.deletedAt} is null and ${chats.archivedAt} is null and ${chats.expiresAt} <= ${at}`,
          chats.expiresAt,
        ]
      : [sql`${chats.deletedAt} is null and ${chats.archivedAt} <= ${at}`, chats.archivedAt];
  return sql`select ${chats.id} from ${chats} where ${chats.type} = 'direct' and ${due} order by ${oldest} limit ${limit} for update skip locked`;
}

/**
 * A direct chat of alias `chat` still active at `at` (a timestamptz): not archived and not past its
 * expiry, though the sweep may not have archived it yet (`dueDirect('archive')` is the
 * complement). `archivedAtOf` (chats.rules.ts) is the same rule on a row.
 */
export function directActive(chat: 'chats' | 'c' | 'd', at: SQL): SQL {
  const c = sql.raw(chat);
  return sql`(${c}.archived_at is null and (${c}.expires_at is null or ${c}.expires_at > ${at}))`;
}

/** The direct-chat lifecycle's writes, one batch each; safe on many nodes at once. */
export function makeDirectSweepStore(db: Db) {
  return {
    /**
     * Archives one direct chat (an explicit leave) if it is still active at `now`, in the caller's
     * transaction; answers false when it was archived or removed already (a second leave, or the
     * expiry sweep first) or its expiry has passed (archived then, whether or not the sweep has
     * written it), so the caller writes nothing more. On PostgreSQL a concurrent archive
     * holds the row: this waits for it and then sees the chat archived.
     */
    async archiveActive(chatId: number, now: Date, tx: Tx): Promise<boolean> {
      const rows = await tx
        .update(chats)
        .set({ archivedAt: now, updatedAt: now })
        .where(
          and(
            eq(chats.id, chatId),
            eq(chats.type, 'direct'),
            isNull(chats.deletedAt),
            directActive('chats', sql`${now.toISOString()}::timestamptz`),
          ),
        )
        .returning({ id: chats.id });
      return rows.length > 0;
    },
    /**
     * Archives up to `limit` active direct chats whose expiry passed, as of their expiry (when
     * they stopped being active, as archivedAtOf reads them, not when the sweep came by: their
     * removal 24 h later counts from it); answers them with their members as the archive found
     * them, read by the same statement: the sweep's `chat:updated` then needs no read after the
     * commit, whose failure would lose that news (the next tick finds the chats archived).
     */
    async archiveDue(now: Date, limit: number): Promise<(ChatRow & { memberCount: number })[]> {
      return db
        .update(chats)
        .set({ archivedAt: sql`${chats.expiresAt}`, updatedAt: now })
        .where(sql`${chats.id} in (${dueDirect('archive', now, limit)})`)
        .returning({ ...getTableColumns(chats), memberCount: membersNow });
    },
    /**
     * Removes (soft-deletes) up to `limit` direct chats archived at or before `cutoff` and ends
     * their memberships in the same transaction, so nothing that lists a user's chats reads them
     * again. Answers the chats and the users whose membership ended.
     */
    async removeDue(
      cutoff: Date,
      now: Date,
      limit: number,
    ): Promise<{ removed: ChatRow[]; members: { chatId: number; userId: number }[] }> {
      return db.transaction(async (tx) => {
        const removed = await tx
          .update(chats)
          .set({ deletedAt: now, updatedAt: now })
          .where(sql`${chats.id} in (${dueDirect('remove', cutoff, limit)})`)
          .returning();
        if (removed.length === 0) return { removed, members: [] };
        const members = await tx
          .update(chatMembers)
          .set({ leftAt: now })
          .where(
            and(
              anyOf(
                chatMembers.chatId,
                removed.map((c) => c.id),
              ),
              isNull(chatMembers.leftAt),
            ),
          )
          .returning({ chatId: chatMembers.chatId, userId: chatMembers.userId });
        return { removed, members };
      });
    },
  };
}

export type DirectSweepStore = ReturnType<typeof makeDirectSweepStore>;
