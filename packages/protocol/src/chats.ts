import { type Static, Type } from '@sinclair/typebox';
import { IdParam, INT32_MAX, Nullable, Timestamp } from './common.js';
import { Limits } from './constants.js';

const strict = { additionalProperties: false } as const;

export const ChatSchema = Type.Object(
  {
    id: Type.Integer(),
    type: Type.Union([
      Type.Literal('public'),
      Type.Literal('private'),
      Type.Literal('official'),
      Type.Literal('direct'),
    ]),
    name: Type.String(),
    owner_id: Nullable(Type.Integer()),
    epoch: Type.Integer({ description: 'current chat key generation' }),
    member_count: Type.Integer(),
    archived: Type.Boolean(),
    expires_at: Nullable(Timestamp),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { $id: 'Chat' },
);
export const ChatEnvelope = Type.Object({ chat: ChatSchema });
export const ChatListResponse = Type.Object({ chats: Type.Array(ChatSchema) });

export const ChatName = Type.String({ minLength: 1, maxLength: Limits.CHAT_NAME_MAX, pattern: '\\S' });
export const CreateChatBody = Type.Object(
  { name: ChatName, type: Type.Union([Type.Literal('public'), Type.Literal('private')]) },
  strict,
);
export const ChatConfigBody = Type.Object(
  { name: Type.Optional(ChatName), type: Type.Optional(Type.Union([Type.Literal('public'), Type.Literal('private')])) },
  { ...strict, minProperties: 1 },
);
export const ChatIdParams = Type.Object({ chat_id: IdParam }, strict);

export const InviteSchema = Type.Object({
  code: Type.String(),
  chat_id: Type.Integer(),
  created_by: Type.Integer(),
  max_uses: Nullable(Type.Integer()),
  uses: Type.Integer(),
  expires_at: Nullable(Timestamp),
  created_at: Timestamp,
});
export const CreateInviteBody = Type.Object(
  {
    max_uses: Type.Optional(Type.Integer({ minimum: 1, maximum: Limits.INVITE_MAX_USES })),
    expires_in_seconds: Type.Optional(Type.Integer({ minimum: 60, maximum: Limits.INVITE_MAX_TTL_S })),
  },
  { ...strict, 'x-empty-body': true },
);
export const InviteCode = Type.String({ minLength: 4, maxLength: 32, pattern: '^[A-Za-z0-9_-]+$' });
export const InviteParams = Type.Object({ chat_id: IdParam, code: InviteCode }, strict);

export const ActivitySchema = Type.Object({
  id: Type.Integer(),
  user_id: Type.Integer(),
  action: Type.String({ description: 'join, leave, kick or ban' }),
  method: Nullable(Type.String({ description: 'for joins: direct, vanity or invite' })),
  invite_code: Nullable(Type.String()),
  actor_user_id: Nullable(Type.Integer()),
  created_at: Timestamp,
});
export const PageQuery = Type.Object(
  {
    offset: Type.Integer({ minimum: 0, maximum: 2147483647, default: 0 }),
    limit: Type.Integer({ minimum: 1, maximum: Limits.ACTIVITY_PAGE_MAX, default: 50 }),
  },
  strict,
);

/** A chat message; `content` is the ciphertext bundle (user) or empty (system). */
export const MessageSchema = Type.Object({
  id: Type.String({ pattern: '^[0-9]+-[0-9]+$' }),
  chat_id: Type.Integer(),
  type: Type.Union([Type.Literal('user'), Type.Literal('system')]),
  sender_id: Nullable(Type.Integer()),
  content: Type.String(),
  system: Nullable(Type.Record(Type.String(), Type.Unknown())),
  created_at: Timestamp,
});
export const SendMessageBody = Type.Object(
  { content: Type.String({ minLength: 1, maxLength: Limits.MESSAGE_CONTENT_MAX }) },
  strict,
);
export const MessagesQuery = Type.Object(
  {
    before: Type.Optional(Type.String({ pattern: '^[0-9]{1,16}-[0-9]{1,9}$' })),
    limit: Type.Integer({ minimum: 1, maximum: Limits.MESSAGES_PAGE_MAX, default: Limits.MESSAGES_PAGE_DEFAULT }),
  },
  strict,
);
export const DeleteMessagesBody = Type.Object(
  {
    ids: Type.Array(Type.String({ pattern: '^[0-9]{1,16}-[0-9]{1,9}$' }), {
      minItems: 1,
      maxItems: Limits.BULK_DELETE_MAX,
    }),
  },
  strict,
);
export const DeleteLastBody = Type.Object(
  { count: Type.Integer({ minimum: 1, maximum: Limits.BULK_DELETE_MAX }) },
  strict,
);
export const DeletedResponse = Type.Object({ deleted: Type.Integer(), deleted_ids: Type.Array(Type.String()) });

/** Base64 of exactly 32 bytes: 43 symbols and one '=' pad. */
export const PublicKeyBase64 = Type.String({ pattern: '^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$' });
export const RegisterKeyBody = Type.Object({ public_key: PublicKeyBase64 }, strict);
/**
 * `session_id` is the caller's own session id, as key rings, envelopes (their associated data) and
 * `room:key` name it: a client learns it here rather than by looking for its key in a ring.
 */
export const RegisterKeyResponse = Type.Object({
  status: Type.Union([Type.Literal('registered'), Type.Literal('unchanged')]),
  session_id: Type.Integer(),
});
/** user_id → session_id → public key (spec 2.9). */
export const KeyRingSchema = Type.Record(Type.String(), Type.Record(Type.String(), Type.String()));
export const ChatKeyResponse = Type.Object({
  epoch: Type.Integer(),
  envelope: Nullable(Type.String()),
  key_ring: KeyRingSchema,
});
export const Envelope = Type.String({
  minLength: 1,
  maxLength: Limits.ENVELOPE_MAX_CHARS,
  pattern: '^[A-Za-z0-9+/]+={0,2}$',
});
/**
 * A chat key generation as a client names it: positive, and within the `integer` column the
 * server keeps it in (message bundles are held to the same bound by the server's bundle parser).
 */
export const Epoch = Type.Integer({ minimum: 1, maximum: INT32_MAX });
export const ShareKeysBody = Type.Object(
  {
    epoch: Epoch,
    envelopes: Type.Array(Type.Object({ session_id: IdParam, wrapped: Envelope }, strict), {
      minItems: 1,
      maxItems: Limits.KEY_SHARE_ENVELOPES_MAX,
    }),
  },
  strict,
);
/**
 * The largest body ShareKeysBody admits, in bytes of compact JSON (as JSON.stringify writes it):
 * the most envelopes, each of the longest envelope for the longest session id, at the largest
 * epoch; about 147 KB. The share route takes bodies up to this size: under the general 64 KiB limit
 * a request could carry only about 220 such envelopes (about 375 of the SDK's 140 characters),
 * fewer than the schema allows.
 */
export const KEY_SHARE_BODY_MAX_BYTES = JSON.stringify({
  epoch: INT32_MAX,
  envelopes: Array.from({ length: Limits.KEY_SHARE_ENVELOPES_MAX }, () => ({
    session_id: INT32_MAX,
    wrapped: 'A'.repeat(Limits.ENVELOPE_MAX_CHARS),
  })),
}).length;
export const ShareKeysResponse = Type.Object({ epoch: Type.Integer(), stored: Type.Integer() });

export type Chat = Static<typeof ChatSchema>;
export type Message = Static<typeof MessageSchema>;
export type Invite = Static<typeof InviteSchema>;
export type KeyRing = Static<typeof KeyRingSchema>;
export type ShareKeysBody = Static<typeof ShareKeysBody>;
export type Activity = Static<typeof ActivitySchema>;
