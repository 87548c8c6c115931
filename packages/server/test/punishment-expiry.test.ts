import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { countRows, expectOnePartFailed, failUpdates, loggedTick } from './support/faults.js';
import { type LoggedIn, login, operator } from './support/flows.js';

// An app of its own: the sweep's counts are those of this file's punishments alone.
let app: TestApp;
const clock = new FakeClock(Date.now());
beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => app?.close());

const sweep = (opts?: { batch?: number; maxBatches?: number }) => app.services.moderation.sweep(opts);
const timedOut = (users: LoggedIn[]) =>
  countRows(
    app,
    `select count(*) as n from users where state = 1 and id in (${users.map((u) => u.user.id).join(',')})`,
  );

describeApp('the punishment expiry sweep', () => {
  it('lifts and restores more than one batch a tick while batches come back full, up to maxBatches', async () => {
    const users: LoggedIn[] = [];
    for (let i = 0; i < 5; i++) users.push(await login(app));
    for (const [i, u] of users.entries()) {
      const res = await operator(app).post('/v1/admin/punishments/timeout', { user_id: u.user.id, duration: 60 + i });
      expect(res.status).toBe(200);
      expect((await u.client.get('/v1/users/me')).body.code).toBe('ERR_TIMED_OUT');
    }
    expect(await sweep({ batch: 2, maxBatches: 2 })).toEqual({ lifted: 0, restored: 0 });

    clock.advance(65_000);
    // Two full batches of two, then the tick ends; the oldest expiries go first.
    expect(await sweep({ batch: 2, maxBatches: 2 })).toEqual({ lifted: 4, restored: 4 });
    expect(await timedOut(users)).toBe(1);
    expect(await timedOut(users.slice(0, 4))).toBe(0);
    expect(await sweep({ batch: 2, maxBatches: 2 })).toEqual({ lifted: 1, restored: 1 });
    expect(await timedOut(users)).toBe(0);
    for (const u of users) {
      expect((await u.client.get('/v1/users/me')).body.user.state).toBe(0);
      expect((await u.client.get('/v1/users/me/punishments')).body[0]).toMatchObject({
        action_type: 'PLATFORM_TIMEOUT',
        is_lifted: true,
      });
    }
  });
});

describeApp('the punishment expiry sweep with a step that fails', () => {
  it('restores the users whose timeout ended when lifting their records fails, and logs the lift step', async () => {
    const [a, b] = [await login(app), await login(app)];
    for (const [who, duration] of [
      [a, 60],
      [b, 61],
    ] as const) {
      const res = await operator(app).post('/v1/admin/punishments/timeout', { user_id: who.user.id, duration });
      expect(res.status).toBe(200);
    }
    const unlifted = () =>
      countRows(
        app,
        `select count(*) as n from moderation_actions where is_lifted = false and user_id in (${a.user.id}, ${b.user.id})`,
      );
    // a's record cannot be written: the lift step's statement fails, for b's record too.
    const lift = await failUpdates(app, 'moderation_actions', `old.user_id = ${a.user.id}`);
    try {
      clock.advance(65_000);
      const lines = await loggedTick('punishment-expiry', () => sweep());
      expect(await timedOut([a, b])).toBe(0);
      expect(await unlifted()).toBe(2);
      expectOnePartFailed(lines, 'punishment-expiry', { step: 'lift' });
    } finally {
      await lift();
    }
    expect(await sweep()).toEqual({ lifted: 2, restored: 0 });
    expect(await unlifted()).toBe(0);
  });
});

describeApp('GET /v1/users/me/punishments at a punishment’s expiry', () => {
  it('reads a timeout lifted at its expiry from the deadline on, before the sweep as after it', async () => {
    const u = await login(app);
    const expiresAt = new Date(clock.now().getTime() + 60_000).toISOString();
    const res = await operator(app).post('/v1/admin/punishments/timeout', { user_id: u.user.id, duration: 60 });
    expect(res.status).toBe(200);
    const list = () => u.client.get('/v1/users/me/punishments');
    const to = (at: number) => clock.advance(at - clock.now().getTime());

    // Timed out until the deadline: the user's own routes answer so.
    to(Date.parse(expiresAt) - 1);
    expect((await list()).body.code).toBe('ERR_TIMED_OUT');
    to(Date.parse(expiresAt));
    expect((await list()).body[0]).toMatchObject({
      action_type: 'PLATFORM_TIMEOUT',
      is_lifted: true,
      lifted_at: expiresAt,
      expires_at: expiresAt,
    });

    // The sweep comes by later; the record keeps the time the timeout stopped applying.
    clock.advance(25_000);
    expect((await sweep()).lifted).toBeGreaterThanOrEqual(1);
    expect((await list()).body[0]).toMatchObject({ is_lifted: true, lifted_at: expiresAt, expires_at: expiresAt });
  });

  it('answers an unban after a temporary ban’s expiry, before the sweep, as one with nothing to lift: no audit entry, no notification, the record lifted at its expiry', async () => {
    const u = await login(app);
    const expiresAt = new Date(clock.now().getTime() + 60_000).toISOString();
    expect((await operator(app).post('/v1/admin/punishments/ban', { user_id: u.user.id, duration: 60 })).status).toBe(
      200,
    );
    clock.advance(60_000);
    const again = await login(app, { platformUserId: u.platformUserId });
    const notes = () => countRows(app, `select count(*) as n from notifications where user_id = ${u.user.id}`);
    const audits = () => countRows(app, `select count(*) as n from audit_log where target_user_id = ${u.user.id}`);
    const [n0, a0] = [await notes(), await audits()];
    expect((await operator(app).post('/v1/admin/punishments/unban', { user_id: u.user.id })).status).toBe(200);
    expect([await notes(), await audits()]).toEqual([n0, a0]);
    expect((await again.client.get('/v1/users/me/punishments')).body[0]).toMatchObject({
      action_type: 'PLATFORM_BAN',
      is_lifted: true,
      lifted_at: expiresAt,
    });
  });
});
