import { type Static, Type } from '@sinclair/typebox';
import { Nullable, Timestamp } from './common.js';
import { Limits } from './constants.js';
import { AvatarUrl } from './guilds.js';

const strict = { additionalProperties: false } as const;

export const PlatformName = Type.String({ minLength: 1, maxLength: 32, description: 'platform_a or platform_b' });
export const PlatformUserId = Type.String({ minLength: 1, maxLength: 64 });
export const LoginCode = Type.String({
  minLength: Limits.LOGIN_CODE_LENGTH,
  maxLength: Limits.LOGIN_CODE_LENGTH,
  description: '8 characters; case-insensitive',
});

export const LinkedPlatformSchema = Type.Object({
  platform: Type.String(),
  platform_user_id: Type.String(),
  platform_username: Type.String(),
  platform_avatar_url: Type.String(),
  linked_at: Timestamp,
  last_authenticated_at: Timestamp,
});

export const LookupBody = Type.Object({ username: Type.String({ minLength: 1, maxLength: 64 }) }, strict);
export const LookupResponse = Type.Object({
  username: Type.String(),
  linked_platforms: Type.Array(
    Type.Object({
      platform: Type.String(),
      platform_user_id: Type.String(),
      platform_username: Type.String(),
      platform_avatar_url: Type.String(),
    }),
  ),
});

export const RequestCodeBody = Type.Object({ platform: PlatformName, platform_user_id: PlatformUserId }, strict);
export const RequestCodeResponse = Type.Object({ expires_at: Timestamp });

export const VerifyBody = Type.Object({ code: LoginCode }, strict);

export const SendCodeBody = Type.Object({ platform: PlatformName, platform_user_id: PlatformUserId }, strict);
export const SendCodeResponse = Type.Object({ code: Type.String(), expires_at: Timestamp });

export const BotLoginCodeBody = Type.Object(
  {
    platform: PlatformName,
    platform_user_id: PlatformUserId,
    platform_username: Type.String({ minLength: 1, maxLength: 100 }),
    /** The user's picture on the platform, or "" when there is none. */
    platform_avatar_url: Type.Union([Type.Literal(''), AvatarUrl]),
  },
  strict,
);
export const BotLoginCodeResponse = Type.Object({ code: Nullable(Type.String()), expires_at: Nullable(Timestamp) });

export type LookupBody = Static<typeof LookupBody>;
export type RequestCodeBody = Static<typeof RequestCodeBody>;
export type VerifyBody = Static<typeof VerifyBody>;
export type SendCodeBody = Static<typeof SendCodeBody>;
export type BotLoginCodeBody = Static<typeof BotLoginCodeBody>;
export type LinkedPlatform = Static<typeof LinkedPlatformSchema>;
