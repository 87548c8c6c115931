import { Limits } from '@parlor/protocol';
import { describe, expect, it } from 'vitest';
import { planGrant, tierTitle } from './subscriptions.rules.js';

const now = new Date(Date.UTC(2026, 0, 1));
const DAY = 24 * 3600 * 1000;

describe('planGrant (spec 2.11 tiers)', () => {
  it('gives a trial exactly 7 days, recorded as action trial', () => {
    expect(planGrant('TRIAL', undefined, now)).toEqual({
      tier: 1,
      expiresAt: new Date(now.getTime() + Limits.TRIAL_DAYS * DAY),
      action: 'trial',
    });
  });

  it('gives Premium duration_days from now, 1 and 3650 included', () => {
    expect(planGrant('PREMIUM', 1, now)).toEqual({
      tier: 2,
      expiresAt: new Date(now.getTime() + DAY),
      action: 'premium',
    });
    expect(planGrant('PREMIUM', 3650, now)).toEqual({
      tier: 2,
      expiresAt: new Date(now.getTime() + 3650 * DAY),
      action: 'premium',
    });
  });

  it('gives Lifetime no expiry', () => {
    expect(planGrant('LIFETIME', undefined, now)).toEqual({ tier: 3, expiresAt: null, action: 'lifetime' });
  });

  it('refuses Premium without a duration or outside 1-3650', () => {
    expect(planGrant('PREMIUM', undefined, now)).toBe('is required for PREMIUM');
    for (const days of [0, 3651, 1.5, -1]) expect(planGrant('PREMIUM', days, now)).toBe('must be 1 to 3650');
  });

  it('refuses a duration for Trial and Lifetime instead of ignoring it', () => {
    expect(planGrant('TRIAL', 30, now)).toMatch(/not accepted for TRIAL/);
    expect(planGrant('LIFETIME', 30, now)).toMatch(/not accepted for LIFETIME/);
  });

  it('names the tiers', () => {
    expect([0, 1, 2, 3].map(tierTitle)).toEqual(['Basic', 'Trial', 'Premium', 'Lifetime']);
  });
});
