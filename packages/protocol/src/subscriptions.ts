import { type Static, Type } from '@sinclair/typebox';
import { IdParam } from './common.js';
import { Limits, SubscriptionTier } from './constants.js';
import { SubscriptionStatusSchema } from './users.js';

const strict = { additionalProperties: false } as const;

/** The tiers an admin grants, by the names the API and the CLI use (Basic is reached by revoking). */
export const GrantableTiers = {
  TRIAL: SubscriptionTier.TRIAL,
  PREMIUM: SubscriptionTier.PREMIUM,
  LIFETIME: SubscriptionTier.LIFETIME,
} as const;
export type GrantableTier = keyof typeof GrantableTiers;

const Reason = Type.String({ minLength: 1, maxLength: Limits.REASON_MAX });

/**
 * POST /v1/admin/subscriptions/grant. TRIAL lasts 7 days and takes no duration; PREMIUM needs
 * `duration_days` (1-3650, counted from now); LIFETIME has no expiry and takes no duration.
 */
export const SubscriptionGrantBody = Type.Object(
  {
    user_id: IdParam,
    tier: Type.Union([Type.Literal('TRIAL'), Type.Literal('PREMIUM'), Type.Literal('LIFETIME')]),
    duration_days: Type.Optional(Type.Integer({ minimum: 1, maximum: Limits.SUBSCRIPTION_DAYS_MAX })),
    reason: Type.Optional(Reason),
  },
  strict,
);
export const SubscriptionRevokeBody = Type.Object({ user_id: IdParam, reason: Type.Optional(Reason) }, strict);

/** The user's subscription after the change, in the shape of GET /v1/users/me/subscription. */
export const SubscriptionChangeResponse = Type.Object({
  user_id: Type.Integer(),
  subscription: SubscriptionStatusSchema,
});

export type SubscriptionGrantBody = Static<typeof SubscriptionGrantBody>;
export type SubscriptionRevokeBody = Static<typeof SubscriptionRevokeBody>;
export type SubscriptionChangeResponse = Static<typeof SubscriptionChangeResponse>;
