import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, type Nodes, startNodes, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { createLoginBot, type LoggedIn, login, operator } from './support/flows.js';

/**
 * The session and profile caches (sessions.cache.ts, users.cache.ts) against the real app: every
 * write that a cached read depends on shows on the very next request, on every node. Cluster
 * mode runs two nodes over one PostgreSQL + Redis; embedded mode has one node, so A and B are it.
 * The clock is fake and stands still, so no entry ever reaches its TTL here: only invalidation can
 * make a change visible.
 */
const clock = new FakeClock(Date.now());
let nodes: Nodes;
let a: TestApp;
let b: TestApp;
let bot: Client;

beforeAll(async () => {
  nodes = await startNodes({ clock });
  ({ a, b } = nodes);
  bot = await createLoginBot(a);
});
afterAll(async () => {
  await nodes?.close();
});

/** GET /v1/users/me on both nodes, so both have the session and the profile cached. */
const meOnBoth = async (who: LoggedIn) => {
  const here = await who.client.get('/v1/users/me');
  const there = await who.client.on(b).get('/v1/users/me');
  expect([here.status, there.status]).toEqual([200, 200]);
  return [here.body.user, there.body.user];
};

/** Another login of the same platform identity, from a fresh client: one more session of the user. */
const loginAgain = (who: LoggedIn, username?: string) =>
  login(a, { bot, platformUserId: who.platformUserId, client: new Client(a.url, nextIp(), a.publicApiKey), username });

const statusOnBoth = async (client: Client) => [
  (await client.get('/v1/users/me')).status,
  (await client.on(b).get('/v1/users/me')).status,
];

describeApp('auth and profile caches: writes show on the next request on every node', () => {
  it('serves reads from the cache: a change written behind the stores’ back stays unseen until a real write', async () => {
    const who = await login(a, { bot });
    await meOnBoth(who);
    await a.database.db.execute(`update users set permission_level = 1 where id = ${who.user.id}` as never);
    const [staleA, staleB] = await meOnBoth(who);
    expect([staleA.permission_level, staleB.permission_level]).toEqual([0, 0]);
    // Any write through the stores drops the entries everywhere; the next reads see the row.
    expect((await who.client.post('/v1/users/me/update', { avatar_source: 'platform_a_2' })).status).toBe(200);
    const [freshA, freshB] = await meOnBoth(who);
    expect([freshA.permission_level, freshB.permission_level]).toEqual([1, 1]);
  });

  it('a platform ban answers 401 on the very next request on both nodes', async () => {
    const who = await login(a, { bot });
    await meOnBoth(who);
    const ban = await operator(a).post('/v1/admin/punishments/ban', { user_id: who.user.id, reason: 'cache' });
    expect(ban.status).toBe(200);
    expect(await statusOnBoth(who.client)).toEqual([401, 401]);
  });

  it('a timeout answers 403 ERR_TIMED_OUT at once on both nodes; its end is seen without a write, in /me too', async () => {
    const who = await login(a, { bot });
    await meOnBoth(who);
    const res = await operator(b).post('/v1/admin/punishments/timeout', { user_id: who.user.id, duration: 60 });
    expect(res.status).toBe(200);
    for (const c of [who.client, who.client.on(b)]) {
      const me = await c.get('/v1/users/me');
      expect([me.status, me.body.code]).toEqual([403, 'ERR_TIMED_OUT']);
    }
    clock.advance(61_000);
    const [beforeA, beforeB] = await meOnBoth(who);
    // The state that applies, though the stored one stays Timeout until the expiry sweep.
    expect([beforeA.state, beforeB.state]).toEqual([0, 0]);
    expect((await a.services.moderation.sweep()).restored).toBeGreaterThanOrEqual(1);
    const [afterA, afterB] = await meOnBoth(who);
    expect([afterA.state, afterB.state]).toEqual([0, 0]);
  });

  it('a level change shows on the next /me on the other node, and in its permission checks', async () => {
    const who = await login(a, { bot });
    const target = await login(a, { bot });
    await meOnBoth(who);
    const asAdminOnB = who.client.on(b);
    const rename = (name: string) => asAdminOnB.post(`/v1/admin/users/${target.user.id}/update`, { username: name });
    expect((await rename(`t${target.user.id}a`)).status).toBe(403);

    const promote = await operator(a).post(`/v1/admin/users/${who.user.id}/update`, { permission_level: 2 });
    expect(promote.status).toBe(200);
    expect((await asAdminOnB.get('/v1/users/me')).body.user.permission_level).toBe(2);
    expect((await rename(`t${target.user.id}b`)).status).toBe(200);

    const demote = await operator(a).post(`/v1/admin/users/${who.user.id}/update`, { permission_level: 0 });
    expect(demote.status).toBe(200);
    expect((await rename(`t${target.user.id}c`)).status).toBe(403);
    expect((await asAdminOnB.get('/v1/users/me')).body.user.permission_level).toBe(0);
  });

  it('a rename and an avatar change through /v1/users/me/update show on the next /me on the other node', async () => {
    const who = await login(a, { bot });
    await meOnBoth(who);
    const name = `renamed_${who.user.id}`;
    const res = await who.client.post('/v1/users/me/update', { username: name, avatar_source: 'platform_a_4' });
    expect([res.status, res.body.errors]).toEqual([200, null]);
    const [onA, onB] = await meOnBoth(who);
    for (const u of [onA, onB]) expect([u.username, u.avatar_source]).toEqual([name, 'platform_a_4']);
  });

  it('a rename by an admin shows on the next /me on the other node', async () => {
    const who = await login(a, { bot });
    await meOnBoth(who);
    const name = `admin_named_${who.user.id}`;
    expect((await operator(a).post(`/v1/admin/users/${who.user.id}/update`, { username: name })).status).toBe(200);
    const [onA, onB] = await meOnBoth(who);
    expect([onA.username, onB.username]).toEqual([name, name]);
  });

  it('logout on node A ends the cookie on node B at once', async () => {
    const who = await login(a, { bot });
    await meOnBoth(who);
    // The same cookie on B (the client forgets it when logout clears it).
    const onB = who.client.on(b);
    expect((await who.client.post('/v1/authentication/logout')).status).toBe(200);
    expect((await onB.get('/v1/users/me')).status).toBe(401);
  });

  it('destroying a session, and an eviction by a sixth login, end those cookies on the other node at once', async () => {
    const first = await login(a, { bot });
    const others: LoggedIn[] = [];
    for (let i = 0; i < 4; i++) others.push(await loginAgain(first));
    const [second, keeper] = others as [LoggedIn, LoggedIn];
    for (const s of [first, ...others]) await meOnBoth(s);

    const list = await keeper.client.get('/v1/users/me/sessions');
    const suffix = second.client.cookie?.slice(-6);
    expect(list.body.sessions.map((s: { token_suffix: string }) => s.token_suffix)).toContain(suffix);
    expect((await keeper.client.on(b).post(`/v1/users/me/sessions/${suffix}/destroy`)).status).toBe(200);
    expect(await statusOnBoth(second.client)).toEqual([401, 401]);

    // Five live sessions again, then a sixth login evicts the oldest (the first).
    await loginAgain(first);
    await loginAgain(first);
    expect(await statusOnBoth(first.client)).toEqual([401, 401]);
    expect(await statusOnBoth(keeper.client)).toEqual([200, 200]);
  });

  it('a subscription grant, and its expiry by the sweep, show on the next /me on the other node', async () => {
    const who = await login(a, { bot });
    await meOnBoth(who);
    const grant = await operator(a).post('/v1/admin/subscriptions/grant', {
      user_id: who.user.id,
      tier: 'PREMIUM',
      duration_days: 1,
    });
    expect(grant.status).toBe(200);
    const [grantedA, grantedB] = await meOnBoth(who);
    expect([grantedA.subscription_tier, grantedB.subscription_tier]).toEqual([2, 2]);
    clock.advance(24 * 3600_000 + 1_000);
    expect(await a.subscriptionSweep.run()).toBeGreaterThanOrEqual(1);
    const [afterA, afterB] = await meOnBoth(who);
    expect([afterA.subscription_tier, afterB.subscription_tier]).toEqual([0, 0]);
  });

  it('a new login of the same identity shows its platform profile on the next /me on the other node', async () => {
    const who = await login(a, { bot });
    await meOnBoth(who);
    await loginAgain(who, 'new-platform-name');
    const [, onB] = await meOnBoth(who);
    expect(onB.linked_platforms[0].platform_username).toBe('new-platform-name');
  });
});
