import { type SQL, sql } from 'drizzle-orm';
import type { AnyPgColumn } from 'drizzle-orm/pg-core';
import { type Db, deleteBatch } from '../../platform/db/index.js';
import { chats, keyEnvelopes, messages } from '../../platform/db/schema.js';

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
 * The ids of up to `limit` chats due for purge at `cutoff`, oldest deletion first, rows another
 * node is purging skipped. Only chats whose messages and key envelopes are already gone
 * (`clearDeleted`): the cascade of the chat row then takes its memberships, history and invites.
 * Exported for the test that checks the plan reads chats_deleted_idx.
 */
export function duePurge(cutoff: Date, limit: number): SQL {
  return sql`select ${chats.id} from ${chats} where ${deletedBy(cutoff)}
    and not exists (select 1 from ${messages} where ${messages.chatId} = ${chats.id})
    and not exists (select 1 from ${keyEnvelopes} where ${keyEnvelopes.chatId} = ${chats.id})
    order by ${chats.deletedAt} limit ${limit} for update skip locked`;
}

/**
 * Rows of chats due for purge at `cutoff`, in a table whose primary key leads with `chatId`
 * (messages, key envelopes): read through chats_deleted_idx, then that key. Exported for the plan test.
 */
export function ofDeletedChats(chatId: AnyPgColumn, cutoff: Date): SQL {
  return sql`${chatId} in (select ${chats.id} from ${chats} where ${deletedBy(cutoff)})`;
}

/** The purge of deleted chats, one bounded statement a batch; safe on many nodes at once. */
export function makeChatPurgeStore(db: Db) {
  return {
    /**
     * Deletes up to `limit` rows of one of the two tables a chat can hold millions of (messages,
     * key envelopes: members × epochs), of chats due for purge at `cutoff`; answers how many. A
     * big chat is taken apart over several batches and ticks rather than in one cascade that
     * could outrun the statement timeout, and so hold up every purge after it.
     */
    async clearDeleted(table: 'messages' | 'key_envelopes', cutoff: Date, limit: number): Promise<number> {
      return table === 'messages'
        ? deleteBatch(
            db,
            messages,
            [messages.chatId, messages.ms, messages.seq],
            ofDeletedChats(messages.chatId, cutoff),
            limit,
          )
        : deleteBatch(
            db,
            keyEnvelopes,
            [keyEnvelopes.chatId, keyEnvelopes.epoch, keyEnvelopes.recipientSessionId],
            ofDeletedChats(keyEnvelopes.chatId, cutoff),
            limit,
          );
    },
    /**
     * Deletes up to `limit` chats deleted at or before `cutoff` whose messages and key envelopes
     * are gone, for good: their memberships, history and invites go with them (ON DELETE
     * CASCADE); a guild whose chat it was keeps the guild with no chat (ON DELETE SET NULL).
     * Answers how many.
     */
    async purgeDeleted(cutoff: Date, limit: number): Promise<number> {
      const rows = await db
        .delete(chats)
        .where(sql`${chats.id} in (${duePurge(cutoff, limit)})`)
        .returning({ id: chats.id });
      return rows.length;
    },
  };
}

export type ChatPurgeStore = ReturnType<typeof makeChatPurgeStore>;
