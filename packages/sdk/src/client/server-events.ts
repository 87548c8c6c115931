import {
  ChatSchema,
  KeyRingSchema,
  MemberEntrySchema,
  MessageSchema,
  NotificationSchema,
  Nullable,
  PeerSchema,
  type ServerToClientEvents,
} from '@parlor/protocol';
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { ParlorSocket } from './socket.js';

/**
 * The shapes the SDK requires of what the server sends before it acts on it. Socket.IO runs event
 * listeners where nobody can catch what they throw (in Node an exception there ends the process),
 * so a payload read unchecked (`null`, a string epoch) would crash the app or store garbage: each
 * one is checked against these schemas, and one that fails is dropped and reported as an `error`
 * event (code `BAD_SERVER_EVENT`) instead.
 *
 * Every event of the protocol's `ServerToClientEvents` has a schema here (the compiler checks the
 * map is complete). The protocol types these events as TypeScript only; where it has a TypeBox
 * schema (messages, chats, notifications, members, peers, key rings) it is used here. Date-time
 * strings are checked as strings: TypeBox's `Value.Check` knows no string formats unless they are
 * registered in its global registry, which a library must not change for the app it runs in.
 */

/** Chat, user and session ids, and epochs: non-negative safe integers (as the E2E crypto takes them). */
const Id = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });

/**
 * A copy of a protocol schema whose `date-time` strings are any strings (see above): `Value.Check`
 * refuses every value of a format it does not know.
 */
function anyDateString<T extends TSchema>(schema: T): T {
  const copy = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(copy);
    if (node === null || typeof node !== 'object') return node;
    const out: Record<PropertyKey, unknown> = {};
    // Reflect.ownKeys: TypeBox keeps each schema's kind under a symbol.
    for (const key of Reflect.ownKeys(node)) {
      const value = (node as Record<PropertyKey, unknown>)[key];
      if (!(key === 'format' && value === 'date-time')) out[key] = copy(value);
    }
    return out;
  };
  return copy(schema) as T;
}

/** `message:new`: the protocol's message, `created_at` any string. */
export const MessageEventSchema = Type.Object({ ...MessageSchema.properties, created_at: Type.String() });

/** `GET /v1/portal/chats/{chat_id}/keys`: the protocol's `ChatKeyResponse` with a usable epoch. */
export const KeysAnswerSchema = Type.Object({ epoch: Id, envelope: Nullable(Type.String()), key_ring: KeyRingSchema });

/** The parts of the `room:join` acknowledgement the E2E session relies on. */
export const JoinAnswerSchema = Type.Object({ chat: Type.Object({ id: Id }), epoch: Id, key_ring: KeyRingSchema });

/** The payload of each server event (every one of the protocol's `ServerToClientEvents`). */
export const ServerEventSchemas = {
  'message:new': MessageEventSchema,
  'message:bulk_deleted': Type.Object({
    room_id: Id,
    deleted_ids: Type.Array(MessageSchema.properties.id),
    deleted_by: Id,
  }),
  'room:key': Type.Object({ chat_id: Id, epoch: Id, envelope: Type.String(), sender_session_id: Id }),
  'room:rekey': Type.Object({ chat_id: Id, epoch: Id }),
  'portal:key_added': Type.Object({ chat_id: Id, user_id: Id, session_id: Id, public_key: Type.String() }),
  'portal:key_removed': Type.Object({ chat_id: Id, user_id: Id, session_id: Nullable(Id) }),
  'room:members': Type.Object({ chat_id: Id, members: Type.Array(MemberEntrySchema) }),
  'portal:presence': Type.Object({ chat_id: Id, user_id: Id, session_id: Id, online: Type.Boolean() }),
  'room:left': Type.Object({ chat_id: Id, reason: Type.String() }),
  'chat:list': Type.Object({ chats: Type.Array(Type.Object({ id: Id })), session_id: Id }),
  'chat:updated': Type.Object({ chat: anyDateString(ChatSchema) }),
  'notification:new': anyDateString(NotificationSchema),
  'match:found': Type.Object({
    chat_id: Id,
    token: Type.String(),
    interests: Type.Array(Type.String()),
    expires_at: Type.String(),
    peer: PeerSchema,
  }),
  'match:timeout': Type.Object({ interests: Type.Array(Type.String()) }),
  'user:unmuted': Type.Object({ chat_id: Id, user_id: Id }),
  'room:started': Type.Object({
    chat_id: Id,
    credentials: Type.Object({ token: Type.String(), expires_at: Type.String() }),
  }),
  // Reasons are handed on as the server names them (a newer server may add one).
  'room:stopped': Type.Object({ chat_id: Id, reason: Type.String() }),
  // `data` is binary, as the transport delivers it (a Buffer in Node), handed on as is.
  'vm:frame': Type.Object({ chat_id: Id, seq: Id, mime: Type.String(), data: Type.Unknown() }),
  'vm:control': Type.Object({ chat_id: Id, controller_user_id: Nullable(Id) }),
  'vm:control:request': Type.Object({ chat_id: Id, user_id: Id, username: Type.String() }),
} satisfies { [E in keyof ServerToClientEvents]: TSchema };

export type CheckedServerEvent = keyof typeof ServerEventSchemas;

/** The first thing wrong with `value` under `schema` (`path` a JSON pointer), or null when it fits. */
export function shapeProblem(schema: TSchema, value: unknown): { path: string; message: string } | null {
  if (Value.Check(schema, value)) return null;
  const first = Value.Errors(schema, value).First();
  return { path: first?.path ?? '', message: first?.message ?? 'Invalid value' };
}

/** The `details` of a `BAD_SERVER_EVENT` error: the event's name and what was wrong with its payload. */
export interface BadServerEventDetails {
  event: string;
  path: string;
  problem: string;
}

/**
 * Adds a socket listener that only sees payloads of the right shape (typed as the protocol's event
 * map types them). A payload that fails goes to `onBad` and is dropped; a listener that throws
 * goes to `onThrow`, never to Socket.IO (where it would be uncaught). Returns the removal.
 * @throws TypeError at once for an event without a schema in {@link ServerEventSchemas} (a cast
 *   or untyped caller): its payloads could not be checked, and checking one would throw inside
 *   Socket.IO.
 */
export function onChecked<E extends CheckedServerEvent>(
  socket: ParlorSocket,
  event: E,
  listener: ServerToClientEvents[E],
  onBad: (details: BadServerEventDetails) => void,
  onThrow: (error: unknown) => void,
): () => void {
  if (!Object.hasOwn(ServerEventSchemas, event)) {
    throw new TypeError(`onChecked: the server event ${JSON.stringify(event)} has no schema in ServerEventSchemas.`);
  }
  const schema: TSchema = ServerEventSchemas[event];
  const checked = (payload: unknown) => {
    const problem = shapeProblem(schema, payload);
    if (problem) {
      onBad({ event, path: problem.path, problem: problem.message });
      return;
    }
    try {
      (listener as (p: unknown) => void)(payload);
    } catch (error) {
      onThrow(error);
    }
  };
  // The typed map cannot take a listener of unknown payloads; the check above stands in for it.
  const untyped = socket as unknown as {
    on(e: string, l: typeof checked): void;
    off(e: string, l: typeof checked): void;
  };
  untyped.on(event, checked);
  return () => untyped.off(event, checked);
}

/** The checked shape of a `GET …/keys` answer. */
export type KeysAnswer = Static<typeof KeysAnswerSchema>;
