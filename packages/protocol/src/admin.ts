import { type Static, Type } from '@sinclair/typebox';
import { BotName } from './bots.js';
import { type ChatConfigBody, ChatName } from './chats.js';
import { IdParam, Nullable, Timestamp } from './common.js';
import { Limits } from './constants.js';
import { AvatarUrl } from './guilds.js';

const strict = { additionalProperties: false } as const;

/**
 * POST /v1/admin/users/{user_id}/update. The account `state` is not here: it changes through the
 * punishments routes, which keep their records and notifications.
 */
export const AdminUserUpdateBody = Type.Object(
  {
    permission_level: Type.Optional(Type.Integer({ minimum: 0, maximum: 3 })),
    username: Type.Optional(Type.String({ maxLength: 256 })),
    avatar_source: Type.Optional(
      Type.String({
        maxLength: 64,
        description: 'a linked platform, a default key platform_a_0 … platform_a_5, or "" (earliest platform)',
      }),
    ),
  },
  { ...strict, minProperties: 1 },
);
export type AdminUserUpdateBody = Static<typeof AdminUserUpdateBody>;

/** POST /v1/admin/bots/{bot_id}/update: any subset; null clears the owner or the avatar. */
export const AdminBotUpdateBody = Type.Object(
  {
    name: Type.Optional(BotName),
    type: Type.Optional(Type.Union([Type.Literal('official'), Type.Literal('verified'), Type.Literal('community')])),
    rate_limit_per_hour: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000 })),
    owner_user_id: Type.Optional(Nullable(IdParam)),
    avatar_url: Type.Optional(Nullable(AvatarUrl)),
  },
  { ...strict, minProperties: 1 },
);
export type AdminBotUpdateBody = Static<typeof AdminBotUpdateBody>;

export const AdminBotParams = Type.Object({ bot_id: IdParam }, strict);
export const AdminUserParams = Type.Object({ user_id: IdParam }, strict);

/** POST /v1/admin/chats/create: an official chat (Owners and the operator). */
export const AdminChatCreateBody = Type.Object({ name: ChatName }, strict);
export type AdminChatCreateBody = Static<typeof AdminChatCreateBody>;
/** POST /v1/admin/chats/{chat_id}/update takes the chat settings body. */
export type AdminChatUpdateBody = Static<typeof ChatConfigBody>;

/** GET /v1/admin/audit: newest first; `before` is the cursor (an entry id). */
export const AuditQuery = Type.Object(
  {
    before: Type.Optional(IdParam),
    limit: Type.Integer({ minimum: 1, maximum: Limits.AUDIT_PAGE_MAX, default: Limits.AUDIT_PAGE_DEFAULT }),
    code: Type.Optional(Type.Integer({ minimum: 1, maximum: 999 })),
    target_user_id: Type.Optional(IdParam),
  },
  strict,
);
export type AuditQuery = Static<typeof AuditQuery>;

export const AuditEntrySchema = Type.Object(
  {
    id: Type.Integer(),
    actor_kind: Type.Union([
      Type.Literal('user'),
      Type.Literal('operator'),
      Type.Literal('system'),
      Type.Literal('bot'),
    ]),
    actor_id: Nullable(Type.Integer({ description: 'the user or bot id; null for the operator and the system' })),
    target_user_id: Nullable(Type.Integer()),
    target_bot_id: Nullable(Type.Integer()),
    code: Type.Integer({ description: 'AuditCodes: 1xx users, 2xx bots, 3xx subscriptions, …' }),
    action: Type.String(),
    reason: Nullable(Type.String()),
    data: Type.Record(Type.String(), Type.Unknown()),
    created_at: Timestamp,
  },
  { $id: 'AuditEntry' },
);
export type AuditEntry = Static<typeof AuditEntrySchema>;

export const AuditPage = Type.Object({
  entries: Type.Array(AuditEntrySchema),
  next_before: Nullable(Type.Integer({ description: 'pass as `before` for the next page; null on the last page' })),
});
export type AuditPage = Static<typeof AuditPage>;
