import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from '../../server/test/support/app.js';
import { login, setLevel } from '../../server/test/support/flows.js';
import { NOWHERE, parlor, SOME_TOKEN, useCli } from './support.js';

useCli();

describe('parlor subscriptions|notifications argument checks (before anything is sent)', () => {
  it('lists both groups in the help', async () => {
    const run = await parlor(['--help'], { PARLOR_URL: NOWHERE });
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^\s+subscriptions\s/m);
    expect(run.stdout).toMatch(/^\s+notifications\s/m);
  });

  it('tells in the help of send and broadcast what a title and a body must hold', async () => {
    for (const command of [['send'], ['broadcast']]) {
      const run = await parlor(['notifications', ...command, '--help'], { PARLOR_URL: NOWHERE });
      expect(run.code).toBe(0);
      const help = run.stdout.replace(/\s+/g, ' ');
      const visible = 'at least one visible (not only white space or format characters such as U+200B)';
      expect(help).toContain(`--title <title> one line, 1-100 characters, ${visible}`);
      expect(help).toContain(`--body <body> 1-2000 characters, ${visible};`);
    }
  });

  const cases: [string, string[], RegExp][] = [
    ['an unknown tier', ['subscriptions', 'grant', '5', 'gold'], /trial, premium, lifetime/],
    ['an upper-case tier', ['subscriptions', 'grant', '5', 'PREMIUM', '--days', '3'], /trial, premium, lifetime/],
    ['premium without --days', ['subscriptions', 'grant', '5', 'premium'], /premium needs --days/],
    ['--days with trial', ['subscriptions', 'grant', '5', 'trial', '--days', '7'], /--days applies to premium only/],
    ['--days 0', ['subscriptions', 'grant', '5', 'premium', '--days', '0'], /1 to 3650/],
    ['--days 3651', ['subscriptions', 'grant', '5', 'premium', '--days', '3651'], /1 to 3650/],
    ['fractional --days', ['subscriptions', 'grant', '5', 'premium', '--days', '1.5'], /1 to 3650/],
    ['user id 0', ['subscriptions', 'revoke', '0'], /user_id/],
    ['a missing user id', ['subscriptions', 'revoke'], /user_id/],
    ['send without --title', ['notifications', 'send', '5', '--body', 'b'], /--title/],
    ['send without --body', ['notifications', 'send', '5', '--title', 't'], /--body/],
    [
      'an unknown type',
      ['notifications', 'broadcast', '--title', 't', '--body', 'b', '--type', 'loud'],
      /success, info/,
    ],
    ['a non-numeric id', ['notifications', 'delete', 'abc'], /id/],
  ];
  it.each(cases)('exits 1 on %s with a clear message', async (_name, args, message) => {
    const run = await parlor(args, { PARLOR_URL: NOWHERE, OPERATOR_TOKEN: SOME_TOKEN });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^error: /);
    expect(run.stderr).toMatch(message);
    expect(run.stdout).toBe('');
  });
});

describeApp('parlor subscriptions and notifications against a running server', () => {
  let app: TestApp;
  let env: Record<string, string>;

  beforeAll(async () => {
    app = await startApp();
    env = { PARLOR_URL: app.url, OPERATOR_TOKEN: app.operatorToken };
  });
  afterAll(async () => app?.close());

  it('grants premium --days, lifetime and a trial (once), and revokes with a reason', async () => {
    const { client, user } = await login(app);
    const premium = await parlor(['subscriptions', 'grant', String(user.id), 'premium', '--days', '30'], env);
    expect(premium.code).toBe(0);
    expect(premium.stderr).toBe('');
    const answer = JSON.parse(premium.stdout);
    expect(answer).toMatchObject({
      user_id: user.id,
      subscription: { tier: 2, tier_name: 'premium', granted_by: null },
    });
    expect(premium.stdout).toBe(`${JSON.stringify(answer, null, 2)}\n`);
    expect((await client.get('/v1/users/me')).body.user.subscription_tier).toBe(2);

    const lifetime = await parlor(['subscriptions', 'grant', String(user.id), 'lifetime', '--reason', 'founder'], env);
    expect(JSON.parse(lifetime.stdout).subscription).toMatchObject({ tier: 3, expires_at: null });

    const trial = await parlor(['subscriptions', 'grant', String(user.id), 'trial'], env);
    expect(JSON.parse(trial.stdout).subscription).toMatchObject({ tier: 1, trial_used: true });
    const again = await parlor(['subscriptions', 'grant', String(user.id), 'trial'], env);
    expect(again.code).toBe(1);
    expect(again.stdout).toBe('');
    expect(JSON.parse(again.stderr)).toMatchObject({ code: 'ERR_TRIAL_ALREADY_USED' });

    const revoked = await parlor(['subscriptions', 'revoke', String(user.id), '--reason', 'test'], env);
    expect(revoked.code).toBe(0);
    expect(JSON.parse(revoked.stdout).subscription).toMatchObject({ tier: 0, has_premium: false });
    const owner = await login(app);
    await setLevel(app, owner.user.id, 3);
    const history = (await owner.client.get(`/v1/users/${user.id}`)).body.subscription_history;
    expect(history.map((h: { action: string; reason: string | null }) => [h.action, h.reason])).toEqual([
      ['revoke', 'test'],
      ['grant', null],
      ['grant', 'founder'],
      ['grant', null],
    ]);
  });

  it('exits 1 with the server’s ERR_USER_NOT_FOUND for an unknown user', async () => {
    const run = await parlor(['subscriptions', 'grant', '987654321', 'lifetime'], env);
    expect(run.code).toBe(1);
    expect(JSON.parse(run.stderr)).toMatchObject({ code: 'ERR_USER_NOT_FOUND' });
  });

  it('sends to one user, broadcasts, and deletes', async () => {
    const a = await login(app);
    const b = await login(app);
    const sent = await parlor(
      ['notifications', 'send', String(a.user.id), '--title', 'Hi', '--body', 'See [this](https://x.example)'],
      env,
    );
    expect(sent.code).toBe(0);
    const created = JSON.parse(sent.stdout);
    expect(created).toEqual({ id: expect.any(Number), broadcast_id: null, recipients: 1 });
    expect((await a.client.get('/v1/notifications')).body.notifications[0]).toMatchObject({
      id: created.id,
      title: 'Hi',
      type: 'info',
    });

    const cast = await parlor(
      ['notifications', 'broadcast', '--title', 'All', '--body', 'b', '--type', 'warning'],
      env,
    );
    expect(cast.code).toBe(0);
    const broadcast = JSON.parse(cast.stdout);
    expect(broadcast.recipients).toBeGreaterThanOrEqual(2);
    for (const who of [a, b]) {
      expect((await who.client.get('/v1/notifications')).body.notifications[0]).toMatchObject({
        title: 'All',
        type: 'warning',
      });
    }

    const deleted = await parlor(['notifications', 'delete', String(broadcast.id)], env);
    expect(deleted.code).toBe(0);
    expect(JSON.parse(deleted.stdout)).toEqual({ deleted: broadcast.recipients, broadcast_id: broadcast.broadcast_id });
    expect((await b.client.get('/v1/notifications')).body.notifications[0].title).not.toBe('All');

    const bad = await parlor(
      ['notifications', 'send', String(a.user.id), '--title', 'x', '--body', '[x](javascript:1)'],
      env,
    );
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stderr)).toMatchObject({ code: 'ERR_VALIDATION', errors: [{ path: 'body/body' }] });
  });
});
