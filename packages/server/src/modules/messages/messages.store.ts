import type { Message } from '@parlor/protocol';
import { type AnyColumn, and, asc, desc, eq, exists, gt, inArray, isNull, or, sql } from 'drizzle-orm';
import { type Db, rowsOf } from '../../platform/db/index.js';
import { chats, messages, moderationActions, users } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';
import { appendSql, beforeExpiry, type PageRequest, pagesSql, type SendBatch, sendBatchSql } from './messages.sql.js';

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

/** A message named for deletion: its id, type, sender and the sender's level (null: no such user now). */
export interface DeletionCandidate {
  ms: number;
  seq: number;
  type: string;
  senderId: number | null;
  senderLevel: number | null;
}

/** Whose messages a delete-last reaches: the actor's own, senders of these levels, and deleted accounts'. */
export interface Reach {
  actorId: number;
  levels: number[];
}

const key = { ms: messages.ms, seq: messages.seq };

export function makeMessagesStore(db: Db) {
  /**
   * The chat is live, not archived and not past its expiry at `now` (spec 3: an archived chat is
   * read-only, a direct chat from its expiry on, as the send tests it): a condition of every
   * delete, so one racing an archive, a removal or the expiry deletes nothing rather than after it.
   */
  const writable = (chatId: number, now: Date) =>
    exists(
      db
        .select({ one: sql`1` })
        .from(chats)
        .where(and(eq(chats.id, chatId), isNull(chats.archivedAt), isNull(chats.deletedAt), beforeExpiry(now))),
    );
  const idMatch = (ids: { ms: number; seq: number }[]) =>
    or(...ids.map((i) => and(eq(messages.ms, i.ms), eq(messages.seq, i.seq))));

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
     * Raises the chat's `restrictions_seq` in the caller's transaction, which holds the chat row
     * (a chat mute): a send whose checks read before that commits writes nothing (sendBatchSql).
     */
    async raiseRestrictions(chatId: number, tx: Tx): Promise<void> {
      await tx
        .update(chats)
        .set({ restrictionsSeq: sql`${chats.restrictionsSeq} + 1` })
        .where(eq(chats.id, chatId));
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
    /** The messages of the chat with these ids (system ones too: the caller refuses them). */
    async byIds(chatId: number, ids: { ms: number; seq: number }[], tx: Tx = db): Promise<DeletionCandidate[]> {
      if (ids.length === 0) return [];
      return tx
        .select({ ...key, type: messages.type, senderId: messages.senderId, senderLevel: users.permissionLevel })
        .from(messages)
        .leftJoin(users, eq(users.id, messages.senderId))
        .where(and(eq(messages.chatId, chatId), idMatch(ids)));
    },
    /**
     * Holds FOR SHARE until the commit the users rows of the caller and of the senders of these
     * messages (a deleted account has none), in one statement that takes them in id order, as
     * every transaction locking several users rows does (admin.store lockUsersInIdOrder): a
     * delete by id, or delete-last of the messages it chose (holdLast), then decides its reach on
     * their levels as they are at the commit (messages.deletion asModerator).
     */
    async holdSenders(chatId: number, ids: { ms: number; seq: number }[], callerId: number, tx: Tx): Promise<void> {
      const senders = tx
        .select({ id: messages.senderId })
        .from(messages)
        .where(and(eq(messages.chatId, chatId), idMatch(ids)));
      await tx
        .select({ id: users.id })
        .from(users)
        .where(or(eq(users.id, callerId), inArray(users.id, senders)))
        .orderBy(asc(users.id))
        .for('share');
    },
    /**
     * The chat as a delete's transaction reads it once it holds its rows: null when removed, else
     * whether it is read-only at `now` (archived, or past its expiry), as `writable` decides.
     */
    async chatAt(chatId: number, now: Date, tx: Tx): Promise<{ archived: boolean } | null> {
      const [row] = await tx
        .select({ archived: sql<boolean>`${chats.archivedAt} is not null or not ${beforeExpiry(now)}` })
        .from(chats)
        .where(and(eq(chats.id, chatId), isNull(chats.deletedAt)));
      return row ?? null;
    },
    /**
     * Runs `fn` in one transaction: a delete, checked again there once it holds its rows
     * (messages.deletion `whileWritable`); a moderator's decided on the users rows read there
     * (asModerator) and written with them.
     */
    transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
      return db.transaction(fn);
    },
    /** Deletes these user messages (never a system one) if the chat is writable at `now`; answers those deleted. */
    async remove(
      chatId: number,
      ids: { ms: number; seq: number }[],
      now: Date,
      tx: Tx,
    ): Promise<{ ms: number; seq: number }[]> {
      if (ids.length === 0) return [];
      return tx
        .delete(messages)
        .where(and(eq(messages.chatId, chatId), eq(messages.type, 'user'), idMatch(ids), writable(chatId, now)))
        .returning(key);
    },
    /** Deletes every user message of a sender in the chat if the chat is writable at `now`. */
    async removeBySender(chatId: number, senderId: number, now: Date, tx: Tx): Promise<{ ms: number; seq: number }[]> {
      return tx
        .delete(messages)
        .where(
          and(
            eq(messages.chatId, chatId),
            eq(messages.senderId, senderId),
            eq(messages.type, 'user'),
            writable(chatId, now),
          ),
        )
        .returning(key);
    },
    /**
     * Chooses the newest `count` user messages within `reach` as the levels read now, and holds
     * them (FOR UPDATE) until the commit: messages out of reach are passed over, not counted. The
     * choice skips the rows another transaction holds (a concurrent delete's, which it deletes or
     * keeps): two delete-lasts at once each take the newest the other has not, rather than both the
     * same rows, the second then deleting nothing of them. The caller holds their senders' rows next
     * (holdSenders), decides again on those levels and deletes them (`remove`).
     */
    async holdLast(chatId: number, count: number, reach: Reach, tx: Tx): Promise<{ ms: number; seq: number }[]> {
      return tx
        .select(key)
        .from(messages)
        .leftJoin(users, eq(users.id, messages.senderId))
        .where(
          and(
            eq(messages.chatId, chatId),
            eq(messages.type, 'user'),
            or(eq(messages.senderId, reach.actorId), isNull(users.id), inArray(users.permissionLevel, reach.levels)),
          ),
        )
        .orderBy(desc(messages.ms), desc(messages.seq))
        .limit(count)
        .for('update', { of: messages, skipLocked: true });
    },
    /** A user's permission level; null when there is no such user (a deleted account). */
    async levelOf(userId: number, tx: Tx = db): Promise<number | null> {
      const [row] = await tx.select({ level: users.permissionLevel }).from(users).where(eq(users.id, userId));
      return row?.level ?? null;
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
