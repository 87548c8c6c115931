import { and, desc, eq, gt, inArray, isNull, or, sql } from 'drizzle-orm';
import type { Db } from '../../platform/db/index.js';
import { chats, messages, moderationActions } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

export type MessageRow = typeof messages.$inferSelect;

/** Splits a stream id `<ms>-<seq>` into its parts. */
export function parseMessageId(id: string): { ms: number; seq: number } {
  const [ms, seq] = id.split('-').map(Number);
  return { ms: ms ?? 0, seq: seq ?? 0 };
}

export function makeMessagesStore(db: Db) {
  return {
    /**
     * Takes the chat's next message id: `<ms>-<seq>` with ms the current time unless the last id
     * is ahead (clock skew between nodes), and seq counting within one ms. The row lock of the
     * UPDATE makes ids strictly increasing per chat whichever node sends.
     */
    async nextId(chatId: number, nowMs: number, tx: Tx): Promise<{ ms: number; seq: number }> {
      const [row] = await tx
        .update(chats)
        .set({
          msgSeq: sql`case when ${chats.msgMs} >= ${nowMs} then ${chats.msgSeq} + 1 else 0 end`,
          msgMs: sql`greatest(${chats.msgMs}, ${nowMs})`,
        })
        .where(eq(chats.id, chatId))
        .returning({ ms: chats.msgMs, seq: chats.msgSeq });
      if (!row) throw new Error('chat vanished while sending');
      return row;
    },
    async insert(values: typeof messages.$inferInsert, tx: Tx): Promise<MessageRow> {
      const [row] = await tx.insert(messages).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    /** Newest first, strictly before the cursor when one is given. */
    async page(chatId: number, before: { ms: number; seq: number } | null, limit: number): Promise<MessageRow[]> {
      // A row comparison lets the (chat_id, ms, seq) index bound the scan at the cursor.
      const cursor = before ? sql`(${messages.ms}, ${messages.seq}) < (${before.ms}, ${before.seq})` : undefined;
      return db
        .select()
        .from(messages)
        .where(and(eq(messages.chatId, chatId), cursor))
        .orderBy(desc(messages.ms), desc(messages.seq))
        .limit(limit);
    },
    async byIds(chatId: number, ids: { ms: number; seq: number }[]): Promise<MessageRow[]> {
      if (ids.length === 0) return [];
      const match = or(...ids.map((i) => and(eq(messages.ms, i.ms), eq(messages.seq, i.seq))));
      return db
        .select()
        .from(messages)
        .where(and(eq(messages.chatId, chatId), match));
    },
    async remove(chatId: number, ids: { ms: number; seq: number }[]): Promise<MessageRow[]> {
      if (ids.length === 0) return [];
      const match = or(...ids.map((i) => and(eq(messages.ms, i.ms), eq(messages.seq, i.seq))));
      return db
        .delete(messages)
        .where(and(eq(messages.chatId, chatId), match))
        .returning();
    },
    async removeBySender(chatId: number, senderId: number): Promise<MessageRow[]> {
      return db
        .delete(messages)
        .where(and(eq(messages.chatId, chatId), eq(messages.senderId, senderId), eq(messages.type, 'user')))
        .returning();
    },
    async lastIds(chatId: number, count: number): Promise<{ ms: number; seq: number }[]> {
      return db
        .select({ ms: messages.ms, seq: messages.seq })
        .from(messages)
        .where(and(eq(messages.chatId, chatId), eq(messages.type, 'user')))
        .orderBy(desc(messages.ms), desc(messages.seq))
        .limit(count);
    },
    /**
     * The active chat restriction (CHAT_BAN, CHAT_MUTE) of a user in a chat, if any; a record
     * without a chat (a hard mute) applies to every chat. Permanent ones come first.
     */
    async activeRestriction(chatId: number, userId: number, actionTypes: string[], now: Date, tx: Tx = db) {
      const [row] = await tx
        .select()
        .from(moderationActions)
        .where(
          and(
            or(eq(moderationActions.chatId, chatId), isNull(moderationActions.chatId)),
            eq(moderationActions.userId, userId),
            inArray(moderationActions.actionType, actionTypes),
            eq(moderationActions.isLifted, false),
            or(isNull(moderationActions.expiresAt), gt(moderationActions.expiresAt, now)),
          ),
        )
        .orderBy(desc(moderationActions.expiresAt))
        .limit(1);
      return row;
    },
  };
}

export type MessagesStore = ReturnType<typeof makeMessagesStore>;
