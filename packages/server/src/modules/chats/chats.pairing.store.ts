import { type SQL, sql } from 'drizzle-orm';
import { type Db, rowsOf } from '../../platform/db/index.js';
import { premiumAtSql } from '../users/users.store.js';
import { directActive } from './chats.direct.store.js';

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

/** What insertDirect is asked to make: the matched users, their chat and when (see insertDirect). */
export interface DirectPairing {
  userIds: number[];
  matchToken: string;
  expiresAt: Date;
  at: Date;
  opening: Record<string, unknown>;
  slots: { free: number; premium: number };
  searchesEnded: () => Promise<number[]>;
}

/** One user of a pairing as insertDirect's statement reads it, with the chat it made (null: none). */
interface PairingRow {
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
}

/**
 * insertDirect's one statement, run once the users' slot locks are held: reads every user (FOR
 * SHARE) and every reason to refuse, and writes the chat, its memberships, their join activity and
 * the opening message only when none applies. `ids`, `at` and `atMs` are the pairing's users, time
 * and time in ms as SQL parameters; `ended`, the users whose search ended meanwhile.
 */
function pairingStatement(v: DirectPairing, ids: SQL, at: SQL, atMs: SQL, ended: number[]): SQL {
  return sql`
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
    from u left join c on true order by u.pos`;
}

/** Why the pairing's statement wrote nothing, from the users it read (see DirectRefusal). */
function refusalOf(rows: PairingRow[], userIds: number[], ended: number[]): { refused: DirectRefusal } {
  const first = rows[0];
  const found = new Set(rows.map((r) => Number(r.user_id)));
  return {
    refused: {
      missing: userIds.filter((id) => !found.has(id)),
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

/** The pairing of matched users into a direct chat, within their direct-chat slots (matchmaking). */
export function makePairingStore(db: Db) {
  return {
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
    async insertDirect(v: DirectPairing): Promise<
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
        const result = await tx.execute(pairingStatement(v, ids, at, atMs, ended));
        return { ended, rows: rowsOf<PairingRow>(result) };
      });
      const first = rows[0];
      if (first?.chat_id == null || first.epoch == null) return refusalOf(rows, v.userIds, ended);
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
  };
}

export type PairingStore = ReturnType<typeof makePairingStore>;
