import { type SQL, sql } from 'drizzle-orm';
import type { MessageRow } from './messages.store.js';

// Raw statements of the hot paths (send, history page): each is one round trip. Parameters are
// cast explicitly: postgres-js sends them untyped, and neither driver serialises a Date here.

/** A batch of user messages to one chat at one epoch (spec 4.6 rule 1, DESIGN.md 7). */
export interface SendBatch {
  chatId: number;
  /** The bundles' epoch: it must be the chat's current one, and each session must hold its key. */
  epoch: number;
  now: Date;
  items: SendItem[];
}

export interface SendItem {
  userId: number;
  sessionId: number;
  content: string;
}

/** Who reads a history page: members; Moderators also public and official chats; Admins any chat. */
export interface Reader {
  userId: number;
  permissionLevel: number;
}

/**
 * The chat is not past its expiry at `now`: a direct chat is archived exactly at its expiry (chats.rules
 * `archivedAtOf`), before the sweep writes it. Sends and deletes test the same expression, so they
 * agree at the deadline.
 */
export const beforeExpiry = (now: Date): SQL =>
  sql`(chats.expires_at is null or chats.expires_at > ${now.toISOString()}::timestamptz)`;

/** The chat row's next id, taken under its row lock by the UPDATE (see messages.store append). */
const nextId = (chatId: number, nowMs: number, extra: SQL) => sql`
  update chats
  set msg_seq = case when msg_ms >= ${nowMs}::bigint then msg_seq + 1 else 0 end,
      msg_ms = greatest(msg_ms, ${nowMs}::bigint)
  where id = ${chatId}::integer ${extra}
  returning id, msg_ms, msg_seq`;

export function appendSql(v: Omit<MessageRow, 'ms' | 'seq'>): SQL {
  const system = v.system === null ? null : JSON.stringify(v.system);
  return sql`
    with next as (${nextId(v.chatId, v.createdAt.getTime(), sql``)})
    insert into messages (chat_id, ms, seq, type, sender_id, content, system, created_at)
    select id, msg_ms, msg_seq, ${v.type}::text, ${v.senderId}::integer, ${v.content}::text,
           ${system}::text::jsonb, ${v.createdAt.toISOString()}::timestamptz
    from next
    returning ms, seq`;
}

/**
 * A batch of sends, all of their checks and their writes in one statement (group commit, see
 * messages.service). Each item is accepted if its sender is a member, neither banned nor muted
 * here, and its session holds an envelope at the epoch; the accepted ones take consecutive ids in
 * item order from one UPDATE of the chat row, whose WHERE carries the chat's own conditions (live,
 * not archived nor past its expiry, at the epoch), so PostgreSQL re-checks them on the newest row version if a
 * concurrent transaction (a rekey, an archive) changed the row while this one waited for its lock.
 * The senders' checks read the statement's snapshot only, so what ends a right to send changes the
 * chat row too: a kick, ban, leave or key removal raises the epoch, and a chat mute raises
 * `restrictions_seq`, which the UPDATE requires unchanged since the snapshot (`seen`). A mute
 * committed while the batch waited for the row then writes nothing of it (the caller tells each
 * send why, or sends it again); concurrent sends leave the counter alone and never refuse each other.
 * Answers `(ord, ms, seq)` for the accepted items; `ord` is the item's index.
 */
export function sendBatchSql(b: SendBatch): SQL {
  const now = b.now.toISOString();
  // A VALUES list, so the planner knows how few rows there are and looks each sender up by index.
  const rows = b.items.map(
    (i, ord) => sql`(${ord}::integer, ${i.userId}::integer, ${i.sessionId}::integer, ${i.content}::text)`,
  );
  return sql`
    with input (ord, u, s, c) as (values ${sql.join(rows, sql`, `)}),
    ok as (
      select i.ord, i.u, i.c, row_number() over (order by i.ord)::integer as rn
      from input i
      where exists (
          select 1 from chat_members m
          where m.chat_id = ${b.chatId}::integer and m.user_id = i.u and m.left_at is null)
        and not exists (
          select 1 from moderation_actions a
          where (a.chat_id = ${b.chatId}::integer or a.chat_id is null) and a.user_id = i.u
            and a.action_type in ('CHAT_BAN', 'CHAT_MUTE') and not a.is_lifted
            and (a.expires_at is null or a.expires_at > ${now}::timestamptz))
        and exists (
          select 1 from key_envelopes k
          where k.chat_id = ${b.chatId}::integer and k.epoch = ${b.epoch}::integer and k.recipient_session_id = i.s)
    ),
    n as (select count(*)::integer as k from ok),
    seen as (select restrictions_seq as r from chats where id = ${b.chatId}::integer),
    next as (
      update chats
      set msg_seq = case when msg_ms >= ${b.now.getTime()}::bigint then msg_seq + (select k from n)
                         else (select k from n) - 1 end,
          msg_ms = greatest(msg_ms, ${b.now.getTime()}::bigint)
      where id = ${b.chatId}::integer and deleted_at is null and archived_at is null
        and ${beforeExpiry(b.now)}
        and epoch = ${b.epoch}::integer and (select k from n) > 0
        -- Unchanged since the snapshot: no chat mute committed that the checks in ok did not see.
        and restrictions_seq = (select r from seen)
      returning id, msg_ms, msg_seq
    ),
    ins as (
      insert into messages (chat_id, ms, seq, type, sender_id, content, system, created_at)
      select next.id, next.msg_ms, next.msg_seq - (select k from n) + ok.rn, 'user', ok.u, ok.c, null, ${now}::timestamptz
      from next, ok
      returning ms, seq
    )
    select ok.ord, ins.ms, ins.seq
    from ins, next, ok
    where ins.seq = next.msg_seq - (select k from n) + ok.rn`;
}

/** One history page asked for: its reader, the cursor (null: the newest page) and the page size. */
export interface PageRequest {
  reader: Reader;
  before: { ms: number; seq: number } | null;
  limit: number;
}

/**
 * History pages of one chat for several requests in one statement (group commit of reads, see
 * messages.service), each in the wire shape (Message), newest first, strictly before its cursor:
 * a row comparison, so the (chat_id, ms, seq) key bounds each scan. Each request's right to read
 * (members; Moderators also public and official chats; Admins any) is checked on its own: no
 * rows for it when it fails. Rows carry `ord`, the request's index.
 */
export function pagesSql(chatId: number, requests: PageRequest[]): SQL {
  const input = sql.join(
    requests.map(
      (r, ord) =>
        sql`(${ord}::integer, ${r.reader.userId}::integer, ${r.reader.permissionLevel}::integer, ${r.before?.ms ?? null}::bigint, ${r.before?.seq ?? null}::integer, ${r.limit}::integer)`,
    ),
    sql`, `,
  );
  return sql`
    with input (ord, uid, lvl, ms, seq, lim) as (values ${input}),
    chat as (select type from chats where id = ${chatId}::integer and deleted_at is null)
    select i.ord, p.id, p.chat_id, p.type, p.sender_id, p.content, p.system, p.created_at
    from input i, chat c,
    lateral (
      select m.ms, m.seq, m.ms::text || '-' || m.seq::text as id, m.chat_id, m.type, m.sender_id, m.content,
             m.system, to_char(m.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as created_at
      from messages m
      where m.chat_id = ${chatId}::integer
        and (m.ms, m.seq) < (coalesce(i.ms, ${Number.MAX_SAFE_INTEGER}::bigint), coalesce(i.seq, 0))
      order by m.ms desc, m.seq desc
      limit i.lim
    ) p
    where i.lvl >= 2
       or (i.lvl >= 1 and c.type in ('public', 'official'))
       or exists (select 1 from chat_members cm
                  where cm.chat_id = ${chatId}::integer and cm.user_id = i.uid and cm.left_at is null)
    order by i.ord, p.ms desc, p.seq desc`;
}
