import { type Static, Type } from '@sinclair/typebox';
import { IdParam, Nullable, Timestamp } from './common.js';
import { Limits, SNOWFLAKE_PATTERN, VANITY_PATTERN } from './constants.js';

const strict = { additionalProperties: false } as const;

/** A chat-platform snowflake id, as text (a guild's, a guild owner's). */
export const Snowflake = Type.String({ pattern: SNOWFLAKE_PATTERN, description: 'platform snowflake id' });

/** `{guild_id}` in paths: the guild's chat-platform id (spec 4.3, 4.4). */
export const GuildIdParams = Type.Object({ guild_id: Snowflake }, strict);

/** The room VM's browser (spec 2.4). */
export const BrowserKind = Type.Union([Type.Literal('brave'), Type.Literal('tor')]);
/** The room VM's proxy region (spec 2.4). */
export const ProxyRegion = Type.Union([Type.Literal('us'), Type.Literal('eu'), Type.Literal('none')]);

/**
 * An absolute http(s) URL with a host and no whitespace, at most 2000 characters (code points)
 * (spec 2.4, 8). The server validates the `http-url` format with isHttpUrl, so text the pattern
 * passes but no browser parses (`http://[`) is refused with the rest of the body, before the
 * request spends anything.
 */
export const StartUrl = Type.String({
  maxLength: Limits.START_URL_MAX,
  pattern: '^[Hh][Tt][Tt][Pp][Ss]?://[^\\s/?#]+[^\\s]*$',
  format: 'http-url',
});

/**
 * A picture's URL (a guild's, a bot's, a platform avatar): http(s) with a host, at most 2000
 * characters. Clients show and link it, so the server's `http-url` format (isHttpUrl) refuses
 * what is no URL (`https://`, `http://[`); the pattern keeps the schemes to http and https.
 */
export const AvatarUrl = Type.String({ maxLength: Limits.URL_MAX, pattern: '^https?://', format: 'http-url' });

/** Room settings of a guild (spec 2.4). */
export const RoomSettingsSchema = Type.Object(
  {
    browser: BrowserKind,
    proxy: ProxyRegion,
    start_url: Type.String(),
    kiosk: Type.Boolean(),
    allow_control_requests: Type.Boolean({ description: 'whether users can request control of the VM' }),
  },
  { $id: 'RoomSettings' },
);

/** PUT /v1/guilds/{guild_id}/room-settings: any of the settings; omitted ones stay as they are. */
export const RoomSettingsBody = Type.Object(
  {
    browser: Type.Optional(BrowserKind),
    proxy: Type.Optional(ProxyRegion),
    start_url: Type.Optional(StartUrl),
    kiosk: Type.Optional(Type.Boolean()),
    allow_control_requests: Type.Optional(Type.Boolean()),
  },
  { ...strict, minProperties: 1 },
);

/** The whole guild record: every field of spec 2.3 and Parlor's additions (vanity, chat, sponsors, room). */
export const GuildSchema = Type.Object(
  {
    id: Type.Integer(),
    chatplatform_id: Type.String(),
    name: Type.String(),
    avatar_url: Type.String({ description: 'empty when not known' }),
    prefix: Type.String({ description: 'command prefix; empty when not known' }),
    member_count: Type.Integer(),
    is_whitelisted: Type.Boolean(),
    owner_chatplatform_id: Type.String({ description: 'empty when not known' }),
    state: Type.Integer({ description: '0 active' }),
    has_bot: Type.Boolean(),
    has_premium: Type.Boolean({ description: 'guild premium is active (subscription_expires_at in the future)' }),
    subscription_expires_at: Nullable(Timestamp),
    source: Type.String({ description: 'who created the record: bot' }),
    vanity_invite: Nullable(Type.String()),
    chat_id: Nullable(Type.Integer({ description: 'the guild’s public chat, joined with room:join {vanity}' })),
    sponsor_ids: Type.Array(Type.Integer(), { description: 'user ids of the guild’s sponsors' }),
    room_settings: RoomSettingsSchema,
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { $id: 'Guild' },
);

/** The bot upsert's answer: the fields spec 4.3 lists. */
export const BotGuildSchema = Type.Object({
  chatplatform_id: Type.String(),
  name: Type.String(),
  prefix: Type.String(),
  member_count: Type.Integer(),
  is_whitelisted: Type.Boolean(),
  owner_chatplatform_id: Type.String({ description: 'empty when not known' }),
  state: Type.Integer(),
  id: Type.Integer(),
  has_bot: Type.Boolean(),
  source: Type.String(),
  created_at: Timestamp,
  updated_at: Timestamp,
});

/** The vanity update's answer: the fields spec 4.4 lists, plus the vanity itself and the chat it opens. */
export const VanityGuildSchema = Type.Object({
  chatplatform_id: Type.String(),
  name: Type.String(),
  avatar_url: Type.String({ description: 'empty when not known' }),
  has_premium: Type.Boolean(),
  member_count: Type.Integer(),
  prefix: Type.String(),
  subscription_expires_at: Nullable(Timestamp),
  source: Type.String(),
  vanity_invite: Nullable(Type.String()),
  chat_id: Nullable(Type.Integer()),
  created_at: Timestamp,
  updated_at: Timestamp,
});

/**
 * POST {guild_api_url}/v1/bot/guilds/{guild_id} (B): creates or updates the guild. `name` and
 * `member_count` are required; the others are optional and, when omitted, stay as they are.
 */
export const GuildUpsertBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: Limits.GUILD_NAME_MAX, pattern: '\\S' }),
    member_count: Type.Integer({ minimum: 0, maximum: 2147483647 }),
    owner_chatplatform_id: Type.Optional(Snowflake),
    avatar_url: Type.Optional(Nullable(AvatarUrl)),
    prefix: Type.Optional(
      Nullable(Type.String({ minLength: 1, maxLength: Limits.GUILD_PREFIX_MAX, pattern: '^\\S+$' })),
    ),
  },
  strict,
);

export const VanityBody = Type.Object({ vanity_invite: Type.String({ pattern: VANITY_PATTERN }) }, strict);

const Reason = Type.String({ minLength: 1, maxLength: Limits.REASON_MAX });

/** POST /v1/admin/guilds/{guild_id}/premium: premium for `days` from now (replacing any current expiry). */
export const GuildPremiumBody = Type.Object(
  { days: Type.Integer({ minimum: 1, maximum: Limits.GUILD_PREMIUM_DAYS_MAX }), reason: Type.Optional(Reason) },
  strict,
);
export const GuildPremiumRevokeBody = Type.Object(
  { reason: Type.Optional(Reason) },
  { ...strict, 'x-empty-body': true },
);
export const GuildSponsorBody = Type.Object({ user_id: IdParam, reason: Type.Optional(Reason) }, strict);

export type Guild = Static<typeof GuildSchema>;
export type BotGuild = Static<typeof BotGuildSchema>;
export type VanityGuild = Static<typeof VanityGuildSchema>;
export type RoomSettings = Static<typeof RoomSettingsSchema>;
export type RoomSettingsBody = Static<typeof RoomSettingsBody>;
export type GuildUpsertBody = Static<typeof GuildUpsertBody>;
export type VanityBody = Static<typeof VanityBody>;
export type GuildPremiumBody = Static<typeof GuildPremiumBody>;
export type GuildPremiumRevokeBody = Static<typeof GuildPremiumRevokeBody>;
export type GuildSponsorBody = Static<typeof GuildSponsorBody>;
