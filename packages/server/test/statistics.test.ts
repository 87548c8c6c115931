import { afterAll, beforeAll, expect, it } from 'vitest';
import { STATS_CACHE_MS } from '../src/modules/stats/stats.service.js';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { createBot, createLoginBot, login } from './support/flows.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

let app: TestApp;
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

const publicClient = () => new Client(app.url, nextIp(), app.publicApiKey);
const get = async (path: string) => (await publicClient().get(path)).body;
const HOUR = 3600 * 1000;

describeApp('public statistics (K)', () => {
  it('counts users and bots', async () => {
    const before = await get('/statistics/bots');
    await createBot(app, { type: 'verified' });
    const after = await get('/v1/statistics/bots');
    expect(after.verified).toBe(before.verified + 1);
    expect(after.total).toBe(after.official + after.verified + after.community);
    const usersBefore = await get('/statistics/users');
    await login(app);
    clock.advance(STATS_CACHE_MS);
    const usersAfter = await get('/statistics/users');
    expect(usersAfter.total).toBe(usersBefore.total + 1);
    expect(usersAfter.new_24h).toBe(usersBefore.new_24h + 1);
    expect(usersAfter.sessions_active).toBe(usersBefore.sessions_active + 1);
    const appStats = await get('/statistics/app');
    const botsNow = await get('/statistics/bots');
    expect(appStats).toMatchObject({ version: expect.any(String), users: usersAfter.total, bots: botsNow.total });
    expect(await get('/statistics/chats')).toEqual({ active_browsers: 0, viewers: 0, controllers: 0 });
    expect((await new Client(app.url).get('/statistics/users')).status).toBe(401);
  });

  it('keeps the user counts of /statistics/users and /statistics/app for 30 s on a node', async () => {
    clock.advance(STATS_CACHE_MS);
    const users = await get('/statistics/users');
    const appStats = await get('/statistics/app');
    await login(app);
    clock.advance(STATS_CACHE_MS - 1);
    expect(await get('/statistics/users')).toEqual(users);
    expect(await get('/statistics/app')).toMatchObject({ users: users.total, sessions_active: users.sessions_active });
    // Uptime is not a count: it moves on.
    expect((await get('/statistics/app')).uptime_seconds).toBeGreaterThan(appStats.uptime_seconds);
    clock.advance(1);
    expect((await get('/statistics/users')).total).toBe(users.total + 1);
    expect((await get('/statistics/app')).users).toBe(users.total + 1);
  });
});

describeApp('statistics of activity and of strangers', () => {
  it('counts a user in active_24h once a session of theirs is used, a day after the login, and moves last_activity_at', async () => {
    const bot = await createLoginBot(app);
    const me = await login(app, { bot });
    const atLogin = (await me.client.get('/v1/users/me')).body.user.last_activity_at as string;
    clock.advance(25 * HOUR);
    const before = await get('/statistics/users');
    expect((await me.client.get('/v1/users/me/subscription')).status).toBe(200);
    clock.advance(STATS_CACHE_MS);
    const after = await get('/statistics/users');
    expect(after.active_24h).toBe(before.active_24h + 1);
    const now = (await me.client.get('/v1/users/me')).body.user.last_activity_at as string;
    expect(Date.parse(now)).toBeGreaterThan(Date.parse(atLogin) + 24 * HOUR);
  });

  it('counts a socket connect with a live session as activity', async () => {
    const bot = await createLoginBot(app);
    const me = await login(app, { bot });
    clock.advance(25 * HOUR);
    const before = await get('/statistics/users');
    const socket = await connectSocket(app.url, me.client);
    socket.disconnect();
    clock.advance(STATS_CACHE_MS);
    expect((await get('/statistics/users')).active_24h).toBe(before.active_24h + 1);
  });

  it('does not count anonymous strangers as users; their sessions count in sessions_active', async () => {
    clock.advance(STATS_CACHE_MS);
    const before = await get('/statistics/users');
    const appBefore = await get('/statistics/app');
    for (let i = 0; i < 3; i++) {
      expect((await publicClient().post('/v1/portal/stranger', {})).status).toBe(200);
    }
    clock.advance(STATS_CACHE_MS);
    const after = await get('/statistics/users');
    expect(after).toEqual({ ...before, sessions_active: before.sessions_active + 3 });
    expect((await get('/statistics/app')).users).toBe(appBefore.users);
  });
});
