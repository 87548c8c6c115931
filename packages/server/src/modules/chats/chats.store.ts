import { and, count, desc, eq, exists, gte, inArray, isNull, ne, or, type SQL, sql } from 'drizzle-orm';
import { anyOf, type Db, rowsOf } from '../../platform/db/index.js';
import { chatMembers, chats, moderationActions, users } from '../../platform/db/schema.js';
import { restrictionInForce } from '../messages/messages.store.js';
import { premiumAtSql, type Tx, type UserRow } from '../users/users.store.js';
import { makeActivityStore } from './chats.activity.store.js';
import { directActive, makeDirectSweepStore } from './chats.direct.store.js';
import { makeInviteStore } from './chats.invites.store.js';
import { makeChatPurgeStore } from './chats.purge.store.js';

export type ChatRow = typeof chats.$inferSelect;
export type { ActivityRow } from './chats.activity.store.js';
export type { InviteRow } from './chats.invites.store.js';
export type ChatWithCount = ChatRow & { memberCount: number };

const memberCount =
  sql<number>`(select count(*) from ${chatMembers} where ${chatMembers.chatId} = ${chats.id} and ${chatMembers.leftAt} is null)`.mapWith(
    Number,
  );
const live = isNull(chats.deletedAt);

/** The advisory-lock class of a user's direct-chat slots (the key is the user id). */
const DIRECT_SLOTS_LOCK = 7244;

/**
 * Why a direct chat was not made: users that do not exist; users that may not use the platform now
 * (`state` as effectiveStateOf gives it: 1 timed out, 2 banned; 0: a stranger whose session is
 * over, who never signs in again); users whose direct-chat slots are full; strangers a moderator
 * blocked from matchmaking (`matchBlocked`, a block committed after the pairing's pre-check); users
 * whose search ended while the pair was being made (`cancelled`: a dequeue, as the caller's
 * `searchesEnded` found it); and whether one of the users blocked another (a block committed
 * after the pairing read the blocks).
 */
export interface DirectRefusal {
  missing: number[];
  inactive: { id: number; state: number }[];
  full: number[];
  matchBlocked: number[];
  cancelled: number[];
  blocked: boolean;
}

/**
 * effectiveStateOf (users.presenter.ts) in SQL, on a `users` row at `at`: the state that applies
 * now (a timeout or temporary ban past its end no longer does; the state stored to follow it does).
 */
const stateAtSql = (at: SQL) => sql`(case
  when state = 0 then 0
  when state_expires_at is null or state_expires_at > ${at} then state
  when then_state <> 0 and (then_state_expires_at is null or then_state_expires_at > ${at}) then then_state
  else 0 end)`;

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
    async insert(values: typeof chats.$inferInsert, tx: Tx = db): Promise<ChatRow> {
      const [row] = await tx.insert(chats).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    /**
     * A matched direct chat, within both users' concurrent direct-chat slots (spec 8: `slots.free`,
     * or `slots.premium` for a registered account with premium): the chat (named after its users,
     * in order), both memberships and their join activity, and the opening system message, which
     * takes the chat's first id `<at>-0` (the chat's id counter starts there). One transaction:
     * a lock per user (pg_advisory_xact_lock, ascending ids, so pairings sharing a user wait for
     * each other on every node and never deadlock), then one statement that counts each user's
     * active direct chats (not archived, not past their expiry at `at`) and writes only if every user exists, may use the platform (its
     * effective state is Active; a stranger still has a live session), is not blocked from
     * matchmaking and has a free slot. It holds the users' rows (FOR SHARE) as it reads them, so a
     * ban, timeout or stranger block committing meanwhile is either seen or comes after the chat.
     * Once the locks are held, `searchesEnded` names the users of the pair whose search has ended
     * meanwhile (a dequeue, which waits for these locks: waitForPairings); the statement then
     * writes nothing but still reads every other reason. Answers the new chat's id and epoch, the
     * users as stored and those whose slots it filled, or what refused it (nothing written).
     */
    async insertDirect(v: {
      userIds: number[];
      matchToken: string;
      expiresAt: Date;
      at: Date;
      opening: Record<string, unknown>;
      slots: { free: number; premium: number };
      searchesEnded: () => Promise<number[]>;
    }): Promise<
      | {
          id: number;
          epoch: number;
          users: { id: number; username: string; stranger: boolean }[];
          filled: number[];
        }
      | { refused: DirectRefusal }
    > {
      // Raw sql`` parameters must be strings or numbers: postgres-js does not serialise Date or arrays there.
      const ids = sql`array[${sql.join(
        v.userIds.map((id) => sql`${id}::integer`),
        sql`, `,
      )}]`;
      const at = sql`${v.at.toISOString()}::timestamptz`;
      const atMs = sql`${v.at.getTime()}::bigint`;
      const { ended, rows } = await db.transaction(async (tx) => {
        // The locks are taken after the sort (PostgreSQL evaluates volatile output columns after ORDER BY).
        await tx.execute(
          sql`select pg_advisory_xact_lock(${DIRECT_SLOTS_LOCK}, id) from unnest(${ids}) as l(id) order by id`,
        );
        const ended = await v.searchesEnded();
        // A statement of its own after the locks: its snapshot sees every pairing that held them.
        const result = await tx.execute(sql`
          with b as (
            select exists (select 1 from user_blocks
                           where blocker_id = any(${ids}) and blocked_id = any(${ids})) as blocked
          ), u as (
            select id, username, is_stranger, array_position(${ids}, id) as pos,
                   (select count(*) from chat_members cm join chats d on d.id = cm.chat_id
                     where cm.user_id = users.id and cm.left_at is null and d.deleted_at is null
                       and d.type = 'direct' and ${directActive('d', at)})::integer as active,
                   -- A stranger never has premium.
                   case when not is_stranger and ${premiumAtSql(at)}
                        then ${v.slots.premium}::integer else ${v.slots.free}::integer end as slots,
                   ${stateAtSql(at)}::integer as state_now,
                   match_blocked_at is not null as match_blocked,
                   -- A stranger never signs in again once its session is over.
                   (not is_stranger or exists (select 1 from sessions s where s.user_id = users.id
                     and s.ended_at is null and s.expires_at > ${at})) as signed_in
            from users where id = any(${ids})
            for share
          ), c as (
            insert into chats (type, name, owner_user_id, match_token, expires_at, msg_ms, msg_seq, created_at, updated_at)
            select 'direct', string_agg(username, ' & ' order by pos), null, ${v.matchToken},
                   ${v.expiresAt.toISOString()}::timestamptz, ${atMs}, 0, ${at}, ${at}
            from u
            having count(*) = ${v.userIds.length}::integer
               and bool_and(active < slots and state_now = 0 and signed_in and not match_blocked)
               -- Nor when a user's search has ended (read after the locks, before this statement).
               and ${ended.length}::integer = 0
               -- Nor two users one of whom blocked the other (after the pairing read the blocks).
               and not (select blocked from b)
            returning id, epoch
          ), m as (
            insert into chat_members (chat_id, user_id, joined_at) select c.id, u.id, ${at} from c, u
          ), a as (
            insert into chat_activity (chat_id, user_id, action, method, created_at)
            select c.id, u.id, 'join', 'direct', ${at} from c, u
          ), s as (
            insert into messages (chat_id, ms, seq, type, sender_id, content, system, created_at)
            select c.id, ${atMs}, 0, 'system', null, '', ${JSON.stringify(v.opening)}::text::jsonb, ${at} from c
          )
          select c.id::integer as chat_id, c.epoch::integer as epoch, u.id::integer as user_id, u.username,
                 u.is_stranger, u.active >= u.slots as full, u.active + 1 >= u.slots as fills,
                 u.state_now, u.signed_in, u.match_blocked, (select blocked from b) as blocked
          from u left join c on true order by u.pos`);
        return {
          ended,
          rows: rowsOf<{
            chat_id: number | null;
            epoch: number | null;
            user_id: number;
            username: string;
            is_stranger: boolean;
            full: boolean;
            fills: boolean;
            state_now: number;
            signed_in: boolean;
            match_blocked: boolean;
            blocked: boolean;
          }>(result),
        };
      });
      const first = rows[0];
      if (first?.chat_id == null || first.epoch == null) {
        const found = new Set(rows.map((r) => Number(r.user_id)));
        return {
          refused: {
            missing: v.userIds.filter((id) => !found.has(id)),
            inactive: rows
              .filter((r) => Number(r.state_now) !== 0 || r.signed_in !== true)
              .map((r) => ({ id: Number(r.user_id), state: Number(r.state_now) })),
            full: rows.filter((r) => r.full === true).map((r) => Number(r.user_id)),
            matchBlocked: rows.filter((r) => r.match_blocked === true).map((r) => Number(r.user_id)),
            cancelled: ended,
            blocked: first?.blocked === true,
          },
        };
      }
      return {
        id: Number(first.chat_id),
        epoch: Number(first.epoch),
        users: rows.map((r) => ({ id: Number(r.user_id), username: r.username, stranger: r.is_stranger === true })),
        filled: rows.filter((r) => r.fills === true).map((r) => Number(r.user_id)),
      };
    },
    /**
     * Waits until no pairing holds the user's direct-chat slot lock (insertDirect): a pairing that
     * held it has committed or rolled back when this returns, and one that takes it later asks for
     * the user's search after this (a dequeue's mark) and refuses it. The lock is held for this
     * one statement only.
     */
    async waitForPairings(userId: number): Promise<void> {
      await db.execute(sql`select pg_advisory_xact_lock(${DIRECT_SLOTS_LOCK}::integer, ${userId}::integer)`);
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
    /** The chat's current members, counted as of `tx` (an answer built in the transaction that wrote the chat). */
    async memberCount(chatId: number, tx: Tx = db): Promise<number> {
      const [row] = await tx
        .select({ n: count() })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chatId), isNull(chatMembers.leftAt)));
      return row?.n ?? 0;
    },
    /** The current members of each of the chats, one statement; a chat with none is left out. */
    async memberCounts(chatIds: number[]): Promise<Map<number, number>> {
      if (chatIds.length === 0) return new Map();
      const rows = await db
        .select({ chatId: chatMembers.chatId, n: count() })
        .from(chatMembers)
        .where(and(anyOf(chatMembers.chatId, chatIds), isNull(chatMembers.leftAt)))
        .groupBy(chatMembers.chatId);
      return new Map(rows.map((r) => [r.chatId, r.n]));
    },
    /** A user's permission level as stored (undefined: the account is gone); read, not locked. */
    async levelOf(userId: number, tx: Tx = db): Promise<number | undefined> {
      const [row] = await tx.select({ level: users.permissionLevel }).from(users).where(eq(users.id, userId)).limit(1);
      return row?.level;
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
     * Whether a user's row still exists, held (FOR KEY SHARE, what a foreign key to it needs)
     * until the transaction ends: a deletion committed before answers false, one that comes later
     * waits for this transaction. Writes that name a user (an owner, a member) check it first, so
     * an account deleted meanwhile is refused, never a foreign-key error.
     */
    async lockUser(userId: number, tx: Tx): Promise<boolean> {
      const rows = await tx.select({ id: users.id }).from(users).where(eq(users.id, userId)).for('key share');
      return rows.length > 0;
    },
    /**
     * The creator's row, held (FOR SHARE) until the transaction ends, with what its creation slots
     * follow (spec 2.11: level, tier and the tier's expiry) as committed: a revoke, demotion or
     * deletion either committed before (read here) or waits for the creation. Undefined when the
     * user is gone.
     */
    async lockCreator(
      userId: number,
      tx: Tx,
    ): Promise<Pick<UserRow, 'permissionLevel' | 'subscriptionTier' | 'subscriptionExpiresAt'> | undefined> {
      const [row] = await tx
        .select({
          permissionLevel: users.permissionLevel,
          subscriptionTier: users.subscriptionTier,
          subscriptionExpiresAt: users.subscriptionExpiresAt,
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
     */
    async holdMembership(chatId: number, userId: number, tx: Tx): Promise<boolean> {
      const rows = await tx
        .select({ userId: chatMembers.userId })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chatId), eq(chatMembers.userId, userId), isNull(chatMembers.leftAt)))
        .for('share');
      return rows.length > 0;
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
    async memberIds(chatId: number, tx: Tx = db): Promise<number[]> {
      const rows = await tx
        .select({ userId: chatMembers.userId })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chatId), isNull(chatMembers.leftAt)));
      return rows.map((r) => r.userId);
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
    async endAllMemberships(chatId: number, at: Date, tx: Tx): Promise<number[]> {
      const rows = await tx
        .update(chatMembers)
        .set({ leftAt: at })
        .where(and(eq(chatMembers.chatId, chatId), isNull(chatMembers.leftAt)))
        .returning({ userId: chatMembers.userId });
      return rows.map((r) => r.userId);
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
    async otherMembers(chatId: number, userId: number): Promise<number[]> {
      const rows = await db
        .select({ userId: chatMembers.userId })
        .from(chatMembers)
        .where(and(eq(chatMembers.chatId, chatId), isNull(chatMembers.leftAt), ne(chatMembers.userId, userId)));
      return rows.map((r) => r.userId);
    },
  };
}

export type ChatsStore = ReturnType<typeof makeChatsStore>;
