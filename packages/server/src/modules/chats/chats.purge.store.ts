import { type SQL, sql } from 'drizzle-orm';
import type { AnyPgColumn } from 'drizzle-orm/pg-core';
import { type Db, deleteBatch, rowsOf } from '../../platform/db/index.js';
import { chatActivity, chatInvites, chatMembers, chats, keyEnvelopes, messages } from '../../platform/db/schema.js';

/**
 * The tables a deleted chat's rows live in, each with the key a batch deletes by, in the order the
 * purge clears them: messages and key envelopes (members × epochs) can hold millions, history
 * (90 days of joins and leaves) and memberships of a big public chat hundreds of thousands. Each
 * index or key leads with `chat_id`.
 */
const CHAT_ROWS = {
  messages: { chatId: messages.chatId, key: [messages.chatId, messages.ms, messages.seq] },
  key_envelopes: {
    chatId: keyEnvelopes.chatId,
    key: [keyEnvelopes.chatId, keyEnvelopes.epoch, keyEnvelopes.recipientSessionId],
  },
  chat_activity: { chatId: chatActivity.chatId, key: [chatActivity.id] },
  chat_invites: { chatId: chatInvites.chatId, key: [chatInvites.code] },
  chat_members: { chatId: chatMembers.chatId, key: [chatMembers.chatId, chatMembers.userId] },
} as const satisfies Record<string, { chatId: AnyPgColumn; key: readonly [AnyPgColumn, ...AnyPgColumn[]] }>;

export type ChatRowsTable = keyof typeof CHAT_ROWS;

/** The tables `clearDeleted` takes apart, in order, before the chat row itself goes. */
export const CHAT_ROWS_TABLES = Object.keys(CHAT_ROWS) as ChatRowsTable[];

/**
 * Chats of any type deleted at or before `cutoff` (direct chats the lifecycle removed, chats their
 * owner or an admin deleted): the predicate of the partial index chats_deleted_idx (schema.ts),
 * exactly. Nothing clears `deleted_at` again, so a chat that matches stays gone.
 */
export function deletedBy(cutoff: Date): SQL {
  // Raw sql`` parameters must be strings or numbers: postgres-js does not serialise Date there.
  return sql`${chats.deletedAt} is not null and ${chats.deletedAt} <= ${cutoff.toISOString()}`;
}

/**
 * Which of the chats due for purge a statement covers: all of them but `except` (those whose own
 * statement failed this sweep), or the one chat `only` (chats.purge.ts `drainByChat`).
 */
export type DueChats = { except: readonly number[] } | { only: number };

/** The condition that keeps a statement to the chats `which`, on the column `id` holding a chat's id. */
function among(id: AnyPgColumn, which: DueChats): SQL {
  if ('only' in which) return sql`and ${id} = ${which.only}`;
  if (which.except.length === 0) return sql.empty();
  const ids = sql.join(
    which.except.map((chatId) => sql`${chatId}`),
    sql`, `,
  );
  return sql`and ${id} not in (${ids})`;
}

/**
 * The ids of up to `limit` chats due for purge at `cutoff` (among `which`), oldest deletion first,
 * rows another node is purging skipped. Only chats whose rows in every CHAT_ROWS table are already
 * gone (`clearDeleted`): the delete of the chat row then cascades to nothing, so no statement grows
 * with the size of a chat. Exported for the test that checks the plan reads chats_deleted_idx.
 */
export function duePurge(cutoff: Date, limit: number, which: DueChats = { except: [] }): SQL {
  const empty = sql.join(
    Object.values(CHAT_ROWS).map(
      ({ chatId }) => sql`and not exists (select 1 from ${chatId.table} where ${chatId} = ${chats.id})`,
    ),
    sql` `,
  );
  return sql`select ${chats.id} from ${chats} where ${deletedBy(cutoff)} ${among(chats.id, which)} ${empty}
    order by ${chats.deletedAt} limit ${limit} for update skip locked`;
}

/**
 * Rows of chats due for purge at `cutoff`, in a table whose key or index leads with `chatId`
 * (CHAT_ROWS): read through chats_deleted_idx, then that key. Exported for the plan test.
 */
export function ofDeletedChats(chatId: AnyPgColumn, cutoff: Date): SQL {
  return sql`${chatId} in (select ${chats.id} from ${chats} where ${deletedBy(cutoff)})`;
}

/**
 * The purge of deleted chats, one bounded statement a batch; safe on many nodes at once. Each
 * statement covers the due chats `which` (all but some, or one: chats.purge.ts `drainByChat`).
 */
export function makeChatPurgeStore(db: Db) {
  return {
    /**
     * Deletes up to `limit` rows of one of the CHAT_ROWS tables (messages, key envelopes,
     * history, invites, memberships) of chats due for purge at `cutoff`; answers how many. A big
     * chat is taken apart over several batches and ticks rather than in one cascade that could
     * outrun the statement timeout, and so hold up every purge after it.
     */
    async clearDeleted(table: ChatRowsTable, cutoff: Date, limit: number, which: DueChats): Promise<number> {
      const { chatId, key } = CHAT_ROWS[table];
      return deleteBatch(db, chatId.table, key, sql`${ofDeletedChats(chatId, cutoff)} ${among(chatId, which)}`, limit);
    },
    /**
     * The ids of up to `limit` chats due for purge at `cutoff` that still have rows in `table`,
     * `except` left out, oldest deletion first: those `clearDeleted` tries one at a time.
     */
    async dueToClear(table: ChatRowsTable, cutoff: Date, limit: number, except: readonly number[]): Promise<number[]> {
      const { chatId } = CHAT_ROWS[table];
      const rows = await db
        .select({ id: chats.id })
        .from(chats)
        .where(
          sql`${deletedBy(cutoff)} ${among(chats.id, { except })}
            and exists (select 1 from ${chatId.table} where ${chatId} = ${chats.id})`,
        )
        .orderBy(chats.deletedAt)
        .limit(limit);
      return rows.map((r) => r.id);
    },
    /**
     * Deletes up to `limit` chats deleted at or before `cutoff` whose rows in every CHAT_ROWS
     * table are gone, for good (the ON DELETE CASCADE finds nothing left); a guild whose chat it
     * was keeps the guild with no chat (ON DELETE SET NULL). Answers how many.
     */
    async purgeDeleted(cutoff: Date, limit: number, which: DueChats): Promise<number> {
      const rows = await db
        .delete(chats)
        .where(sql`${chats.id} in (${duePurge(cutoff, limit, which)})`)
        .returning({ id: chats.id });
      return rows.length;
    },
    /** The ids of up to `limit` chats `purgeDeleted` would delete, `except` left out: those it tries one at a time. */
    async dueToPurge(cutoff: Date, limit: number, except: readonly number[]): Promise<number[]> {
      const rows = rowsOf<{ id: number }>(await db.execute(duePurge(cutoff, limit, { except })));
      return rows.map((r) => Number(r.id));
    },
  };
}

export type ChatPurgeStore = ReturnType<typeof makeChatPurgeStore>;
