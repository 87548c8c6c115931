import { type Static, Type } from '@sinclair/typebox';
import { LinkedPlatformSchema } from './auth.js';
import { Nullable, Timestamp } from './common.js';
import { Limits } from './constants.js';

const strict = { additionalProperties: false } as const;

/** The own profile (spec 2.1). */
export const UserSchema = Type.Object(
  {
    id: Type.Integer(),
    username: Type.String(),
    avatar_url: Nullable(Type.String()),
    subscription_tier: Type.Integer({ minimum: 0, maximum: 3 }),
    state: Type.Integer({ minimum: 0, maximum: 2 }),
    permission_level: Type.Integer({ minimum: 0, maximum: 3 }),
    subscription_expires_at: Nullable(Timestamp),
    subscription_granted_by: Nullable(
      Type.Integer({ description: 'id of the granting user; null for the operator or the system' }),
    ),
    last_activity_at: Timestamp,
    permission_since: Nullable(Timestamp),
    avatar_source: Type.String(),
    linked_platforms: Type.Array(LinkedPlatformSchema),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { $id: 'User' },
);

/** What any caller may see of another user (redacted). */
export const PublicUserSchema = Type.Object(
  {
    id: Type.Integer(),
    username: Type.String(),
    avatar_url: Nullable(Type.String()),
    permission_level: Type.Integer(),
    has_premium: Type.Boolean(),
    created_at: Timestamp,
  },
  { $id: 'PublicUser' },
);

export const SubscriptionEventSchema = Type.Object({
  action: Type.String({
    description:
      'grant, revoke (by an admin or the operator) or expire (the downgrade sweep); tier: the tier granted, or the one that ended',
  }),
  tier: Type.Integer(),
  expires_at: Nullable(Timestamp),
  actor_user_id: Nullable(Type.Integer()),
  reason: Nullable(Type.String()),
  created_at: Timestamp,
});

/** Full detail for Admin and above: the profile, no redaction, plus subscription history. */
export const FullUserSchema = Type.Composite(
  [
    Type.Omit(UserSchema, []),
    Type.Object({ has_premium: Type.Boolean(), subscription_history: Type.Array(SubscriptionEventSchema) }),
  ],
  { $id: 'FullUser' },
);

export const UserEnvelope = Type.Object({ user: UserSchema });

/**
 * Spec 4.2 rule 1: the fields succeed or fail independently, so their rules (length included) are
 * checked per field and a failure lands in `errors`, not in a 400 for the whole body. Only the
 * types and the field names are checked here; the HTTP body limit bounds the strings.
 */
export const UpdateMeBody = Type.Object(
  {
    username: Type.Optional(
      Type.String({ description: '3-32 letters, digits, dots, underscores or hyphens; else errors.username' }),
    ),
    avatar_source: Type.Optional(
      Type.String({ description: 'a linked platform, platform_a_0 to platform_a_5, or ""; else errors.avatar_source' }),
    ),
  },
  strict,
);
export const UpdateMeResponse = Type.Object({
  user: UserSchema,
  errors: Nullable(Type.Record(Type.String(), Type.String())),
});

export const SubscriptionStatusSchema = Type.Object({
  tier: Type.Integer(),
  tier_name: Type.String(),
  has_premium: Type.Boolean(),
  expires_at: Nullable(Timestamp),
  granted_by: Nullable(Type.Integer()),
  trial_used: Type.Boolean(),
});

export const PunishmentSchema = Type.Object({
  id: Type.Integer(),
  action_type: Type.String(),
  reason: Nullable(Type.String()),
  is_lifted: Type.Boolean(),
  expires_at: Nullable(Timestamp),
  lifted_at: Nullable(Timestamp),
  created_at: Timestamp,
});
export const PunishmentsQuery = Type.Object(
  {
    offset: Type.Integer({ minimum: 0, maximum: 2147483647, default: 0 }),
    limit: Type.Integer({ minimum: 1, maximum: Limits.PUNISHMENTS_PAGE_MAX, default: Limits.PUNISHMENTS_PAGE_DEFAULT }),
  },
  strict,
);

export const SearchQuery = Type.Object(
  {
    q: Type.String({ minLength: 1, maxLength: 32 }),
    offset: Type.Integer({ minimum: 0, maximum: 2147483647, default: 0 }),
    limit: Type.Integer({ minimum: 1, maximum: Limits.SEARCH_PAGE_MAX, default: Limits.SEARCH_PAGE_DEFAULT }),
  },
  strict,
);
export const SearchResponse = Type.Object({
  users: Type.Array(Type.Union([FullUserSchema, PublicUserSchema])),
});

export const GeoSchema = Type.Object({
  city: Type.String(),
  region_name: Type.String(),
  country_code: Type.String(),
  lat: Type.Number(),
  lon: Type.Number(),
  isp: Type.String(),
  org: Type.String(),
  is_mobile: Type.Boolean(),
  is_proxy: Type.Boolean(),
  is_hosting: Type.Boolean(),
});

export const ActiveSessionSchema = Type.Object({
  token_suffix: Type.String(),
  created_at: Timestamp,
  expires_at: Timestamp,
  client_ip: Type.String(),
  user_agent: Type.String(),
  geo: GeoSchema,
  is_current: Type.Boolean(),
});
export const SessionHistorySchema = Type.Object({
  token_suffix: Type.String(),
  created_at: Timestamp,
  client_ip: Type.String(),
  user_agent: Type.String(),
  geo: GeoSchema,
});
export const SessionsResponse = Type.Object({
  sessions: Type.Array(ActiveSessionSchema),
  history: Type.Array(SessionHistorySchema),
});
/**
 * Any text: a suffix of no live session of the caller, whatever its length, is unknown (404, spec
 * 4.2 rule 2). The request line's limit bounds it (platform/method-not-allowed.ts).
 */
export const TokenSuffixParam = Type.Object({ token_suffix: Type.String({ minLength: 1 }) }, strict);

export type User = Static<typeof UserSchema>;
export type PublicUser = Static<typeof PublicUserSchema>;
export type FullUser = Static<typeof FullUserSchema>;
export type UpdateMeBody = Static<typeof UpdateMeBody>;
export type Punishment = Static<typeof PunishmentSchema>;
export type Geo = Static<typeof GeoSchema>;
export type ActiveSession = Static<typeof ActiveSessionSchema>;
export type SessionHistoryEntry = Static<typeof SessionHistorySchema>;
export type SubscriptionStatus = Static<typeof SubscriptionStatusSchema>;
