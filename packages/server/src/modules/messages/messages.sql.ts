import { type SQL, sql } from 'drizzle-orm';
import type { MessageRow } from './messages.store.js';

// Raw statements of the hot paths (send, history page): each is one round trip. Parameters are
// cast explicitly: postgres-js sends them untyped, and neither driver serialises a Date here.

/** What a user message needs to be accepted (spec 4.6 rule 1, DESIGN.md 7). */
export interface SendCheck {
  chatId: number;
  userId: number;
  sessionId: number;
  /** The bundle's epoch: it must be the chat's current one, and the session must hold its key. */
  epoch: number;
  content: string;
  now: Date;
}

/** Who reads a history page: members; Moderators also public and official chats; Admins any chat. */
export interface Reader {
  userId: number;
  permissionLevel: number;
}

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
 * All of the send's checks and its write in one statement. The chat row's own conditions (live,
 * not archived, epoch) sit in the UPDATE's WHERE, so PostgreSQL re-checks them on the newest row
 * version if a concurrent transaction (a rekey, an archive) changed the row while this waited.
 */
export function sendSql(c: SendCheck): SQL {
  const now = c.now.toISOString();
  const allowed = sql`
    select 1 from chat_members m
    where m.chat_id = ${c.chatId}::integer and m.user_id = ${c.userId}::integer and m.left_at is null
      and not exists (
        select 1 from moderation_actions a
        where (a.chat_id = ${c.chatId}::integer or a.chat_id is null) and a.user_id = ${c.userId}::integer
          and a.action_type in ('CHAT_BAN', 'CHAT_MUTE') and not a.is_lifted
          and (a.expires_at is null or a.expires_at > ${now}::timestamptz))
      and exists (
        select 1 from key_envelopes k
        where k.chat_id = ${c.chatId}::integer and k.epoch = ${c.epoch}::integer
          and k.recipient_session_id = ${c.sessionId}::integer)`;
  const chatOk = sql`and deleted_at is null and archived_at is null and epoch = ${c.epoch}::integer
    and exists (select 1 from allowed)`;
  return sql`
    with allowed as (${allowed}), next as (${nextId(c.chatId, c.now.getTime(), chatOk)})
    insert into messages (chat_id, ms, seq, type, sender_id, content, system, created_at)
    select id, msg_ms, msg_seq, 'user', ${c.userId}::integer, ${c.content}::text, null, ${now}::timestamptz
    from next
    returning ms, seq`;
}

/**
 * A history page in the wire shape (Message), newest first, strictly before the cursor (a row
 * comparison, so the (chat_id, ms, seq) key bounds the scan). The reader's right to read is an
 * uncorrelated EXISTS that PostgreSQL evaluates once: no rows when it fails.
 */
export function pageSql(
  chatId: number,
  reader: Reader,
  before: { ms: number; seq: number } | null,
  limit: number,
): SQL {
  const member = sql`exists (select 1 from chat_members cm
    where cm.chat_id = ${chatId}::integer and cm.user_id = ${reader.userId}::integer and cm.left_at is null)`;
  const may =
    reader.permissionLevel >= 2
      ? sql`true`
      : reader.permissionLevel >= 1
        ? sql`(c.type in ('public', 'official') or ${member})`
        : member;
  const cursor = before ? sql`and (m.ms, m.seq) < (${before.ms}::bigint, ${before.seq}::integer)` : sql``;
  return sql`
    select m.ms::text || '-' || m.seq::text as id, m.chat_id, m.type, m.sender_id, m.content, m.system,
           to_char(m.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as created_at
    from messages m
    where m.chat_id = ${chatId}::integer ${cursor}
      and exists (select 1 from chats c where c.id = ${chatId}::integer and c.deleted_at is null and ${may})
    order by m.ms desc, m.seq desc
    limit ${limit}::integer`;
}
