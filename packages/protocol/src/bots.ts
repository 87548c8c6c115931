import { type Static, Type } from '@sinclair/typebox';
import { Nullable, Timestamp } from './common.js';
import { Limits } from './constants.js';
import { AvatarUrl } from './guilds.js';

/** A bot's name: 1-64 characters, not blank (shown to everyone by `GET /bots`). */
export const BotName = Type.String({ minLength: 1, maxLength: Limits.BOT_NAME_MAX, pattern: '\\S' });

const strict = { additionalProperties: false } as const;

export const BotStatsSchema = Type.Object({
  users: Nullable(Type.Integer()),
  latency_ms: Nullable(Type.Number()),
  reported_at: Nullable(Timestamp),
});

/** The bot's own profile (GET /v1/bot/me) and the Admin view of a bot. */
export const BotProfileSchema = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    avatar_url: Nullable(Type.String()),
    type: Type.Integer({ minimum: 1, maximum: 3, description: '1 Official, 2 Verified, 3 Community' }),
    rate_limit_per_hour: Type.Integer(),
    owner_user_id: Nullable(Type.Integer()),
    stats: BotStatsSchema,
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { $id: 'BotProfile' },
);

/** What anyone with the public key sees of a bot. */
export const PublicBotSchema = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    avatar_url: Nullable(Type.String()),
    verified: Type.Boolean(),
    users: Nullable(Type.Integer()),
    created_at: Timestamp,
  },
  { $id: 'PublicBot' },
);

export const BotUpdateBody = Type.Object(
  {
    name: Type.Optional(BotName),
    avatar_url: Type.Optional(Nullable(AvatarUrl)),
    stats: Type.Optional(
      Type.Object(
        {
          users: Type.Optional(Type.Integer({ minimum: 0, maximum: 2147483647 })),
          latency_ms: Type.Optional(Type.Number({ minimum: 0, maximum: 3600000 })),
        },
        // One statistic at least: stats.reported_at says when one was last reported.
        { ...strict, minProperties: 1 },
      ),
    ),
  },
  { ...strict, minProperties: 1 },
);

export const BotCommandSchema = Type.Object(
  {
    command: Type.String({ minLength: 1, maxLength: 64 }),
    user_id: Type.Optional(Type.Integer({ minimum: 1, maximum: 2147483647 })),
    guild_id: Type.Optional(Type.String({ pattern: '^[0-9]{1,20}$' })),
    success: Type.Optional(Type.Boolean()),
    duration_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: 3600000 })),
    executed_at: Type.Optional(Type.String({ format: 'date-time' })),
  },
  strict,
);
export const BotBatchBody = Type.Object(
  { commands: Type.Array(BotCommandSchema, { minItems: 1, maxItems: Limits.BOT_BATCH_MAX }) },
  strict,
);
export const BotBatchResponse = Type.Object({ recorded: Type.Integer() });

/** Bot-visible user (spec 2.2). */
export const BotUserSchema = Type.Object({
  id: Type.Integer(),
  username: Type.String(),
  subscription_tier: Type.Integer(),
  permission_level: Type.Integer(),
  state: Type.Integer(),
  created_at: Timestamp,
  updated_at: Timestamp,
});
export const BotUserUpdatedSchema = Type.Object({
  id: Type.Integer(),
  username: Type.String(),
  avatar_url: Nullable(Type.String()),
  subscription_tier: Type.Integer(),
  permission_level: Type.Integer(),
  state: Type.Integer(),
});
export const BotUserUpdateBody = Type.Object({ username: Type.Optional(Type.String({ maxLength: 256 })) }, strict);

export const BotCreateBody = Type.Object(
  {
    name: BotName,
    type: Type.Optional(Type.Union([Type.Literal('official'), Type.Literal('verified'), Type.Literal('community')])),
    rate_limit_per_hour: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000 })),
    owner_user_id: Type.Optional(Type.Integer({ minimum: 1, maximum: 2147483647 })),
  },
  strict,
);
export const BotCreateResponse = Type.Object({ id: Type.Integer(), api_key: Type.String() });

export const BotSearchQuery = Type.Object(
  {
    q: Type.String({ minLength: 1, maxLength: 64 }),
    offset: Type.Integer({ minimum: 0, maximum: 2147483647, default: 0 }),
    limit: Type.Integer({ minimum: 1, maximum: 100, default: 20 }),
  },
  strict,
);
export const BotListQuery = Type.Object(
  {
    offset: Type.Integer({ minimum: 0, maximum: 2147483647, default: 0 }),
    limit: Type.Integer({ minimum: 1, maximum: 100, default: 50 }),
  },
  strict,
);

export type BotUpdateBody = Static<typeof BotUpdateBody>;
export type BotBatchBody = Static<typeof BotBatchBody>;
export type BotCreateBody = Static<typeof BotCreateBody>;
export type BotProfile = Static<typeof BotProfileSchema>;
export type PublicBot = Static<typeof PublicBotSchema>;
