import { and, count, eq, gte, isNull, ne, or, sql } from 'drizzle-orm';
import { anyOf, type Db } from '../../platform/db/index.js';
import { chatMembers, sessions } from '../../platform/db/schema.js';
import { liveOrOverAfter } from '../sessions/sessions.store.js';
import type { Tx } from '../users/users.store.js';

/** A chat's memberships: who is a member now, joins and leaves. */
export function makeMemberStore(db: Db) {
  return {
    /** The chat's current members, counted as of `tx` (an answer built in the transaction that wrote the chat). */
    async memberCount(chatId: number, tx: Tx = db): Promise<number> {
      const [row] = await tx
        .select({ n: count() })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chatId), isNull(chatMembers.leftAt)));
      return row?.n ?? 0;
    },
    async isMember(chatId: number, userId: number, tx: Tx = db): Promise<boolean> {
      const [row] = await tx
        .select({ n: count() })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chatId), eq(chatMembers.userId, userId), isNull(chatMembers.leftAt)));
      return (row?.n ?? 0) > 0;
    },
    /**
     * A member now: locks the membership row (FOR SHARE) for the transaction, so a kick, ban,
     * leave or deletion, which all end it with an UPDATE, waits for this transaction to end.
     * Answers when the membership began (a join reads how young it is), null when not a member.
     */
    async holdMembership(chatId: number, userId: number, tx: Tx): Promise<{ joinedAt: Date } | null> {
      const [row] = await tx
        .select({ joinedAt: chatMembers.joinedAt })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chatId), eq(chatMembers.userId, userId), isNull(chatMembers.leftAt)))
        .for('share');
      return row ?? null;
    },
    /**
     * The current memberships among these chats and users, one statement, each locked as
     * `holdMembership` locks one (FOR SHARE, for the transaction): what a recovered socket or a node
     * back from a sweep says online is said before any removal of them can commit. A chat deleted
     * or a ban ended its memberships in its own transaction, so neither is listed.
     */
    async holdMemberships(chatIds: number[], userIds: number[], tx: Tx): Promise<{ chatId: number; userId: number }[]> {
      if (chatIds.length === 0 || userIds.length === 0) return [];
      return tx
        .select({ chatId: chatMembers.chatId, userId: chatMembers.userId })
        .from(chatMembers)
        .where(and(anyOf(chatMembers.chatId, chatIds), anyOf(chatMembers.userId, userIds), isNull(chatMembers.leftAt)))
        .for('share');
    },
    /** A member now, or one whose membership ended at or after `since`. */
    async memberSince(chatId: number, userId: number, since: Date): Promise<boolean> {
      const [row] = await db
        .select({ n: count() })
        .from(chatMembers)
        .where(
          and(
            eq(chatMembers.chatId, chatId),
            eq(chatMembers.userId, userId),
            or(isNull(chatMembers.leftAt), gte(chatMembers.leftAt, since)),
          ),
        );
      return (row?.n ?? 0) > 0;
    },
    /** Adds or re-adds a member; returns false when already a member. */
    async addMember(chatId: number, userId: number, at: Date, tx: Tx): Promise<boolean> {
      const rows = await tx
        .insert(chatMembers)
        .values({ chatId, userId, joinedAt: at, leftAt: null })
        .onConflictDoUpdate({
          target: [chatMembers.chatId, chatMembers.userId],
          set: { joinedAt: at, leftAt: null },
          setWhere: sql`${chatMembers.leftAt} is not null`,
        })
        .returning({ userId: chatMembers.userId });
      return rows.length > 0;
    },
    async removeMember(chatId: number, userId: number, at: Date, tx: Tx): Promise<boolean> {
      const rows = await tx
        .update(chatMembers)
        .set({ leftAt: at })
        .where(and(eq(chatMembers.chatId, chatId), eq(chatMembers.userId, userId), isNull(chatMembers.leftAt)))
        .returning({ userId: chatMembers.userId });
      return rows.length > 0;
    },
    /**
     * The user's sessions live at `now` or over for less than `graceMs` (ended or expired): those a
     * removal of its membership says offline in the chat (chats.membership.ts), one database read
     * in its transaction. A session just over may still have a socket in the room (its node has
     * not dropped it yet), which the removal takes out: its disconnect then finds no chat to say
     * it left, so the removal says it.
     */
    async recentSessionIds(userId: number, now: Date, graceMs: number, tx: Tx): Promise<number[]> {
      const since = new Date(now.getTime() - graceMs);
      const rows = await tx
        .select({ id: sessions.id })
        .from(sessions)
        .where(and(eq(sessions.userId, userId), liveOrOverAfter(since)));
      return rows.map((r) => r.id);
    },
    async memberIds(chatId: number, tx: Tx = db): Promise<number[]> {
      const rows = await tx
        .select({ userId: chatMembers.userId })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chatId), isNull(chatMembers.leftAt)));
      return rows.map((r) => r.userId);
    },
    async endAllMemberships(chatId: number, at: Date, tx: Tx): Promise<number[]> {
      const rows = await tx
        .update(chatMembers)
        .set({ leftAt: at })
        .where(and(eq(chatMembers.chatId, chatId), isNull(chatMembers.leftAt)))
        .returning({ userId: chatMembers.userId });
      return rows.map((r) => r.userId);
    },
    async otherMembers(chatId: number, userId: number): Promise<number[]> {
      const rows = await db
        .select({ userId: chatMembers.userId })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chatId), isNull(chatMembers.leftAt), ne(chatMembers.userId, userId)));
      return rows.map((r) => r.userId);
    },
  };
}

export type MemberStore = ReturnType<typeof makeMemberStore>;
