import { type GrantableTier, GrantableTiers, Limits } from '@parlor/protocol';

const DAY_MS = 24 * 3600 * 1000;

/** Display names of the tiers (spec 2.11), by value. */
export const TIER_TITLES = ['Basic', 'Trial', 'Premium', 'Lifetime'] as const;

export function tierTitle(tier: number): string {
  return TIER_TITLES[tier] ?? `tier ${tier}`;
}

/** What a grant sets, and the audit action that records it (`trial` is how "trial used" is found). */
export interface GrantPlan {
  tier: number;
  expiresAt: Date | null;
  action: 'trial' | 'premium' | 'lifetime';
}

/**
 * The tier rules of spec 2.11: Trial is 7 days, forced; Premium lasts `durationDays` from now and
 * needs it; Lifetime never expires. A duration given for Trial or Lifetime is refused rather than
 * ignored. Answers the plan, or the problem with `duration_days`.
 */
export function planGrant(tier: GrantableTier, durationDays: number | undefined, now: Date): GrantPlan | string {
  const value = GrantableTiers[tier];
  if (tier === 'PREMIUM') {
    if (durationDays === undefined) return 'is required for PREMIUM';
    if (!Number.isInteger(durationDays) || durationDays < 1 || durationDays > Limits.SUBSCRIPTION_DAYS_MAX)
      return `must be 1 to ${Limits.SUBSCRIPTION_DAYS_MAX}`;
    return { tier: value, expiresAt: new Date(now.getTime() + durationDays * DAY_MS), action: 'premium' };
  }
  if (durationDays !== undefined)
    return tier === 'TRIAL'
      ? `is not accepted for TRIAL (always ${Limits.TRIAL_DAYS} days)`
      : 'is not accepted for LIFETIME';
  if (tier === 'TRIAL')
    return { tier: value, expiresAt: new Date(now.getTime() + Limits.TRIAL_DAYS * DAY_MS), action: 'trial' };
  return { tier: value, expiresAt: null, action: 'lifetime' };
}
