import { AuditCodes, Limits } from '@parlor/protocol';
import { and, eq } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { auditLog, notifications, users } from '../src/platform/db/schema.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { expectOnePartFailed, failInserts, loggedTick } from './support/faults.js';
import { createLoginBot, type LoggedIn, login, operator, setLevel } from './support/flows.js';
import { racingUserRow, whileHeldAdvancing } from './support/pg-locks.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

const DAY = 24 * 3600 * 1000;

let app: TestApp;
let bot: Client;
let op: Client;
const clock = new FakeClock(Date.now());
/** PostgreSQL (cluster project): the tests' own connection, to hold rows as another node would. */
let pg: postgres.Sql | undefined;

beforeAll(async () => {
  app = await startApp({ clock });
  bot = await createLoginBot(app);
  op = operator(app);
  if (app.config.databaseUrl) pg = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await pg?.end({ timeout: 1 });
  await app?.close();
});

const grant = (by: Client, body: Record<string, unknown>) => by.post('/v1/admin/subscriptions/grant', body);
const revoke = (by: Client, body: Record<string, unknown>) => by.post('/v1/admin/subscriptions/revoke', body);

const expectError = (res: { status: number; body: any }, status: number, code: string) => {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body.code).toBe(code);
};

const subscriptionAudits = (userId: number) =>
  app.database.db
    .select()
    .from(auditLog)
    .where(and(eq(auditLog.targetUserId, userId)))
    .then((rows) =>
      rows.filter((r) => r.code === AuditCodes.SUBSCRIPTION_GRANT || r.code === AuditCodes.SUBSCRIPTION_REVOKE),
    );

const titles = async (who: LoggedIn) =>
  (await who.client.get('/v1/notifications')).body.notifications.map((n: { title: string }) => n.title);

const createChat = (who: LoggedIn, name = 'Mine') =>
  who.client.post('/v1/portal/chats/create', { name, type: 'public' });

describeApp('POST /v1/admin/subscriptions/grant', () => {
  it('grants Premium for duration_days from now: user, subscription view, audit and notification agree', async () => {
    const target = await login(app, { bot });
    const socket = await connectSocket(app.url, target.client);
    const res = await grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 30, reason: 'promo' });
    const expiresAt = new Date(clock.now().getTime() + 30 * DAY).toISOString();
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({
      user_id: target.user.id,
      subscription: {
        tier: 2,
        tier_name: 'premium',
        has_premium: true,
        expires_at: expiresAt,
        granted_by: null,
        trial_used: false,
      },
    });
    expect((await target.client.get('/v1/users/me/subscription')).body).toEqual(res.body.subscription);
    expect((await target.client.get('/v1/users/me')).body.user).toMatchObject({
      subscription_tier: 2,
      subscription_expires_at: expiresAt,
      subscription_granted_by: null,
    });
    expect(await subscriptionAudits(target.user.id)).toEqual([
      expect.objectContaining({
        actorKind: 'operator',
        code: AuditCodes.SUBSCRIPTION_GRANT,
        action: 'premium',
        reason: 'promo',
        data: { tier: 2, expires_at: expiresAt },
      }),
    ]);
    const event = await socket.next('notification:new', (n) => n.title === 'Subscription upgraded');
    expect(event.body).toMatch(/^Your subscription is now \*\*Premium\*\*, until \d{4}-\d\d-\d\d \d\d:\d\d UTC\.$/);
  });

  it('records the granting Admin in subscription_granted_by; Lifetime has no expiry', async () => {
    const admin = await login(app, { bot });
    await setLevel(app, admin.user.id, 2);
    const target = await login(app, { bot });
    const res = await grant(admin.client, { user_id: target.user.id, tier: 'LIFETIME' });
    expect(res.status).toBe(200);
    expect(res.body.subscription).toMatchObject({
      tier: 3,
      tier_name: 'lifetime',
      expires_at: null,
      granted_by: admin.user.id,
    });
    expect((await target.client.get('/v1/users/me')).body.user).toMatchObject({
      subscription_tier: 3,
      subscription_expires_at: null,
      subscription_granted_by: admin.user.id,
    });
    expect(await titles(target)).toContain('Subscription upgraded');
  });

  it('accepts duration_days 1 and 3650; refuses 0, 3651, a missing one for PREMIUM and one for TRIAL or LIFETIME', async () => {
    const { user } = await login(app, { bot });
    for (const days of [1, Limits.SUBSCRIPTION_DAYS_MAX]) {
      const res = await grant(op, { user_id: user.id, tier: 'PREMIUM', duration_days: days });
      expect(res.status).toBe(200);
      expect(Date.parse(res.body.subscription.expires_at) - clock.now().getTime()).toBe(days * DAY);
    }
    for (const body of [
      { tier: 'PREMIUM', duration_days: 0 },
      { tier: 'PREMIUM', duration_days: Limits.SUBSCRIPTION_DAYS_MAX + 1 },
      { tier: 'PREMIUM' },
      { tier: 'PREMIUM', duration_days: '30' },
      { tier: 'PREMIUM', duration_days: 1.5 },
      { tier: 'TRIAL', duration_days: 30 },
      { tier: 'LIFETIME', duration_days: 30 },
    ]) {
      const res = await grant(op, { user_id: user.id, ...body });
      expectError(res, 400, 'ERR_VALIDATION');
      expect(res.body.errors[0].path).toBe('body/duration_days');
    }
    for (const body of [{ tier: 'BASIC' }, { tier: 'premium', duration_days: 3 }, { tier: 'LIFETIME', extra: 1 }, {}]) {
      expectError(await grant(op, { user_id: user.id, ...body }), 400, 'ERR_VALIDATION');
    }
    expectError(
      await grant(op, { user_id: user.id, tier: 'LIFETIME', reason: 'r'.repeat(501) }),
      400,
      'ERR_VALIDATION',
    );
    expectError(await grant(op, { user_id: 2147483646, tier: 'LIFETIME' }), 404, 'ERR_USER_NOT_FOUND');
    // Nothing refused above changed the last good grant (3650 days) or left an audit entry.
    expect((await subscriptionAudits(user.id)).map((a) => a.action)).toEqual(['premium', 'premium']);
    const after = await app.database.db.select().from(users).where(eq(users.id, user.id));
    expect(after[0]?.subscriptionExpiresAt?.getTime()).toBe(clock.now().getTime() + Limits.SUBSCRIPTION_DAYS_MAX * DAY);
  });

  it('grants the trial once per user ever: grant, revoke, grant again → 409 ERR_TRIAL_ALREADY_USED', async () => {
    const target = await login(app, { bot });
    const first = await grant(op, { user_id: target.user.id, tier: 'TRIAL' });
    expect(first.status).toBe(200);
    expect(first.body.subscription).toMatchObject({
      tier: 1,
      tier_name: 'trial',
      has_premium: true,
      trial_used: true,
      expires_at: new Date(clock.now().getTime() + Limits.TRIAL_DAYS * DAY).toISOString(),
    });
    expect(await titles(target)).toContain('Trial started');
    expect((await revoke(op, { user_id: target.user.id })).status).toBe(200);
    expectError(await grant(op, { user_id: target.user.id, tier: 'TRIAL' }), 409, 'ERR_TRIAL_ALREADY_USED');
    const owner = await login(app, { bot });
    await setLevel(app, owner.user.id, 3);
    expectError(await grant(owner.client, { user_id: target.user.id, tier: 'TRIAL' }), 409, 'ERR_TRIAL_ALREADY_USED');
    expect((await target.client.get('/v1/users/me/subscription')).body).toMatchObject({ tier: 0, trial_used: true });
    // Other tiers are still grantable.
    expect((await grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 5 })).status).toBe(200);
  });

  it('lets only one of two simultaneous trial grants through', async () => {
    const target = await login(app, { bot });
    const results = await Promise.all([
      grant(op, { user_id: target.user.id, tier: 'TRIAL' }),
      grant(op, { user_id: target.user.id, tier: 'TRIAL' }),
    ]);
    expect(results.map((r) => r.status).sort()).toEqual([200, 409]);
    expect((await subscriptionAudits(target.user.id)).filter((a) => a.action === 'trial')).toHaveLength(1);
  });

  it('applies the level rules: an Admin cannot grant to an Admin, an Owner can; Users and Moderators are refused', async () => {
    const [admin, otherAdmin, owner, moderator, plain] = [
      await login(app, { bot }),
      await login(app, { bot }),
      await login(app, { bot }),
      await login(app, { bot }),
      await login(app, { bot }),
    ];
    await setLevel(app, admin.user.id, 2);
    await setLevel(app, otherAdmin.user.id, 2);
    await setLevel(app, owner.user.id, 3);
    await setLevel(app, moderator.user.id, 1);
    const lifetime = (userId: number) => ({ user_id: userId, tier: 'LIFETIME' });
    expectError(await grant(admin.client, lifetime(otherAdmin.user.id)), 403, 'ERR_FORBIDDEN');
    expectError(await grant(admin.client, lifetime(admin.user.id)), 403, 'ERR_FORBIDDEN');
    expectError(await grant(admin.client, lifetime(owner.user.id)), 403, 'ERR_FORBIDDEN');
    expect((await otherAdmin.client.get('/v1/users/me')).body.user.subscription_tier).toBe(0);
    expect((await grant(owner.client, lifetime(otherAdmin.user.id))).status).toBe(200);
    expect((await otherAdmin.client.get('/v1/users/me')).body.user.subscription_tier).toBe(3);
    expectError(await revoke(admin.client, { user_id: otherAdmin.user.id }), 403, 'ERR_FORBIDDEN');
    expect((await grant(admin.client, lifetime(moderator.user.id))).status).toBe(200);
    expectError(await grant(moderator.client, lifetime(plain.user.id)), 403, 'ERR_FORBIDDEN');
    expectError(await grant(plain.client, lifetime(plain.user.id)), 403, 'ERR_FORBIDDEN');
    expectError(await grant(new Client(app.url), lifetime(plain.user.id)), 401, 'ERR_UNAUTHENTICATED');
  });

  it('answers 404 ERR_USER_NOT_FOUND for an anonymous stranger, grant or revoke, and writes nothing', async () => {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const created = await client.post('/v1/portal/stranger', {});
    expect(created.status).toBe(200);
    const id: number = created.body.user.id;
    for (const tier of ['TRIAL', 'LIFETIME'])
      expectError(await grant(op, { user_id: id, tier }), 404, 'ERR_USER_NOT_FOUND');
    expectError(await grant(op, { user_id: id, tier: 'PREMIUM', duration_days: 30 }), 404, 'ERR_USER_NOT_FOUND');
    expectError(await revoke(op, { user_id: id }), 404, 'ERR_USER_NOT_FOUND');
    const [row] = await app.database.db.select().from(users).where(eq(users.id, id));
    expect(row).toMatchObject({ subscriptionTier: 0, subscriptionExpiresAt: null, subscriptionGrantedBy: null });
    expect(await subscriptionAudits(id)).toEqual([]);
    expect(await app.database.db.select().from(notifications).where(eq(notifications.userId, id))).toEqual([]);
  });
});

describeApp('POST /v1/admin/subscriptions/revoke', () => {
  it('sets the user back to Basic with audit and notification; revoking Basic changes nothing', async () => {
    const target = await login(app, { bot });
    await grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 10 });
    const socket = await connectSocket(app.url, target.client);
    const res = await revoke(op, { user_id: target.user.id, reason: 'chargeback' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      user_id: target.user.id,
      subscription: {
        tier: 0,
        tier_name: 'basic',
        has_premium: false,
        expires_at: null,
        granted_by: null,
        trial_used: false,
      },
    });
    expect((await target.client.get('/v1/users/me')).body.user).toMatchObject({
      subscription_tier: 0,
      subscription_expires_at: null,
      subscription_granted_by: null,
    });
    const event = await socket.next('notification:new', (n) => n.title === 'Subscription revoked');
    expect(event).toMatchObject({
      type: 'warning',
      body: 'Your **Premium** subscription was revoked. Your account is now Basic.',
    });
    const audits = await subscriptionAudits(target.user.id);
    expect(audits.map((a) => [a.code, a.action, a.reason])).toEqual([
      [AuditCodes.SUBSCRIPTION_GRANT, 'premium', null],
      [AuditCodes.SUBSCRIPTION_REVOKE, 'revoke', 'chargeback'],
    ]);
    const again = await revoke(op, { user_id: target.user.id });
    expect(again.status).toBe(200);
    expect(again.body.subscription.tier).toBe(0);
    expect(await subscriptionAudits(target.user.id)).toHaveLength(2);
    expect((await titles(target)).filter((t: string) => t === 'Subscription revoked')).toHaveLength(1);
    expectError(await revoke(op, { user_id: target.user.id, tier: 'PREMIUM' }), 400, 'ERR_VALIDATION');
    expectError(await revoke(op, { user_id: 2147483646 }), 404, 'ERR_USER_NOT_FOUND');
  });

  it('treats an expired Premium the sweep has not reached as Basic: nothing recorded or sent, the sweep writes the expiry', async () => {
    const target = await login(app, { bot });
    expect((await grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 1 })).status).toBe(200);
    clock.advance(DAY);
    const [row] = await app.database.db.select().from(users).where(eq(users.id, target.user.id));
    expect(row?.subscriptionTier).toBe(2);
    const res = await revoke(op, { user_id: target.user.id, reason: 'too late' });
    expect(res.status).toBe(200);
    expect(res.body.subscription).toMatchObject({ tier: 0, has_premium: false, expires_at: null });
    expect((await subscriptionAudits(target.user.id)).map((a) => a.action)).toEqual(['premium']);
    expect(await titles(target)).not.toContain('Subscription revoked');
    // The stored tier is still Premium: the sweep finds it and reports the expiry as for anyone.
    expect(await app.subscriptionSweep.run()).toBeGreaterThanOrEqual(1);
    const audits = await subscriptionAudits(target.user.id);
    expect(audits.map((a) => [a.code, a.action, a.actorKind, a.reason])).toEqual([
      [AuditCodes.SUBSCRIPTION_GRANT, 'premium', 'operator', null],
      [AuditCodes.SUBSCRIPTION_REVOKE, 'expire', 'system', null],
    ]);
    const subscriptionTitles = (await titles(target)).filter((t: string) => t.startsWith('Subscription'));
    expect(subscriptionTitles).toEqual(['Subscription expired', 'Subscription upgraded']);
  });

  it('records a Premium past its expiry that the sweep has not reached before a grant replaces it: its expire entry and "Subscription expired", once', async () => {
    const target = await login(app, { bot });
    expect((await grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 1 })).status).toBe(200);
    clock.advance(DAY + 1000);
    expect((await grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 5 })).status).toBe(200);
    const expected = [
      [AuditCodes.SUBSCRIPTION_GRANT, 'premium', 'operator'],
      [AuditCodes.SUBSCRIPTION_REVOKE, 'expire', 'system'],
      [AuditCodes.SUBSCRIPTION_GRANT, 'premium', 'operator'],
    ];
    const audits = async () => (await subscriptionAudits(target.user.id)).map((a) => [a.code, a.action, a.actorKind]);
    expect(await audits()).toEqual(expected);
    const subscriptionTitles = async () => (await titles(target)).filter((t: string) => t.startsWith('Subscription'));
    expect(await subscriptionTitles()).toEqual([
      'Subscription upgraded',
      'Subscription expired',
      'Subscription upgraded',
    ]);
    // The row holds the new grant: the sweep finds nothing of this user to expire.
    await app.subscriptionSweep.run();
    expect(await audits()).toEqual(expected);
    expect(await subscriptionTitles()).toHaveLength(3);
  });

  it('tells a grant below the tier in force "Subscription changed", not "upgraded"', async () => {
    const target = await login(app, { bot });
    expect((await grant(op, { user_id: target.user.id, tier: 'LIFETIME' })).status).toBe(200);
    expect((await grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 1 })).status).toBe(200);
    const subscriptionTitles = (await titles(target)).filter((t: string) => t.startsWith('Subscription'));
    expect(subscriptionTitles).toEqual(['Subscription changed', 'Subscription upgraded']);
  });

  it('shows grants and revokes in the full user view’s subscription_history, newest first', async () => {
    const target = await login(app, { bot });
    const owner = await login(app, { bot });
    await setLevel(app, owner.user.id, 3);
    await grant(owner.client, { user_id: target.user.id, tier: 'TRIAL', reason: 'welcome' });
    clock.advance(1000);
    await revoke(op, { user_id: target.user.id, reason: 'abuse' });
    const view = await owner.client.get(`/v1/users/${target.user.id}`);
    expect(view.body.has_premium).toBe(false);
    expect(view.body.subscription_history).toEqual([
      {
        action: 'revoke',
        tier: 1,
        expires_at: expect.any(String),
        actor_user_id: null,
        reason: 'abuse',
        created_at: expect.any(String),
      },
      {
        action: 'grant',
        tier: 1,
        expires_at: expect.any(String),
        actor_user_id: owner.user.id,
        reason: 'welcome',
        created_at: expect.any(String),
      },
    ]);
  });
});

/** The request `run` made while the user's row is held by `work` (pg-locks racingUserRow); PostgreSQL only. */
function racing<T>(userId: number, work: string, run: () => Promise<T>) {
  if (!pg) throw new Error('PostgreSQL only');
  return racingUserRow(pg, userId, work, run);
}

/** What a refused grant or revoke must leave as it was: the target's row, its audit entries and notifications. */
const traceOf = async (userId: number) => ({
  row: (await app.database.db.select().from(users).where(eq(users.id, userId)))[0],
  audits: await subscriptionAudits(userId),
  notes: await app.database.db.select().from(notifications).where(eq(notifications.userId, userId)),
});

// docs/api.md "Levels as they are at the commit": the caller's right is decided on its level and
// state as read under its row lock, not as its session read them when the request began. PGlite
// runs one transaction at a time, so nothing interleaves there.
describeApp('grant and revoke racing a change of the caller (PostgreSQL)', () => {
  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN and grants nothing when the granting Admin is demoted to User meanwhile',
    async () => {
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const target = await login(app, { bot });
      const before = await traceOf(target.user.id);
      const res = await racing(
        target.user.id,
        `update users set permission_level = 0 where id = ${admin.user.id}`,
        () => grant(admin.client, { user_id: target.user.id, tier: 'LIFETIME' }),
      );
      expectError(res, 403, 'ERR_FORBIDDEN');
      expect(await traceOf(target.user.id)).toEqual(before);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN and revokes nothing when the revoking Admin is banned meanwhile',
    async () => {
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const target = await login(app, { bot });
      expect((await grant(op, { user_id: target.user.id, tier: 'LIFETIME' })).status).toBe(200);
      const before = await traceOf(target.user.id);
      const res = await racing(target.user.id, `update users set state = 2 where id = ${admin.user.id}`, () =>
        revoke(admin.client, { user_id: target.user.id }),
      );
      expectError(res, 403, 'ERR_FORBIDDEN');
      expect(await traceOf(target.user.id)).toEqual(before);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN and grants nothing when the granting Admin’s account is deleted meanwhile',
    async () => {
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const target = await login(app, { bot });
      const before = await traceOf(target.user.id);
      const res = await racing(target.user.id, `delete from users where id = ${admin.user.id}`, () =>
        grant(admin.client, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 30 }),
      );
      expectError(res, 403, 'ERR_FORBIDDEN');
      expect(await traceOf(target.user.id)).toEqual(before);
    },
  );
});

/** `run` while the user's row is held, the clock moved on by `advanceMs` once it waits (whileHeldAdvancing). */
function whileWaitingAdvance<T>(userId: number, advanceMs: number, run: () => Promise<T>) {
  if (!pg) throw new Error('PostgreSQL only');
  return whileHeldAdvancing(pg, `select id from users where id = ${userId} for update`, clock, advanceMs, run);
}

// docs/api.md Subscriptions: subscriptions end exactly at their deadline, and a grant or revoke
// decides on the user's row as it holds it, at the time it holds it: an expiry that passes while
// it waits for that row has passed.
describeApp('grant and revoke waiting for the user’s row while its Premium expires (PostgreSQL, fake clock)', () => {
  it.skipIf(MODE !== 'cluster')(
    'revokes nothing from a Premium that expires while the revoke waits: no `revoke`, no "Subscription revoked", the sweep writes the expiry',
    async () => {
      const target = await login(app, { bot });
      expect((await grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 1 })).status).toBe(200);
      clock.advance(DAY - 5_000);
      const res = await whileWaitingAdvance(target.user.id, 10_000, () => revoke(op, { user_id: target.user.id }));
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.subscription).toMatchObject({ tier: 0, has_premium: false, expires_at: null });
      expect((await subscriptionAudits(target.user.id)).map((a) => a.action)).toEqual(['premium']);
      expect(await titles(target)).not.toContain('Subscription revoked');
      // The stored tier is still Premium: the sweep finds it and reports the expiry as for anyone.
      expect(await app.subscriptionSweep.run()).toBeGreaterThanOrEqual(1);
      expect((await subscriptionAudits(target.user.id)).map((a) => [a.action, a.actorKind])).toEqual([
        ['premium', 'operator'],
        ['expire', 'system'],
      ]);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'records a Premium that expires while a grant waits before replacing it, and counts the new Premium from the time the grant holds the row',
    async () => {
      const target = await login(app, { bot });
      expect((await grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 1 })).status).toBe(200);
      clock.advance(DAY - 5_000);
      const res = await whileWaitingAdvance(target.user.id, 10_000, () =>
        grant(op, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 5 }),
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.subscription.expires_at).toBe(new Date(clock.now().getTime() + 5 * DAY).toISOString());
      expect((await subscriptionAudits(target.user.id)).map((a) => [a.code, a.action, a.actorKind])).toEqual([
        [AuditCodes.SUBSCRIPTION_GRANT, 'premium', 'operator'],
        [AuditCodes.SUBSCRIPTION_REVOKE, 'expire', 'system'],
        [AuditCodes.SUBSCRIPTION_GRANT, 'premium', 'operator'],
      ]);
      expect((await titles(target)).filter((t: string) => t.startsWith('Subscription'))).toEqual([
        'Subscription upgraded',
        'Subscription expired',
        'Subscription upgraded',
      ]);
    },
  );
});

describeApp('has_premium and chat slots follow the tier', () => {
  it('Basic cannot create a chat; Premium creates one (the second is 409); after revoke has_premium is false', async () => {
    const who = await login(app, { bot });
    const publicView = () => new Client(app.url, nextIp(), app.publicApiKey).get(`/v1/users/${who.user.id}`);
    expect((await publicView()).body.has_premium).toBe(false);
    expectError(await createChat(who), 403, 'ERR_CHAT_CREATE_FORBIDDEN');
    await grant(op, { user_id: who.user.id, tier: 'PREMIUM', duration_days: 1 });
    expect((await publicView()).body.has_premium).toBe(true);
    const created = await createChat(who);
    expect(created.status).toBe(200);
    expect(created.body.chat.owner_id).toBe(who.user.id);
    expectError(await createChat(who, 'Second'), 409, 'ERR_CHAT_SLOT_LIMIT');
    await revoke(op, { user_id: who.user.id });
    expect((await publicView()).body.has_premium).toBe(false);
    expectError(await createChat(who, 'Third'), 403, 'ERR_CHAT_CREATE_FORBIDDEN');
  });

  it('gives a Trial user the same slot as Premium', async () => {
    const who = await login(app, { bot });
    await grant(op, { user_id: who.user.id, tier: 'TRIAL' });
    expect((await createChat(who)).status).toBe(200);
    expectError(await createChat(who, 'Second'), 409, 'ERR_CHAT_SLOT_LIMIT');
  });
});

describeApp('the effective subscription before the downgrade sweep (fake clock)', () => {
  it('shows Basic in GET /v1/users/me, its subscription view and the bot view from the expiry on, the sweep not run', async () => {
    const who = await login(app, { bot });
    expect((await grant(op, { user_id: who.user.id, tier: 'PREMIUM', duration_days: 1 })).status).toBe(200);
    const me = async () => (await who.client.get('/v1/users/me')).body.user;
    const botView = async () => (await bot.get(`/v1/bot/users/${who.user.id}`)).body;
    // Read once before the expiry: the node keeps this profile, and must not serve it past the deadline.
    expect(await me()).toMatchObject({ subscription_tier: 2, subscription_granted_by: null });
    clock.advance(DAY - 1);
    expect((await me()).subscription_tier).toBe(2);
    expect((await botView()).subscription_tier).toBe(2);
    clock.advance(1);
    expect(await me()).toMatchObject({
      subscription_tier: 0,
      subscription_expires_at: null,
      subscription_granted_by: null,
    });
    expect((await who.client.get('/v1/users/me/subscription')).body).toMatchObject({ tier: 0, has_premium: false });
    expect((await botView()).subscription_tier).toBe(0);
    // The stored row still says Premium: nothing swept it.
    const [row] = await app.database.db.select().from(users).where(eq(users.id, who.user.id));
    expect(row?.subscriptionTier).toBe(2);
  });
});

describeApp('the automatic downgrade (sweep, fake clock)', () => {
  let sweepApp: TestApp;
  const sweepClock = new FakeClock(Date.now());
  let sweepOp: Client;
  beforeAll(async () => {
    sweepApp = await startApp({ clock: sweepClock });
    sweepOp = operator(sweepApp);
  });
  afterAll(async () => sweepApp?.close());

  it('downgrades expired Trial and Premium to Basic at their expiry, never Lifetime', async () => {
    const sweepBot = await createLoginBot(sweepApp);
    const [trial, premium, lifetime] = [
      await login(sweepApp, { bot: sweepBot }),
      await login(sweepApp, { bot: sweepBot }),
      await login(sweepApp, { bot: sweepBot }),
    ];
    await grant(sweepOp, { user_id: trial.user.id, tier: 'TRIAL' });
    await grant(sweepOp, { user_id: premium.user.id, tier: 'PREMIUM', duration_days: 1 });
    await grant(sweepOp, { user_id: lifetime.user.id, tier: 'LIFETIME' });
    const socket = await connectSocket(sweepApp.url, premium.client);
    const tier = async (who: LoggedIn) => (await who.client.get('/v1/users/me')).body.user.subscription_tier;

    sweepClock.advance(DAY - 1);
    expect(await sweepApp.subscriptionSweep.run()).toBe(0);
    expect(await tier(premium)).toBe(2);

    sweepClock.advance(1);
    expect(await sweepApp.subscriptionSweep.run()).toBe(1);
    expect((await premium.client.get('/v1/users/me')).body.user).toMatchObject({
      subscription_tier: 0,
      subscription_expires_at: null,
      subscription_granted_by: null,
    });
    const event = await socket.next('notification:new', (n) => n.title === 'Subscription expired');
    expect(event.body).toMatch(
      /^Your \*\*Premium\*\* subscription ended on \*\*.+ UTC\*\*\. Your account is now Basic\.$/,
    );
    expect(await tier(trial)).toBe(1);

    sweepClock.advance((Limits.TRIAL_DAYS - 1) * DAY);
    expect(await sweepApp.subscriptionSweep.run()).toBe(1);
    expect(await tier(trial)).toBe(0);
    expect((await trial.client.get('/v1/users/me/subscription')).body).toMatchObject({
      tier: 0,
      has_premium: false,
      trial_used: true,
    });
    expect(await titles(trial)).toContain('Subscription expired');

    expect(await tier(lifetime)).toBe(3);
    sweepClock.advance(Limits.SUBSCRIPTION_DAYS_MAX * DAY);
    expect(await sweepApp.subscriptionSweep.run()).toBe(0);
    // Sessions have expired by now: read the row.
    const [row] = await sweepApp.database.db.select().from(users).where(eq(users.id, lifetime.user.id));
    expect(row).toMatchObject({ subscriptionTier: 3, subscriptionExpiresAt: null });

    const audits = await sweepApp.database.db
      .select()
      .from(auditLog)
      .where(and(eq(auditLog.code, AuditCodes.SUBSCRIPTION_REVOKE), eq(auditLog.action, 'expire')));
    expect(audits.map((a) => [a.targetUserId, a.actorKind, (a.data as { tier: number }).tier]).sort()).toEqual(
      [
        [premium.user.id, 'system', 2],
        [trial.user.id, 'system', 1],
      ].sort(),
    );
  });

  it('tells the sweep’s expiry from a revoke in subscription_history: action expire, actor none', async () => {
    const sweepBot = await createLoginBot(sweepApp);
    const target = await login(sweepApp, { bot: sweepBot });
    await grant(sweepOp, { user_id: target.user.id, tier: 'PREMIUM', duration_days: 1, reason: 'first' });
    sweepClock.advance(DAY);
    expect(await sweepApp.subscriptionSweep.run()).toBeGreaterThanOrEqual(1);
    sweepClock.advance(1000);
    await grant(sweepOp, { user_id: target.user.id, tier: 'LIFETIME', reason: 'second' });
    sweepClock.advance(1000);
    expect((await revoke(sweepOp, { user_id: target.user.id, reason: 'abuse' })).status).toBe(200);
    // An Owner signed in now (a staff session lives a day) reads the full detail.
    const owner = await login(sweepApp, { bot: sweepBot });
    await setLevel(sweepApp, owner.user.id, 3);
    const view = await owner.client.get(`/v1/users/${target.user.id}`);
    expect(view.status).toBe(200);
    const history = view.body.subscription_history.map((e: Record<string, unknown>) => [
      e.action,
      e.tier,
      e.actor_user_id,
      e.reason,
    ]);
    expect(history).toEqual([
      ['revoke', 3, null, 'abuse'],
      ['grant', 3, null, 'second'],
      ['expire', 2, null, null],
      ['grant', 2, null, 'first'],
    ]);
  });

  it('goes past a user whose expiry cannot be written: the others of its batch are downgraded, audited and told in the same tick, the failure is logged with the user', async () => {
    const sweepBot = await createLoginBot(sweepApp);
    const [a, b, c] = [
      await login(sweepApp, { bot: sweepBot }),
      await login(sweepApp, { bot: sweepBot }),
      await login(sweepApp, { bot: sweepBot }),
    ];
    for (const [who, days] of [
      [a, 1],
      [b, 2],
      [c, 2],
    ] as const) {
      const res = await grant(sweepOp, { user_id: who.user.id, tier: 'PREMIUM', duration_days: days });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    await sweepApp.subscriptionSweep.run();
    const expiries = async (userId: number) =>
      (
        await sweepApp.database.db
          .select()
          .from(auditLog)
          .where(
            and(
              eq(auditLog.code, AuditCodes.SUBSCRIPTION_REVOKE),
              eq(auditLog.action, 'expire'),
              eq(auditLog.targetUserId, userId),
            ),
          )
      ).length;
    const tierOf = async (userId: number) =>
      (await sweepApp.database.db.select().from(users).where(eq(users.id, userId)))[0]?.subscriptionTier;
    // a's "Subscription expired" cannot be written: the batch of a, b and c fails as one.
    const lift = await failInserts(sweepApp, 'notifications', `new.user_id = ${a.user.id}`);
    try {
      sweepClock.advance(2 * DAY);
      const lines = await loggedTick('subscription-downgrade', () => sweepApp.subscriptionSweep.run());
      for (const who of [b, c]) {
        expect([await tierOf(who.user.id), await expiries(who.user.id)]).toEqual([0, 1]);
        expect(await titles(who)).toContain('Subscription expired');
      }
      // a's own transaction rolled back: nothing of its expiry is written.
      expect([await tierOf(a.user.id), await expiries(a.user.id)]).toEqual([2, 0]);
      expectOnePartFailed(lines, 'subscription-downgrade', { userId: a.user.id });
    } finally {
      await lift();
    }
    // The next tick writes it.
    expect(await sweepApp.subscriptionSweep.run()).toBe(1);
    expect([await tierOf(a.user.id), await expiries(a.user.id)]).toEqual([0, 1]);
  });

  it('takes each expired user exactly once when sweeps run at the same time (several nodes)', async () => {
    const sweepBot = await createLoginBot(sweepApp);
    const ids: number[] = [];
    for (let i = 0; i < 6; i++) {
      const who = await login(sweepApp, { bot: sweepBot });
      await grant(sweepOp, { user_id: who.user.id, tier: 'PREMIUM', duration_days: 2 });
      ids.push(who.user.id);
    }
    sweepClock.advance(2 * DAY);
    const counts = await Promise.all([
      sweepApp.subscriptionSweep.run(),
      sweepApp.subscriptionSweep.run(),
      sweepApp.subscriptionSweep.run(),
    ]);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(6);
    const expired = await sweepApp.database.db
      .select()
      .from(auditLog)
      .where(and(eq(auditLog.code, AuditCodes.SUBSCRIPTION_REVOKE), eq(auditLog.action, 'expire')));
    const mine = expired.map((a) => a.targetUserId).filter((id): id is number => id !== null && ids.includes(id));
    expect(mine.sort()).toEqual([...ids].sort());
  });
});
