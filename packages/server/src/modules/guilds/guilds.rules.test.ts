import { Limits } from '@parlor/protocol';
import { describe, expect, it } from 'vitest';
import { canManageGuild, guildChatName, guildHasPremium, isStartUrl, premiumUntil } from './guilds.rules.js';

const now = new Date('2026-03-01T12:00:00.000Z');

describe('guild premium', () => {
  it('is active only while the expiry is in the future', () => {
    expect(guildHasPremium({ subscriptionExpiresAt: null }, now)).toBe(false);
    expect(guildHasPremium({ subscriptionExpiresAt: now }, now)).toBe(false);
    expect(guildHasPremium({ subscriptionExpiresAt: new Date(now.getTime() + 1) }, now)).toBe(true);
    expect(guildHasPremium({ subscriptionExpiresAt: new Date(now.getTime() - 1) }, now)).toBe(false);
  });

  it('counts its days from now', () => {
    expect(premiumUntil(30, now).toISOString()).toBe('2026-03-31T12:00:00.000Z');
  });
});

describe('who manages a guild', () => {
  it.each([
    [0, false, false, false],
    [1, false, false, false],
    [0, true, false, true],
    [0, false, true, true],
    [2, false, false, true],
    [3, false, false, true],
  ])('level %i, owner %s, sponsor %s: %s', (permissionLevel, isOwner, isSponsor, allowed) => {
    expect(canManageGuild({ permissionLevel, isOwner, isSponsor })).toBe(allowed);
  });
});

describe('start_url', () => {
  it.each([
    ['https://example.com/', true],
    ['http://example.com', true],
    ['HTTPS://EXAMPLE.COM/a?b#c', true],
    ['https://', false],
    ['ftp://example.com/', false],
    ['javascript:alert(1)', false],
    ['example.com', false],
  ])('%s → %s', (url, ok) => {
    expect(isStartUrl(url)).toBe(ok);
  });
});

describe('the guild chat name', () => {
  it('is the guild name cut to a chat name, by code points', () => {
    expect(guildChatName('  Chess club ')).toBe('Chess club');
    const long = '🎲'.repeat(100);
    expect(Array.from(guildChatName(long))).toHaveLength(Limits.CHAT_NAME_MAX);
  });
});
