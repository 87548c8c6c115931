import { type Static, Type } from '@sinclair/typebox';
import { type Chat, ChatSchema, InviteCode, KeyRingSchema, type Message } from './chats.js';
import { IdParam } from './common.js';
import type { Peer } from './match.js';
import type { Notification } from './notifications.js';
import type { VmClientToServerEvents, VmServerToClientEvents } from './vm.js';

const strict = { additionalProperties: false } as const;

/**
 * room:join takes one of a chat id, an invite code, a guild vanity or a match token. With a chat
 * id, `rejoin: true` only enters the room of a chat the caller is a member of (ERR_NOT_CHAT_MEMBER
 * otherwise, nothing written): what a client re-entering its chats after a reconnection sends, so
 * that a membership ended meanwhile is not made anew.
 */
export const RoomJoinPayload = Type.Union([
  Type.Object({ chat_id: IdParam, rejoin: Type.Optional(Type.Boolean()) }, strict),
  Type.Object({ invite: InviteCode }, strict),
  Type.Object({ vanity: Type.String({ pattern: '^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$' }) }, strict),
  Type.Object({ token: Type.String({ minLength: 8, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }) }, strict),
]);
export const RoomLeavePayload = Type.Object({ chat_id: IdParam }, strict);

export const MemberEntrySchema = Type.Object({
  user_id: Type.Integer(),
  session_id: Type.Integer(),
  username: Type.String(),
});
export const RoomJoinAck = Type.Object({
  ok: Type.Literal(true),
  chat: ChatSchema,
  epoch: Type.Integer(),
  members: Type.Array(MemberEntrySchema),
  key_ring: KeyRingSchema,
});

export type RoomJoinPayload = Static<typeof RoomJoinPayload>;
export type MemberEntry = Static<typeof MemberEntrySchema>;
export type KeyRingWire = Static<typeof KeyRingSchema>;

export type AckError = { ok: false; code: string; message: string };
export type Ack<T extends object = object> = ({ ok: true } & T) | AckError;

/** Events the server emits (socket.io typed map). */
export interface ServerToClientEvents extends VmServerToClientEvents {
  'message:new': (m: Message) => void;
  'message:bulk_deleted': (e: { room_id: number; deleted_ids: string[]; deleted_by: number }) => void;
  'portal:key_added': (e: { chat_id: number; user_id: number; session_id: number; public_key: string }) => void;
  'portal:key_removed': (e: { chat_id: number; user_id: number; session_id: number | null }) => void;
  'room:rekey': (e: { chat_id: number; epoch: number }) => void;
  'room:key': (e: { chat_id: number; epoch: number; envelope: string; sender_session_id: number }) => void;
  'room:members': (e: { chat_id: number; members: MemberEntry[] }) => void;
  'portal:presence': (e: { chat_id: number; user_id: number; session_id: number; online: boolean }) => void;
  'room:left': (e: { chat_id: number; reason: string }) => void;
  /**
   * On every (re)connection. `session_id`: the login session the socket belongs to now (a cookie
   * that changed while the client was away gives the reconnected socket another session).
   */
  'chat:list': (e: { chats: Chat[]; session_id: number }) => void;
  'chat:updated': (e: { chat: Chat }) => void;
  'notification:new': (n: Notification) => void;
  'match:found': (e: { chat_id: number; token: string; interests: string[]; expires_at: string; peer: Peer }) => void;
  'match:timeout': (e: { interests: string[] }) => void;
  'user:unmuted': (e: { chat_id: number; user_id: number }) => void;
}

/** Events clients emit; each takes an ack callback. */
export interface ClientToServerEvents extends VmClientToServerEvents {
  'room:join': (payload: RoomJoinPayload, ack: (a: Ack<Static<typeof RoomJoinAck>>) => void) => void;
  'room:leave': (payload: { chat_id: number }, ack: (a: Ack) => void) => void;
}
