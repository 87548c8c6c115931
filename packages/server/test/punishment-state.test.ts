import { AuditCodes } from '@parlor/protocol';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { STATS_CACHE_MS } from '../src/modules/stats/stats.service.js';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { join, member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows } from './support/faults.js';
import { login, operator } from './support/flows.js';
import { hold, lockWaiters } from './support/pg-locks.js';
import { closeAllSockets } from './support/sockets.js';

// An app of its own: the sweep's counts are those of this file's punishments alone.
let app: TestApp;
let sql: postgres.Sql;
const clock = new FakeClock(Date.now());
beforeAll(async () => {
  app = await startApp({ clock });
  if (app.config.databaseUrl) sql = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await sql?.end({ timeout: 1 });
  await app?.close();
});

const DAY_MS = 86_400_000;
const sweep = () => app.services.moderation.sweep();

/** Ends every timed punishment of the tests before (30 days at most) so the sweep counts only this test's. */
async function freshClock() {
  clock.advance(31 * DAY_MS);
  await sweep();
}

/** The code a login request for the identity is refused with (null: it is not refused). */
async function loginRefusal(platformUserId: string): Promise<string | null> {
  const res = await new Client(app.url, nextIp(), app.publicApiKey).post('/v1/authentication/request', {
    platform: 'platform_a',
    platform_user_id: platformUserId,
  });
  if (res.status === 200) return null;
  expect(res.status).toBe(403);
  return res.body.code as string;
}

/** The users row's state and its expiry (ms since the epoch, null: none), as stored. */
async function stored(userId: number): Promise<{ state: number; expires: number | null }> {
  const res = (await app.database.db.execute(
    `select state, state_expires_at as expires from users where id = ${userId}` as never,
  )) as unknown as { rows: { state: number; expires: unknown }[] } | { state: number; expires: unknown }[];
  const row = ('rows' in res ? res.rows : res)[0];
  if (!row) throw new Error(`no user ${userId}`);
  return { state: Number(row.state), expires: row.expires === null ? null : new Date(String(row.expires)).getTime() };
}

/** The state stored to follow the current one at its end (then_state, its end: ms, null none). */
async function followOn(userId: number): Promise<{ state: number; expires: number | null }> {
  const res = (await app.database.db.execute(
    `select then_state as state, then_state_expires_at as expires from users where id = ${userId}` as never,
  )) as unknown as { rows: { state: number; expires: unknown }[] } | { state: number; expires: unknown }[];
  const row = ('rows' in res ? res.rows : res)[0];
  if (!row) throw new Error(`no user ${userId}`);
  return { state: Number(row.state), expires: row.expires === null ? null : new Date(String(row.expires)).getTime() };
}

/** Moves the clock to `at` (ms since the epoch). */
const to = (at: number) => clock.advance(at - clock.now().getTime());

/** Audit entries of these codes about the user. */
const audits = (userId: number, codes: number[]) =>
  countRows(
    app,
    `select count(*) as n from audit_log where target_user_id = ${userId} and code in (${codes.join(',')})`,
  );

/** What a login attempt of this identity answers at its first step (spec 5). */
const loginRequest = (platformUserId: string) =>
  new Client(app.url, nextIp(), app.publicApiKey).post('/v1/authentication/request', {
    platform: 'platform_a',
    platform_user_id: platformUserId,
  });

const punish = async (kind: 'ban' | 'timeout' | 'unban', userId: number, duration?: number) => {
  const res = await operator(app).post(`/v1/admin/punishments/${kind}`, { user_id: userId, duration });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
};

describeApp('the platform state follows the active punishment records (spec 3)', () => {
  it("a chat owner's 60 s timeout of a banned member does not lift the ban, before or after the sweep", async () => {
    await freshClock();
    const owner = await member(app);
    const grant = await operator(app).post('/v1/admin/subscriptions/grant', { user_id: owner.user.id, tier: 'TRIAL' });
    expect(grant.status).toBe(200);
    const chat = await owner.client.post('/v1/portal/chats/create', { name: 'Hideout', type: 'public' });
    expect(chat.status).toBe(200);
    const chatId: number = chat.body.chat.id;
    const target = await member(app);
    expect((await join(target, { chat_id: chatId })).ok).toBe(true);
    await punish('ban', target.user.id);

    // Answered and recorded as before; the ban holds.
    const timeout = await owner.client.post(`/v1/portal/chats/${chatId}/timeout`, {
      user_id: target.user.id,
      duration: 60,
    });
    expect(timeout.status).toBe(200);
    expect(timeout.body).toEqual({ ok: true });
    expect(await stored(target.user.id)).toEqual({ state: 2, expires: null });

    clock.advance(61_000);
    expect((await loginRequest(target.platformUserId)).body.code).toBe('ERR_BANNED');
    // The timeout's record is lifted; nobody is restored.
    expect(await sweep()).toEqual({ lifted: 1, restored: 0 });
    expect(await stored(target.user.id)).toEqual({ state: 2, expires: null });
    const refused = await loginRequest(target.platformUserId);
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('ERR_BANNED');
  });

  it('a shorter timeout or ban never shortens a longer one', async () => {
    await freshClock();
    const timedOut = await login(app);
    const first = await punish('timeout', timedOut.user.id, 3600);
    await punish('timeout', timedOut.user.id, 60);
    expect(await stored(timedOut.user.id)).toEqual({ state: 1, expires: Date.parse(first.punishment.expires_at) });

    const banned = await login(app);
    await punish('ban', banned.user.id);
    await punish('ban', banned.user.id, 60);
    expect(await stored(banned.user.id)).toEqual({ state: 2, expires: null });

    clock.advance(61_000);
    expect(await sweep()).toEqual({ lifted: 2, restored: 0 });
    expect((await timedOut.client.get('/v1/users/me')).body.code).toBe('ERR_TIMED_OUT');
    expect((await loginRequest(banned.platformUserId)).body.code).toBe('ERR_BANNED');

    clock.advance(3600_000 - 61_000);
    expect((await timedOut.client.get('/v1/users/me')).status).toBe(200);
    expect(await sweep()).toEqual({ lifted: 1, restored: 1 });
    expect(await stored(timedOut.user.id)).toEqual({ state: 0, expires: null });
    expect(await stored(banned.user.id)).toEqual({ state: 2, expires: null });
  });

  it('a timeout that outlasts a temporary ban applies once the ban ends', async () => {
    await freshClock();
    const target = await login(app);
    const ban = await punish('ban', target.user.id, 60);
    const timeout = await punish('timeout', target.user.id, 3600);
    expect(await stored(target.user.id)).toEqual({ state: 2, expires: Date.parse(ban.punishment.expires_at) });

    clock.advance(61_000);
    // Before the sweep: the ban is over, the stored follow-on timeout applies at once (a timed-out
    // user cannot log in, so the login request answers what a session would).
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_TIMED_OUT');
    const admin = await member(app, { level: 2 });
    expect((await admin.client.get(`/v1/users/${target.user.id}`)).body.state).toBe(1);
    expect(await sweep()).toEqual({ lifted: 1, restored: 0 });
    expect(await stored(target.user.id)).toEqual({ state: 1, expires: Date.parse(timeout.punishment.expires_at) });
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_TIMED_OUT');
    // The timeout's end, before the sweep again: Active.
    clock.advance(3600_000);
    const back = await login(app, { platformUserId: target.platformUserId });
    expect((await back.client.get('/v1/users/me')).body.user.state).toBe(0);
  });

  it('/statistics/users counts bans in force: a temporary ban stops counting at its end, before the sweep', async () => {
    await freshClock();
    const banned = async () => {
      clock.advance(STATS_CACHE_MS);
      return (await new Client(app.url, nextIp(), app.publicApiKey).get('/statistics/users')).body.banned as number;
    };
    const before = await banned();
    const target = await login(app);
    await punish('ban', target.user.id, 3600);
    expect(await banned()).toBe(before + 1);
    clock.advance(3600_000);
    expect(await banned()).toBe(before);
    expect(await stored(target.user.id)).toMatchObject({ state: 2 });
  });

  it('an unban keeps a running timeout until its end', async () => {
    await freshClock();
    const target = await login(app);
    const timeout = await punish('timeout', target.user.id, 600);
    await punish('ban', target.user.id);
    expect(await stored(target.user.id)).toEqual({ state: 2, expires: null });
    await punish('unban', target.user.id);
    expect(await stored(target.user.id)).toEqual({ state: 1, expires: Date.parse(timeout.punishment.expires_at) });

    expect(await loginRefusal(target.platformUserId)).toBe('ERR_TIMED_OUT');
    clock.advance(600_000);
    expect(await sweep()).toEqual({ lifted: 1, restored: 1 });
    expect(await stored(target.user.id)).toEqual({ state: 0, expires: null });
    const back = await login(app, { platformUserId: target.platformUserId });
    expect((await back.client.get('/v1/users/me')).body.user.state).toBe(0);
  });

  it('the sweep restores a plain timeout to Active', async () => {
    await freshClock();
    const target = await login(app);
    await punish('timeout', target.user.id, 60);
    expect(await sweep()).toEqual({ lifted: 0, restored: 0 });
    expect(await stored(target.user.id)).toMatchObject({ state: 1 });
    clock.advance(60_000);
    expect(await sweep()).toEqual({ lifted: 1, restored: 1 });
    expect(await stored(target.user.id)).toEqual({ state: 0, expires: null });
    expect((await target.client.get('/v1/users/me')).body.user.state).toBe(0);
  });

  it('a 60 s ban, then a 120 s timeout: Banned to the ban’s last millisecond, Timed out from its end to the timeout’s, then Active', async () => {
    await freshClock();
    const target = await login(app);
    const t0 = clock.now().getTime();
    await punish('ban', target.user.id, 60);
    await punish('timeout', target.user.id, 120);
    expect(await stored(target.user.id)).toEqual({ state: 2, expires: t0 + 60_000 });
    expect(await followOn(target.user.id)).toEqual({ state: 1, expires: t0 + 120_000 });
    to(t0 + 59_999);
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_BANNED');
    to(t0 + 60_000);
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_TIMED_OUT');
    expect(await sweep()).toEqual({ lifted: 1, restored: 0 });
    expect(await stored(target.user.id)).toEqual({ state: 1, expires: t0 + 120_000 });
    expect(await followOn(target.user.id)).toEqual({ state: 0, expires: null });
    to(t0 + 119_999);
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_TIMED_OUT');
    to(t0 + 120_000);
    expect(await loginRefusal(target.platformUserId)).toBe(null);
    expect(await sweep()).toEqual({ lifted: 1, restored: 1 });
    expect(await stored(target.user.id)).toEqual({ state: 0, expires: null });
  });

  it('a 60 s ban during a 120 s timeout: Banned, then timed out again from the ban’s end to the timeout’s', async () => {
    await freshClock();
    const target = await login(app);
    const t0 = clock.now().getTime();
    await punish('timeout', target.user.id, 120);
    clock.advance(10_000);
    await punish('ban', target.user.id, 60);
    expect(await stored(target.user.id)).toEqual({ state: 2, expires: t0 + 70_000 });
    expect(await followOn(target.user.id)).toEqual({ state: 1, expires: t0 + 120_000 });
    to(t0 + 69_999);
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_BANNED');
    to(t0 + 70_000);
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_TIMED_OUT');
    to(t0 + 119_999);
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_TIMED_OUT');
    to(t0 + 120_000);
    expect(await loginRefusal(target.platformUserId)).toBe(null);
  });

  it('a timeout that ends within a temporary ban leaves nothing to follow it: Banned to its end, then Active', async () => {
    await freshClock();
    const target = await login(app);
    const t0 = clock.now().getTime();
    await punish('ban', target.user.id, 600);
    await punish('timeout', target.user.id, 60);
    expect(await stored(target.user.id)).toEqual({ state: 2, expires: t0 + 600_000 });
    expect(await followOn(target.user.id)).toEqual({ state: 0, expires: null });
    to(t0 + 60_000);
    expect(await sweep()).toEqual({ lifted: 1, restored: 0 });
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_BANNED');
    to(t0 + 599_999);
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_BANNED');
    to(t0 + 600_000);
    expect(await loginRefusal(target.platformUserId)).toBe(null);
  });

  it('an unban during a temporary ban with a longer timeout to follow: timed out until the timeout’s end', async () => {
    await freshClock();
    const target = await login(app);
    const t0 = clock.now().getTime();
    await punish('ban', target.user.id, 60);
    await punish('timeout', target.user.id, 120);
    await punish('unban', target.user.id);
    expect(await stored(target.user.id)).toEqual({ state: 1, expires: t0 + 120_000 });
    expect(await followOn(target.user.id)).toEqual({ state: 0, expires: null });
    expect(await loginRefusal(target.platformUserId)).toBe('ERR_TIMED_OUT');
    to(t0 + 120_000);
    expect(await loginRefusal(target.platformUserId)).toBe(null);
  });

  // PGlite runs one transaction at a time, so nothing interleaves there; on PostgreSQL the tests
  // below hold the user row as a punishment on another node does and wait on pg_stat_activity.
  it.skipIf(MODE === 'embedded')(
    'bans, timeouts and a chat timeout queued on the user row give the longest of each, one audit entry each (PostgreSQL)',
    async () => {
      const owner = await member(app);
      const grant = await operator(app).post('/v1/admin/subscriptions/grant', {
        user_id: owner.user.id,
        tier: 'TRIAL',
      });
      expect(grant.status).toBe(200);
      const chat = await owner.client.post('/v1/portal/chats/create', { name: 'Queue', type: 'public' });
      const chatId: number = chat.body.chat.id;
      const target = await member(app);
      expect((await join(target, { chat_id: chatId })).ok).toBe(true);
      const t0 = clock.now().getTime();
      const held = hold(sql, (tx) => tx`select id from users where id = ${target.user.id} for update`);
      await held.ready;
      const admin = (kind: string, duration: number) =>
        operator(app).post(`/v1/admin/punishments/${kind}`, { user_id: target.user.id, duration });
      const answers = Promise.all([
        admin('ban', 600),
        admin('timeout', 1200),
        admin('ban', 601),
        admin('timeout', 1201),
        owner.client.post(`/v1/portal/chats/${chatId}/timeout`, { user_id: target.user.id, duration: 60 }),
      ]);
      // All five wait: on the user row, or on the chat row a ban holds while it waits for the user's.
      await lockWaiters(sql, 5);
      await held.end();
      for (const res of await answers) expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(await stored(target.user.id)).toEqual({ state: 2, expires: t0 + 601_000 });
      expect(await followOn(target.user.id)).toEqual({ state: 1, expires: t0 + 1_201_000 });
      expect(await audits(target.user.id, [AuditCodes.PUNISH_BAN, AuditCodes.PUNISH_TIMEOUT])).toBe(5);

      // Two unbans queued on the row: the first lifts and records, the second finds nothing.
      const again = hold(sql, (tx) => tx`select id from users where id = ${target.user.id} for update`);
      await again.ready;
      const unban = () => operator(app).post('/v1/admin/punishments/unban', { user_id: target.user.id });
      const unbans = Promise.all([unban(), unban()]);
      await lockWaiters(sql, 2);
      await again.end();
      for (const res of await unbans) expect(res.status).toBe(200);
      expect(await audits(target.user.id, [AuditCodes.PUNISH_UNBAN])).toBe(1);
      expect(await stored(target.user.id)).toEqual({ state: 1, expires: t0 + 1_201_000 });
    },
  );

  it.skipIf(MODE === 'embedded')(
    'the sweep, while an unban waits for the user row, lifts the expired ban; the unban then lifts the other (PostgreSQL)',
    async () => {
      await freshClock();
      const target = await login(app);
      const t0 = clock.now().getTime();
      await punish('ban', target.user.id, 60);
      await punish('ban', target.user.id, 120);
      to(t0 + 60_000);
      const held = hold(sql, (tx) => tx`select id from users where id = ${target.user.id} for update`);
      await held.ready;
      const unban = operator(app).post('/v1/admin/punishments/unban', { user_id: target.user.id });
      await lockWaiters(sql, 1);
      // The sweep waits for no row another transaction holds (SKIP LOCKED).
      expect(await sweep()).toEqual({ lifted: 1, restored: 0 });
      await held.end();
      expect((await unban).status).toBe(200);
      expect(await audits(target.user.id, [AuditCodes.PUNISH_UNBAN])).toBe(1);
      expect(await stored(target.user.id)).toEqual({ state: 0, expires: null });
      expect(await sweep()).toEqual({ lifted: 0, restored: 0 });
    },
  );

  // PGlite runs one transaction at a time, so nothing interleaves there; on PostgreSQL the test
  // holds the user row as a ban on another node does and waits on pg_stat_activity.
  it.skipIf(MODE === 'embedded')(
    'a timeout racing a ban that another node has not yet committed leaves the user Banned (PostgreSQL)',
    async () => {
      const target = await login(app);
      // The ban as the ban route writes it: the user row first, then its record and the state.
      const ban = hold(sql, async (tx) => {
        await tx`select id from users where id = ${target.user.id} for update`;
        await tx`insert into moderation_actions (user_id, action_type, created_at)
               values (${target.user.id}, 'PLATFORM_BAN', now())`;
        await tx`update users set state = 2, state_expires_at = null where id = ${target.user.id}`;
      });
      await ban.ready;
      const timeout = operator(app).post('/v1/admin/punishments/timeout', { user_id: target.user.id, duration: 60 });
      await lockWaiters(sql, 1);
      await ban.end();
      expect((await timeout).status).toBe(200);
      expect(await stored(target.user.id)).toEqual({ state: 2, expires: null });
    },
  );
});
