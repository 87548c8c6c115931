import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from '../../server/test/support/app.js';
import type { Client } from '../../server/test/support/client.js';
import { createBot, login, nextIdentity } from '../../server/test/support/flows.js';
import { NOWHERE, parlor, SOME_TOKEN, useCli } from './support.js';

useCli();

describe('parlor guilds argument checks (before anything is sent)', () => {
  it('lists the group in the help', async () => {
    const run = await parlor(['--help'], { PARLOR_URL: NOWHERE });
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^\s+guilds\s/m);
  });

  const cases: [string, string[], RegExp][] = [
    ['premium without --days or --revoke', ['guilds', 'premium', '123'], /--days <n> or --revoke/],
    ['--days with --revoke', ['guilds', 'premium', '123', '--days', '3', '--revoke'], /cannot be used with/],
    ['--days 0', ['guilds', 'premium', '123', '--days', '0'], /1 to 3650/],
    ['--days 3651', ['guilds', 'premium', '123', '--days', '3651'], /1 to 3650/],
    ['fractional --days', ['guilds', 'premium', '123', '--days', '1.5'], /1 to 3650/],
    ['a guild id with letters', ['guilds', 'premium', 'abc', '--days', '3'], /guild/],
    ['a 21-digit guild id', ['guilds', 'sponsor', '1'.repeat(21), '5'], /guild/],
    ['a missing user id', ['guilds', 'sponsor', '123'], /user_id/],
    ['user id 0', ['guilds', 'sponsor', '123', '0'], /user_id/],
  ];
  it.each(cases)('exits 1 on %s with a clear message', async (_name, args, message) => {
    const run = await parlor(args, { PARLOR_URL: NOWHERE, OPERATOR_TOKEN: SOME_TOKEN });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^error: /);
    expect(run.stderr).toMatch(message);
    expect(run.stdout).toBe('');
  });
});

describeApp('parlor guilds against a running server', () => {
  let app: TestApp;
  let env: Record<string, string>;
  /** The community bot that reports the guilds (logins go through an official bot: login()). */
  let bot: Client;

  beforeAll(async () => {
    app = await startApp();
    env = { PARLOR_URL: app.url, OPERATOR_TOKEN: app.operatorToken };
    bot = (await createBot(app)).client;
  });
  afterAll(async () => app?.close());

  const reportedGuild = async () => {
    const id = nextIdentity();
    const res = await bot.post(`/v1/bot/guilds/${id}`, { name: 'CLI guild', member_count: 3 });
    expect(res.status).toBe(200);
    return id;
  };

  it('gives premium for --days and revokes it, printing the guild', async () => {
    const id = await reportedGuild();
    const granted = await parlor(['guilds', 'premium', id, '--days', '30', '--reason', 'promo'], env);
    expect(granted.code, granted.stderr).toBe(0);
    expect(granted.stderr).toBe('');
    const guild = JSON.parse(granted.stdout);
    expect(guild).toMatchObject({ chatplatform_id: id, has_premium: true });
    const days = (Date.parse(guild.subscription_expires_at) - Date.now()) / (24 * 3600 * 1000);
    expect(days).toBeGreaterThan(29);
    expect(days).toBeLessThanOrEqual(30);

    const revoked = await parlor(['guilds', 'premium', id, '--revoke'], env);
    expect(revoked.code).toBe(0);
    expect(JSON.parse(revoked.stdout)).toMatchObject({ has_premium: false, subscription_expires_at: null });
  });

  it('adds and removes a sponsor, who meanwhile manages the guild', async () => {
    const id = await reportedGuild();
    const sponsor = await login(app);
    const added = await parlor(['guilds', 'sponsor', id, String(sponsor.user.id)], env);
    expect(added.code, added.stderr).toBe(0);
    expect(JSON.parse(added.stdout).sponsor_ids).toEqual([sponsor.user.id]);
    const put = () => sponsor.client.request('PUT', `/v1/guilds/${id}/room-settings`, { body: { kiosk: true } });
    expect((await put()).status).toBe(200);

    const removed = await parlor(['guilds', 'sponsor', id, String(sponsor.user.id), '--remove'], env);
    expect(removed.code).toBe(0);
    expect(JSON.parse(removed.stdout).sponsor_ids).toEqual([]);
    expect((await put()).status).toBe(403);
  });

  it('exits 1 with the error body for an unknown guild', async () => {
    const run = await parlor(['guilds', 'premium', nextIdentity(), '--days', '3'], env);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(JSON.parse(run.stderr)).toMatchObject({ code: 'ERR_GUILD_NOT_FOUND' });
  });
});
