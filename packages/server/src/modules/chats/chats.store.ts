import { and, count, desc, eq, exists, inArray, isNull, sql } from 'drizzle-orm';
import { anyOf, type Db } from '../../platform/db/index.js';
import { chatMembers, chats, moderationActions, users } from '../../platform/db/schema.js';
import { restrictionInForce } from '../messages/messages.store.js';
import type { StoredState } from '../users/users.presenter.js';
import type { Tx, UserRow } from '../users/users.store.js';
import { makeActivityStore } from './chats.activity.store.js';
import { directActive, makeDirectSweepStore } from './chats.direct.store.js';
import { makeInviteStore } from './chats.invites.store.js';
import { makeMemberStore } from './chats.members.store.js';
import { makePairingStore } from './chats.pairing.store.js';
import { makeChatPurgeStore } from './chats.purge.store.js';

export type ChatRow = typeof chats.$inferSelect;
export type { ActivityRow } from './chats.activity.store.js';
export type { InviteRow } from './chats.invites.store.js';
export type { DirectRefusal } from './chats.pairing.store.js';
export type ChatWithCount = ChatRow & { memberCount: number };

const memberCount =
  sql<number>`(select count(*) from ${chatMembers} where ${chatMembers.chatId} = ${chats.id} and ${chatMembers.leftAt} is null)`.mapWith(
    Number,
  );
const live = isNull(chats.deletedAt);

export function makeChatsStore(db: Db) {
  /** Built once: the chat lists of a turn's socket connections (`chat:list`). */
  const listForQuery = db
    .select({ chat: chats, memberCount, userId: chatMembers.userId })
    .from(chatMembers)
    .innerJoin(chats, eq(chats.id, chatMembers.chatId))
    .where(and(anyOf(chatMembers.userId, sql.placeholder('userIds')), isNull(chatMembers.leftAt), live))
    .orderBy(desc(chats.id))
    .prepare('chats_list_for');

  return {
    // The direct-chat lifecycle's batches (chats.direct.store.ts).
    ...makeDirectSweepStore(db),
    // The purge of deleted chats, every type (chats.purge.store.ts).
    ...makeChatPurgeStore(db),
    // Membership history (chats.activity.store.ts).
    ...makeActivityStore(db),
    // Invites (chats.invites.store.ts).
    ...makeInviteStore(db),
    // Matched direct chats and their users' slot locks (chats.pairing.store.ts).
    ...makePairingStore(db),
    // Memberships of a chat (chats.members.store.ts).
    ...makeMemberStore(db),
    async insert(values: typeof chats.$inferInsert, tx: Tx = db): Promise<ChatRow> {
      const [row] = await tx.insert(chats).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    async byId(id: number, tx: Tx = db): Promise<ChatWithCount | undefined> {
      const [row] = await tx
        .select({ chat: chats, memberCount })
        .from(chats)
        .where(and(eq(chats.id, id), live))
        .limit(1);
      return row ? { ...row.chat, memberCount: row.memberCount } : undefined;
    },
    /**
     * The chat, when it is a live direct chat `userId` is a member of now; else undefined. One
     * statement whatever the id names (no chat, another's chat, a chat of another type), so a
     * stranger asking (docs/api.md, Strangers) learns nothing of other chats from the answer or
     * from the number of round trips it took.
     */
    async ownDirect(id: number, userId: number): Promise<ChatWithCount | undefined> {
      const member = db
        .select({ n: sql`1` })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chats.id), eq(chatMembers.userId, userId), isNull(chatMembers.leftAt)));
      const [row] = await db
        .select({ chat: chats, memberCount })
        .from(chats)
        .where(and(eq(chats.id, id), live, eq(chats.type, 'direct'), exists(member)))
        .limit(1);
      return row ? { ...row.chat, memberCount: row.memberCount } : undefined;
    },
    async lockById(id: number, tx: Tx): Promise<ChatRow | undefined> {
      const [row] = await tx
        .select()
        .from(chats)
        .where(and(eq(chats.id, id), live))
        .limit(1)
        .for('update');
      return row;
    },
    /**
     * The live chat, its row held FOR SHARE until the transaction ends: a deletion or a change of
     * type or name (each an UPDATE of the row) either committed before (read here) or waits for
     * this transaction. Writes that only depend on the chat (an invite) take this, not `lockById`,
     * so they do not wait for each other.
     */
    async shareById(id: number, tx: Tx): Promise<ChatRow | undefined> {
      const [row] = await tx
        .select()
        .from(chats)
        .where(and(eq(chats.id, id), live))
        .limit(1)
        .for('share');
      return row;
    },
    async update(id: number, values: Partial<typeof chats.$inferInsert>, tx: Tx = db): Promise<ChatRow | undefined> {
      const [row] = await tx
        .update(chats)
        .set(values)
        .where(and(eq(chats.id, id), live))
        .returning();
      return row;
    },
    /**
     * The creator's row, held (FOR SHARE) until the transaction ends, with what its creation slots
     * follow (spec 2.11: level, tier and the tier's expiry) and its stored state as committed: a
     * revoke, demotion, ban, timeout or deletion either committed before (read here) or waits for
     * the creation. Undefined when the user is gone.
     */
    async lockCreator(
      userId: number,
      tx: Tx,
    ): Promise<
      (Pick<UserRow, 'permissionLevel' | 'subscriptionTier' | 'subscriptionExpiresAt'> & StoredState) | undefined
    > {
      const [row] = await tx
        .select({
          permissionLevel: users.permissionLevel,
          subscriptionTier: users.subscriptionTier,
          subscriptionExpiresAt: users.subscriptionExpiresAt,
          state: users.state,
          stateExpiresAt: users.stateExpiresAt,
          thenState: users.thenState,
          thenStateExpiresAt: users.thenStateExpiresAt,
        })
        .from(users)
        .where(eq(users.id, userId))
        .limit(1)
        .for('share');
      return row;
    },
    /** Chats counting against a user's creation slots (public and private ones they own). */
    async countOwned(userId: number, tx: Tx = db): Promise<number> {
      const [row] = await tx
        .select({ n: count() })
        .from(chats)
        .where(and(eq(chats.ownerUserId, userId), live, inArray(chats.type, ['public', 'private'])));
      return row?.n ?? 0;
    },
    /** The chats a user is a member of, newest first (archived direct chats included). */
    /**
     * The chats some users are members of, newest first, in one statement (the service groups the
     * lists of one turn: the chat:list of a burst of socket connects). One list per user, in order.
     */
    async listFor(userIds: number[]): Promise<ChatWithCount[][]> {
      const rows = await listForQuery.execute({ userIds });
      const lists = new Map<number, ChatWithCount[]>(userIds.map((id) => [id, []]));
      for (const r of rows) lists.get(r.userId)?.push({ ...r.chat, memberCount: r.memberCount });
      return userIds.map((id) => lists.get(id) ?? []);
    },
    /** Of some chats, those the user is still a member of, live and with no chat ban in force. */
    async stillIn(userId: number, chatIds: number[], now: Date): Promise<number[]> {
      if (chatIds.length === 0) return [];
      const banned = db
        .select({ one: sql`1` })
        .from(moderationActions)
        .where(restrictionInForce(chatMembers.chatId, userId, ['CHAT_BAN'], now));
      const rows = await db
        .select({ chatId: chatMembers.chatId })
        .from(chatMembers)
        .innerJoin(chats, eq(chats.id, chatMembers.chatId))
        .where(
          and(
            eq(chatMembers.userId, userId),
            anyOf(chatMembers.chatId, chatIds),
            isNull(chatMembers.leftAt),
            live,
            sql`not exists (${banned})`,
          ),
        );
      return rows.map((r) => r.chatId);
    },
    async chatIdsOf(userId: number, tx: Tx = db): Promise<number[]> {
      const rows = await tx
        .select({ chatId: chatMembers.chatId })
        .from(chatMembers)
        .innerJoin(chats, eq(chats.id, chatMembers.chatId))
        .where(and(eq(chatMembers.userId, userId), isNull(chatMembers.leftAt), live));
      return rows.map((r) => r.chatId);
    },
    async usernames(ids: number[]): Promise<Map<number, string>> {
      if (ids.length === 0) return new Map();
      const rows = await db.select({ id: users.id, username: users.username }).from(users).where(anyOf(users.id, ids));
      return new Map(rows.map((r) => [r.id, r.username]));
    },
    /** Direct chats of a user active at `now` (not archived, not past their expiry), newest first. */
    async activeDirectOf(userId: number, now: Date, tx: Tx = db): Promise<ChatRow[]> {
      const rows = await tx
        .select({ chat: chats })
        .from(chatMembers)
        .innerJoin(chats, eq(chats.id, chatMembers.chatId))
        .where(
          and(
            eq(chatMembers.userId, userId),
            isNull(chatMembers.leftAt),
            live,
            eq(chats.type, 'direct'),
            directActive('chats', sql`${now.toISOString()}::timestamptz`),
          ),
        )
        .orderBy(desc(chats.id));
      return rows.map((r) => r.chat);
    },
    async byToken(token: string): Promise<ChatRow | undefined> {
      const [row] = await db
        .select()
        .from(chats)
        .where(and(eq(chats.matchToken, token), live))
        .limit(1);
      return row;
    },
  };
}

export type ChatsStore = ReturnType<typeof makeChatsStore>;
