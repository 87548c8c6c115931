import type { Message } from '@parlor/protocol';
import { type AnyColumn, and, desc, eq, gt, inArray, isNull, or } from 'drizzle-orm';
import { type Db, rowsOf } from '../../platform/db/index.js';
import { messages, moderationActions } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';
import { appendSql, type PageRequest, pagesSql, type SendBatch, sendBatchSql } from './messages.sql.js';

export type MessageRow = typeof messages.$inferSelect;

/** Splits a stream id `<ms>-<seq>` into its parts. */
export function parseMessageId(id: string): { ms: number; seq: number } {
  const [ms, seq] = id.split('-').map(Number);
  return { ms: ms ?? 0, seq: seq ?? 0 };
}

/**
 * A chat restriction in force: one of `actionTypes` against the user, in the chat (a chat id, or
 * the column of an outer query) or platform-wide (no chat), neither lifted nor expired at `now`.
 */
export function restrictionInForce(chatId: number | AnyColumn, userId: number, actionTypes: string[], now: Date) {
  const a = moderationActions;
  return and(
    or(eq(a.chatId, chatId), isNull(a.chatId)),
    eq(a.userId, userId),
    inArray(a.actionType, actionTypes),
    eq(a.isLifted, false),
    or(isNull(a.expiresAt), gt(a.expiresAt, now)),
  );
}

export function makeMessagesStore(db: Db) {
  return {
    /**
     * Appends a message under the chat's next id in one statement: the UPDATE of the chat row takes
     * `<ms>-<seq>` (ms the current time unless the last id is ahead, clock skew between nodes; seq
     * counting within one ms) and the INSERT uses it. The row lock is held only for that statement
     * (or the caller's transaction), so ids are strictly increasing per chat whichever node sends.
     */
    async append(values: Omit<MessageRow, 'ms' | 'seq'>, tx: Tx = db): Promise<MessageRow> {
      const [row] = rowsOf<{ ms: number | string; seq: number }>(await tx.execute(appendSql(values)));
      if (!row) throw new Error('chat vanished while appending');
      return { ...values, ms: Number(row.ms), seq: row.seq };
    },
    /**
     * A batch of user messages (see `sendBatchSql`): each one is sent only if the chat is live, not
     * archived, at the batch's epoch, and its sender is a member, neither banned nor muted here,
     * holding an envelope at that epoch; all checked and written in one statement. One result per
     * item, in order: its id, or undefined when a check failed (the caller finds which).
     */
    async sendBatch(batch: SendBatch): Promise<({ ms: number; seq: number } | undefined)[]> {
      const rows = rowsOf<{ ord: number; ms: number | string; seq: number }>(await db.execute(sendBatchSql(batch)));
      const out: ({ ms: number; seq: number } | undefined)[] = batch.items.map(() => undefined);
      for (const r of rows) out[r.ord] = { ms: Number(r.ms), seq: r.seq };
      return out;
    },
    /**
     * Pages of one chat for several requests in one statement (see `pagesSql`), one per request in
     * order, each newest first and already in the wire shape. A page is empty when its reader may
     * not read the chat or it is gone, as for an empty page: the caller tells.
     */
    async readablePages(chatId: number, requests: PageRequest[]): Promise<Message[][]> {
      const rows = rowsOf<Message & { ord: number }>(await db.execute(pagesSql(chatId, requests)));
      const pages: Message[][] = requests.map(() => []);
      for (const { ord, ...message } of rows) pages[ord]?.push(message);
      return pages;
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
        .where(restrictionInForce(chatId, userId, actionTypes, now))
        .orderBy(desc(moderationActions.expiresAt))
        .limit(1);
      return row;
    },
  };
}

export type MessagesStore = ReturnType<typeof makeMessagesStore>;
