import { Limits } from '@parlor/protocol';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { countRows, failInserts } from './support/faults.js';
import { createBot, type LoggedIn, login, operator, setLevel } from './support/flows.js';

let app: TestApp;
/** The app's clock: the embedded store's limit windows run on it (Redis's on real time). */
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => app?.close());

const publicClient = () => new Client(app.url, nextIp(), app.publicApiKey);

describeApp('bot registration and authentication', () => {
  it('shows the key once, stores only its hash, and authenticates with it', async () => {
    const { id, apiKey, client } = await createBot(app, { name: 'Greeter', type: 'verified', rate_limit_per_hour: 50 });
    expect(apiKey).toMatch(/^pbk_[A-Za-z0-9_-]{43}$/);
    const stored = (await app.database.db.execute(`select key_hash from bots where id = ${id}` as never)) as unknown as
      | { rows: { key_hash: string }[] }
      | { key_hash: string }[];
    const rows = 'rows' in stored ? stored.rows : stored;
    expect(rows[0]?.key_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(rows[0]?.key_hash).not.toContain(apiKey.slice(4));
    const me = await client.get('/v1/bot/me');
    expect(me.status).toBe(200);
    expect(me.body).toEqual({
      id,
      name: 'Greeter',
      avatar_url: null,
      type: 2,
      rate_limit_per_hour: 50,
      owner_user_id: null,
      stats: { users: null, latency_ms: null, reported_at: null },
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
  });

  it('refuses a wrong key, the public key, and no key with 401 ERR_INVALID_API_KEY', async () => {
    for (const key of [`pbk_${'a'.repeat(43)}`, app.publicApiKey, null]) {
      const res = await new Client(app.url, nextIp(), key).get('/v1/bot/me');
      expect(res.status).toBe(401);
      expect(res.body.code).toBe('ERR_INVALID_API_KEY');
    }
  });

  it('refuses bot creation without the operator token or an Admin session', async () => {
    const user = await login(app);
    expect((await user.client.post('/v1/admin/bots/create', { name: 'x' })).status).toBe(403);
    const wrong = new Client(app.url, nextIp(), null, { authorization: 'Bearer wrong-token' });
    expect((await wrong.post('/v1/admin/bots/create', { name: 'x' })).status).toBe(401);
    await setLevel(app, user.user.id, 2);
    expect((await user.client.post('/v1/admin/bots/create', { name: 'x' })).status).toBe(200);
  });
});

describeApp('bot rate limits', () => {
  it('allows rate_limit_per_hour requests and answers 429 with retry_after to the next', async () => {
    const { client } = await createBot(app, { rate_limit_per_hour: 3 });
    for (let i = 0; i < 3; i++) expect((await client.get('/v1/bot/me')).status).toBe(200);
    const res = await client.get('/v1/bot/me');
    expect(res.status).toBe(429);
    expect(res.body.code).toBe('ERR_RATE_LIMITED');
    expect(res.body.retry_after).toBeGreaterThan(60);
    expect(res.headers.get('retry-after')).toBe(String(res.body.retry_after));
  });

  it('compares the hour’s requests with rate_limit_per_hour as it is now: a lowered limit counts those already made', async () => {
    const { id, client } = await createBot(app, { rate_limit_per_hour: 5 });
    for (let i = 0; i < 3; i++) expect((await client.get('/v1/bot/me')).status).toBe(200);
    const setLimit = async (limit: number) =>
      expect((await operator(app).post(`/v1/admin/bots/${id}/update`, { rate_limit_per_hour: limit })).status).toBe(
        200,
      );
    await setLimit(2);
    const refused = await client.get('/v1/bot/me');
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('ERR_RATE_LIMITED');
    expect(refused.body.retry_after).toBeGreaterThan(60);
    // Raised again: the hour has 4 requests counted (the refused one too), so 2 more of 6 pass.
    await setLimit(6);
    const after = [];
    for (let i = 0; i < 3; i++) after.push((await client.get('/v1/bot/me')).status);
    expect(after).toEqual([200, 200, 429]);
  });

  it(`allows ${Limits.BOT_REQUESTS_PER_MINUTE} requests a minute per key and refuses the next`, async () => {
    const { client } = await createBot(app);
    const results = [];
    for (let i = 0; i < Limits.BOT_REQUESTS_PER_MINUTE; i += 50) {
      const batch = await Promise.all(Array.from({ length: 50 }, () => client.get('/v1/bot/me')));
      results.push(...batch.map((r) => r.status));
    }
    expect(results.filter((s) => s === 200)).toHaveLength(Limits.BOT_REQUESTS_PER_MINUTE);
    const next = await client.get('/v1/bot/me');
    expect(next.status).toBe(429);
    expect(next.body.retry_after).toBeLessThanOrEqual(60);
    // Another bot is not affected.
    expect((await (await createBot(app)).client.get('/v1/bot/me')).status).toBe(200);
  });

  it('counts the requests the minute limit refuses in the hour too, and answers the longer wait when both are over', async () => {
    const { client } = await createBot(app, { rate_limit_per_hour: Limits.BOT_REQUESTS_PER_MINUTE + 2 });
    const results = [];
    for (let i = 0; i < Limits.BOT_REQUESTS_PER_MINUTE; i += 50) {
      const batch = await Promise.all(Array.from({ length: 50 }, () => client.get('/v1/bot/me')));
      results.push(...batch.map((r) => r.status));
    }
    expect(results.filter((s) => s === 200)).toHaveLength(Limits.BOT_REQUESTS_PER_MINUTE);
    // Refused by the minute only: the hour has counted 601, then 602, of 602.
    for (let i = 0; i < 2; i += 1) {
      const minuteOnly = await client.get('/v1/bot/me');
      expect([minuteOnly.status, minuteOnly.body.code]).toEqual([429, 'ERR_RATE_LIMITED']);
      expect(minuteOnly.body.retry_after).toBeLessThanOrEqual(60);
    }
    // The hour counted both refused requests: this one, its 603rd, is over it too, so the wait is the hour's.
    const both = await client.get('/v1/bot/me');
    expect([both.status, both.body.code]).toEqual([429, 'ERR_RATE_LIMITED']);
    expect(both.body.retry_after).toBeGreaterThan(60);
    expect(both.headers.get('retry-after')).toBe(String(both.body.retry_after));
    if (MODE === 'embedded') {
      // A new minute (the embedded store's windows run on the app's clock): the hour is still over.
      clock.advance(61_000);
      const nextMinute = await client.get('/v1/bot/me');
      expect(nextMinute.status).toBe(429);
      expect(nextMinute.body.retry_after).toBeGreaterThan(60);
    }
  });
});

describeApp('POST /v1/admin/bots/create atomicity', () => {
  it('registers no bot when its audit entry cannot be written (the key was never shown)', async () => {
    const name = `Unaudited ${Date.now()}`;
    const lift = await failInserts(app, 'audit_log', "new.action = 'create' and new.target_bot_id is not null");
    try {
      const res = await operator(app).post('/v1/admin/bots/create', { name });
      expect(res.status).toBe(500);
      expect(res.body).toEqual({ code: 'ERR_INTERNAL', message: expect.any(String) });
    } finally {
      await lift();
    }
    expect(await countRows(app, `select count(*) as n from bots where name = '${name}'`)).toBe(0);
    const again = await operator(app).post('/v1/admin/bots/create', { name });
    expect(again.status).toBe(200);
    expect(await countRows(app, `select count(*) as n from bots where name = '${name}'`)).toBe(1);
  });
});

describeApp('POST /v1/admin/bots/create and …/{id}/update: the owner must be a registered account', () => {
  // An anonymous stranger is refused as a guild sponsor is: the stranger sweep deletes the account
  // without releasing its bots, so the bot would keep the id of no account.
  it('answers 404 ERR_USER_NOT_FOUND to an anonymous stranger as owner, registering, changing and recording nothing', async () => {
    const made = await publicClient().post('/v1/portal/stranger', {});
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    const strangerId: number = made.body.user.id;
    const op = operator(app);
    const name = `Stranger-owned ${Date.now()}`;
    const created = await op.post('/v1/admin/bots/create', { name, owner_user_id: strangerId });
    expect(created.status, JSON.stringify(created.body)).toBe(404);
    expect(created.body.code).toBe('ERR_USER_NOT_FOUND');
    expect(await countRows(app, `select count(*) as n from bots where name = '${name}'`)).toBe(0);

    const target = await createBot(app, { name: 'Owned by nobody' });
    const updated = await op.post(`/v1/admin/bots/${target.id}/update`, { name: 'Renamed', owner_user_id: strangerId });
    expect(updated.status, JSON.stringify(updated.body)).toBe(404);
    expect(updated.body.code).toBe('ERR_USER_NOT_FOUND');
    expect((await target.client.get('/v1/bot/me')).body).toMatchObject({
      name: 'Owned by nobody',
      owner_user_id: null,
    });
    expect(
      await countRows(
        app,
        `select count(*) as n from audit_log where target_bot_id = ${target.id} and action = 'update'`,
      ),
    ).toBe(0);

    // A registered account is accepted by both.
    const owner = await login(app);
    const ownedCreate = await op.post('/v1/admin/bots/create', { name: `${name} 2`, owner_user_id: owner.user.id });
    expect(ownedCreate.status, JSON.stringify(ownedCreate.body)).toBe(200);
    const ownedUpdate = await op.post(`/v1/admin/bots/${target.id}/update`, { owner_user_id: owner.user.id });
    expect(ownedUpdate.status, JSON.stringify(ownedUpdate.body)).toBe(200);
    expect(ownedUpdate.body.owner_user_id).toBe(owner.user.id);
  });
});

/**
 * `who` at `level` as its session reads it, its stored level then changed to `stored` behind this
 * node's session cache (as by a commit on another node whose invalidation is still on its way; the
 * app's clock stands still, so the cached session does not expire): docs/api.md, "Levels as they
 * are at the commit".
 */
async function changedBehindCache(who: LoggedIn, level: number, stored: number): Promise<LoggedIn> {
  await setLevel(app, who.user.id, level);
  expect((await who.client.get('/v1/users/me')).body.user.permission_level).toBe(level);
  await app.database.db.execute(`update users set permission_level = ${stored} where id = ${who.user.id}` as never);
  expect((await who.client.get('/v1/users/me')).body.user.permission_level).toBe(level);
  return who;
}

const botAudits = (botId: number) =>
  countRows(app, `select count(*) as n from audit_log where target_bot_id = ${botId}`);

describeApp('admin bot routes decide on the caller\u2019s level as stored', () => {
  it('answers 403 ERR_FORBIDDEN to an Admin demoted to User, who registers no bot (with or without an owner)', async () => {
    const before = await login(app); // an owner whose id is below the caller's
    const actor = await changedBehindCache(await login(app), 2, 0);
    const after = await login(app); // and one above it
    const name = `Stale admin bot ${Date.now()}`;
    for (const owner of [undefined, before.user.id, after.user.id, actor.user.id]) {
      const res = await actor.client.post('/v1/admin/bots/create', { name, owner_user_id: owner });
      expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    }
    expect(await countRows(app, `select count(*) as n from bots where name = '${name}'`)).toBe(0);
  });

  it('answers 403 ERR_FORBIDDEN to an Owner demoted to Admin, who registers no official bot', async () => {
    const actor = await changedBehindCache(await login(app), 3, 2);
    const name = `Stale owner bot ${Date.now()}`;
    const res = await actor.client.post('/v1/admin/bots/create', { name, type: 'official' });
    expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect(await countRows(app, `select count(*) as n from bots where name = '${name}'`)).toBe(0);
    // Its level as stored still registers other bots.
    expect((await actor.client.post('/v1/admin/bots/create', { name })).status).toBe(200);
  });

  it('answers 403 ERR_FORBIDDEN to an Admin demoted to User, who changes and deletes no bot', async () => {
    const owner = await login(app);
    const bot = await createBot(app, { name: 'Victim bot', rate_limit_per_hour: 50 });
    const actor = await changedBehindCache(await login(app), 2, 0);
    for (const body of [{ rate_limit_per_hour: 1 }, { name: 'Taken over', owner_user_id: owner.user.id }]) {
      const res = await actor.client.post(`/v1/admin/bots/${bot.id}/update`, body);
      expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    }
    const del = await actor.client.post(`/v1/admin/bots/${bot.id}/delete`, {});
    expect([del.status, del.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect((await bot.client.get('/v1/bot/me')).body).toMatchObject({
      name: 'Victim bot',
      rate_limit_per_hour: 50,
      owner_user_id: null,
    });
    expect(await botAudits(bot.id)).toBe(1); // its creation only
  });

  it('lets an Owner demoted to Admin change and delete a community bot, and not an official one', async () => {
    const official = await createBot(app, { name: 'Official victim', type: 'official' });
    const community = await createBot(app, { name: 'Community bot' });
    const actor = await changedBehindCache(await login(app), 3, 2);
    const upd = await actor.client.post(`/v1/admin/bots/${official.id}/update`, { rate_limit_per_hour: 1 });
    const del = await actor.client.post(`/v1/admin/bots/${official.id}/delete`, {});
    const promote = await actor.client.post(`/v1/admin/bots/${community.id}/update`, { type: 'official' });
    expect([upd.status, del.status, promote.status]).toEqual([403, 403, 403]);
    expect((await official.client.get('/v1/bot/me')).status).toBe(200);
    expect(await botAudits(official.id)).toBe(1);
    expect((await actor.client.post(`/v1/admin/bots/${community.id}/update`, { rate_limit_per_hour: 7 })).status).toBe(
      200,
    );
    expect((await actor.client.post(`/v1/admin/bots/${community.id}/delete`, {})).status).toBe(200);
  });
});

describeApp('bot names', () => {
  it(`takes 1-${Limits.BOT_NAME_MAX} characters, not blank: 400 ERR_VALIDATION from the admin create, the admin update and the bot's own update, changing nothing`, async () => {
    const op = operator(app);
    const total = async () => (await publicClient().get('/v1/statistics/bots')).body.total;
    const before = await total();
    for (const name of ['   ', '\n\t', '', 'b'.repeat(Limits.BOT_NAME_MAX + 1)]) {
      const created = await op.post('/v1/admin/bots/create', { name });
      expect(created.status, JSON.stringify(created.body)).toBe(400);
      expect(created.body.code).toBe('ERR_VALIDATION');
    }
    expect(await total()).toBe(before);

    const bot = await createBot(app, { name: 'b'.repeat(Limits.BOT_NAME_MAX) });
    for (const name of [' ', '\n\t']) {
      const own = await bot.client.post('/v1/bot/me/update', { name });
      expect(own.status, JSON.stringify(own.body)).toBe(400);
      expect(own.body.code).toBe('ERR_VALIDATION');
      const admin = await op.post(`/v1/admin/bots/${bot.id}/update`, { name });
      expect(admin.status, JSON.stringify(admin.body)).toBe(400);
      expect(admin.body.code).toBe('ERR_VALIDATION');
    }
    expect((await bot.client.get('/v1/bot/me')).body.name).toBe('b'.repeat(Limits.BOT_NAME_MAX));
    expect((await bot.client.post('/v1/bot/me/update', { name: ' Padded name ' })).status).toBe(200);
  });
});

describeApp('POST /v1/bot/me/update and /v1/bot/batch', () => {
  it('updates info and stats in one call', async () => {
    const { client } = await createBot(app);
    const res = await client.post('/v1/bot/me/update', {
      name: 'Renamed',
      avatar_url: 'https://cdn.example/bot.png',
      stats: { users: 1234, latency_ms: 42.5 },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      name: 'Renamed',
      avatar_url: 'https://cdn.example/bot.png',
      stats: { users: 1234, latency_ms: 42.5 },
    });
    expect(res.body.stats.reported_at).toEqual(expect.any(String));
    for (const body of [
      {},
      { stats: { users: -1 } },
      { name: '' },
      { avatar_url: 'javascript:alert(1)' },
      { guilds: 3 },
    ]) {
      const bad = await client.post('/v1/bot/me/update', body);
      expect(bad.status).toBe(400);
      expect(bad.body.code).toBe('ERR_VALIDATION');
    }
  });

  it('takes stats with one statistic or more and refuses an empty stats object, reporting nothing', async () => {
    const { client } = await createBot(app);
    const empty = await client.post('/v1/bot/me/update', { stats: {} });
    expect([empty.status, empty.body.code]).toEqual([400, 'ERR_VALIDATION']);
    expect(empty.body.errors).toEqual([{ path: 'body/stats', message: 'must NOT have fewer than 1 properties' }]);
    const renamed = await client.post('/v1/bot/me/update', { name: 'Named', stats: {} });
    expect([renamed.status, renamed.body.code]).toEqual([400, 'ERR_VALIDATION']);
    expect((await client.get('/v1/bot/me')).body).toMatchObject({
      name: 'Test bot',
      stats: { users: null, latency_ms: null, reported_at: null },
    });
    const users = await client.post('/v1/bot/me/update', { stats: { users: 0 } });
    expect(users.status, JSON.stringify(users.body)).toBe(200);
    expect(users.body.stats).toEqual({ users: 0, latency_ms: null, reported_at: expect.any(String) });
    const latency = await client.post('/v1/bot/me/update', { stats: { latency_ms: 0 } });
    expect(latency.status, JSON.stringify(latency.body)).toBe(200);
    expect(latency.body.stats).toMatchObject({ users: 0, latency_ms: 0 });
    const doc = await new Client(app.url).get('/openapi.json');
    const body = doc.body.paths['/v1/bot/me/update'].post.requestBody.content['application/json'].schema;
    expect(body.properties.stats).toMatchObject({ minProperties: 1, additionalProperties: false });
  });

  it('keeps latency_ms to the microsecond below 16384 ms, to about 7 significant digits above', async () => {
    const { client } = await createBot(app);
    for (const [sent, kept] of [
      [16383.999, 16383.999],
      [123456.789, 123456.79],
      [3599999.999, 3600000],
    ]) {
      const res = await client.post('/v1/bot/me/update', { stats: { latency_ms: sent } });
      expect(res.body.stats.latency_ms, String(sent)).toBe(kept);
      expect((await client.get('/v1/bot/me')).body.stats.latency_ms).toBe(kept);
    }
  });

  it('answers 400 ERR_VALIDATION to an avatar_url that is no http(s) URL with a host, changing nothing', async () => {
    const { client } = await createBot(app);
    const set = await client.post('/v1/bot/me/update', { avatar_url: 'https://cdn.example/bot.png' });
    expect(set.status).toBe(200);
    for (const bad of ['https://', 'http://[', 'https://%zz/', 'javascript:alert(1)']) {
      const res = await client.post('/v1/bot/me/update', { name: 'Changed', avatar_url: bad });
      expect([res.status, res.body.code]).toEqual([400, 'ERR_VALIDATION']);
      expect(res.body.errors.map((e: { path: string }) => e.path)).toContain('body/avatar_url');
    }
    expect((await client.get('/v1/bot/me')).body).toMatchObject({
      name: set.body.name,
      avatar_url: 'https://cdn.example/bot.png',
      updated_at: set.body.updated_at,
    });
  });

  it(`records 1 to ${Limits.BOT_BATCH_MAX} command executions and refuses 0 or ${Limits.BOT_BATCH_MAX + 1}`, async () => {
    const { client } = await createBot(app);
    const cmd = { command: 'play', user_id: 1, guild_id: '123456789012345678', success: true, duration_ms: 12 };
    expect((await client.post('/v1/bot/batch', { commands: [cmd] })).body).toEqual({ recorded: 1 });
    const full = await client.post('/v1/bot/batch', {
      commands: Array.from({ length: Limits.BOT_BATCH_MAX }, () => cmd),
    });
    expect(full.body).toEqual({ recorded: Limits.BOT_BATCH_MAX });
    for (const commands of [[], Array.from({ length: Limits.BOT_BATCH_MAX + 1 }, () => cmd)]) {
      expect((await client.post('/v1/bot/batch', { commands })).status).toBe(400);
    }
  });
});

describeApp('POST /v1/bot/batch executed_at', () => {
  /** The executed_at of the bot's recorded commands, as epoch milliseconds. */
  const storedOf = async (botId: number): Promise<number[]> => {
    const res = (await app.database.db.execute(
      `select extract(epoch from executed_at) * 1000 as ms from bot_commands where bot_id = ${botId} order by id` as never,
    )) as unknown as { rows: { ms: string | number }[] } | { ms: string | number }[];
    return ('rows' in res ? res.rows : res).map((r) => Math.round(Number(r.ms)));
  };

  it('refuses times that are no real instant or outside 1970-9999 with 400 ERR_VALIDATION, recording nothing', async () => {
    const { id, client } = await createBot(app);
    for (const executed_at of [
      '2016-12-31T23:59:60Z', // a leap second: RFC 3339, but no JavaScript Date
      '2024-01-01T00:00:00+01', // an offset without minutes
      '0000-01-01T00:00:00Z',
      '1969-12-31T23:59:59.999Z',
      '9999-12-31T23:59:59-01:00', // year 10000 in UTC
      '2024-02-30T00:00:00Z',
    ]) {
      const res = await client.post('/v1/bot/batch', { commands: [{ command: 'play', executed_at }] });
      expect(res.status, executed_at).toBe(400);
      expect(res.body).toMatchObject({
        code: 'ERR_VALIDATION',
        errors: [{ path: 'body/commands/0/executed_at', message: expect.any(String) }],
      });
    }
    expect(await storedOf(id)).toEqual([]);
  });

  it('records the first and last accepted instants, and offsets, as the instant they name', async () => {
    const { id, client } = await createBot(app);
    const accepted = ['1970-01-01T00:00:00Z', '9999-12-31T23:59:59.999Z', '2024-01-01T10:00:00.5+05:30'];
    const res = await client.post('/v1/bot/batch', {
      commands: accepted.map((executed_at) => ({ command: 'play', executed_at })),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(await storedOf(id)).toEqual(accepted.map((t) => Date.parse(t)));
  });
});

describeApp('GET /v1/bot/users/{user_id} and update', () => {
  it('shows the bot-visible user without subscription details', async () => {
    const { client } = await createBot(app);
    const { user } = await login(app);
    const res = await client.get(`/v1/bot/users/${user.id}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: user.id,
      username: user.username,
      subscription_tier: 0,
      permission_level: 0,
      state: 0,
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
    expect((await client.get('/v1/bot/users/987654')).status).toBe(404);
    expect((await client.get('/v1/bot/users/abc')).status).toBe(400);
    // An id is plain decimal text: other spellings JavaScript reads as the number name no user.
    for (const id of ['2.0', '0x10', '1e1', '%202', '02', '+2', '-0']) {
      const res = await client.get(`/v1/bot/users/${id}`);
      expect([id, res.status, res.body.code, res.body.errors]).toEqual([
        id,
        400,
        'ERR_VALIDATION',
        [{ path: 'params/user_id', message: 'must be integer' }],
      ]);
    }
  });

  it('answers 404 ERR_USER_NOT_FOUND to a look-up or rename of an anonymous stranger, renaming nothing', async () => {
    const official = await createBot(app, { type: 'official' });
    const made = await publicClient().post('/v1/portal/stranger', {});
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    const stranger = made.body.user;
    const seen = await official.client.get(`/v1/bot/users/${stranger.id}`);
    expect(seen.status, JSON.stringify(seen.body)).toBe(404);
    expect(seen.body.code).toBe('ERR_USER_NOT_FOUND');
    const renamed = await official.client.post(`/v1/bot/users/${stranger.id}/update`, { username: 'support-team' });
    expect(renamed.status, JSON.stringify(renamed.body)).toBe(404);
    expect(renamed.body.code).toBe('ERR_USER_NOT_FOUND');
    expect(
      await countRows(app, `select count(*) as n from users where id = ${stranger.id} and username = 'support-team'`),
    ).toBe(0);
  });

  it('renames a user: 3-32 characters, 409 when taken', async () => {
    const { client } = await createBot(app);
    const a = await login(app);
    const b = await login(app);
    const rename = (id: number, username: string) => client.post(`/v1/bot/users/${id}/update`, { username });
    // The shortest and the longest names, both unique to this user.
    const shortest = a.user.id.toString(36).padStart(Limits.USERNAME_MIN, '_');
    const longest = `bot_named_${a.user.id}`.padEnd(Limits.USERNAME_MAX, 'x');
    for (const username of [shortest, longest]) {
      const res = await rename(a.user.id, username);
      expect([res.status, res.body.username], username).toEqual([200, username]);
    }
    for (const username of ['no', `${longest}x`]) {
      const res = await rename(a.user.id, username);
      expect(res.status, username).toBe(400);
      expect(res.body.errors).toEqual([{ path: 'body/username', message: expect.any(String) }]);
    }
    expect((await client.get(`/v1/bot/users/${a.user.id}`)).body.username).toBe(longest);
    const ok = await client.post(`/v1/bot/users/${a.user.id}/update`, { username: `bot_named_${a.user.id}` });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({
      id: a.user.id,
      username: `bot_named_${a.user.id}`,
      avatar_url: expect.any(String),
      subscription_tier: 0,
      permission_level: 0,
      state: 0,
    });
    const taken = await client.post(`/v1/bot/users/${b.user.id}/update`, { username: `BOT_NAMED_${a.user.id}` });
    expect(taken.status).toBe(409);
    expect(taken.body.code).toBe('ERR_USERNAME_TAKEN');
  });
});

describeApp('POST /v1/bot/users/{user_id}/update: the bot’s ceiling and the audit entry', () => {
  /** The audit entries about a user (newest first), as the admin route lists them. */
  const auditOf = async (userId: number) =>
    (await operator(app).get(`/v1/admin/audit?target_user_id=${userId}`)).body.entries as Record<string, unknown>[];
  const usernameOf = async (userId: number) =>
    (await operator(app).get(`/v1/users/${userId}`, { apiKey: app.publicApiKey })).body.username;

  it('lets a Verified or Community bot rename only users below Admin: 403 ERR_FORBIDDEN for Admins and Owners, nothing written', async () => {
    const targets = {
      user: await login(app),
      moderator: await login(app),
      admin: await login(app),
      owner: await login(app),
    };
    await setLevel(app, targets.moderator.user.id, 1);
    await setLevel(app, targets.admin.user.id, 2);
    await setLevel(app, targets.owner.user.id, 3);
    for (const type of ['community', 'verified'] as const) {
      const { id: botId, client } = await createBot(app, { name: `Renamer ${type}`, type });
      for (const [level, who] of Object.entries(targets)) {
        const id = who.user.id;
        const before = { name: await usernameOf(id), audit: await auditOf(id) };
        const res = await client.post(`/v1/bot/users/${id}/update`, { username: `${type}_${level}_${id}` });
        if (level === 'admin' || level === 'owner') {
          expect([res.status, res.body], `${type} → ${level}`).toEqual([
            403,
            { code: 'ERR_FORBIDDEN', message: 'Only official bots rename Admins and Owners.' },
          ]);
          // Refused whatever the body: an empty update too, and a bad name is not even looked at.
          expect((await client.post(`/v1/bot/users/${id}/update`, {})).status).toBe(403);
          expect((await client.post(`/v1/bot/users/${id}/update`, { username: 'no' })).status).toBe(403);
          expect({ name: await usernameOf(id), audit: await auditOf(id) }).toEqual(before);
        } else {
          expect([res.status, res.body.username], `${type} → ${level}`).toEqual([200, `${type}_${level}_${id}`]);
          expect((await auditOf(id))[0]).toMatchObject({
            actor_kind: 'bot',
            actor_id: botId,
            target_user_id: id,
            code: 101,
            action: 'rename',
            data: { from: before.name, to: `${type}_${level}_${id}` },
          });
        }
      }
    }
  });

  it('lets an Official bot rename anyone, Owners included, each rename audited (101 rename, actor the bot)', async () => {
    const { id: botId, client } = await createBot(app, { name: 'First-party renamer', type: 'official' });
    const owner = await login(app);
    await setLevel(app, owner.user.id, 3);
    const res = await client.post(`/v1/bot/users/${owner.user.id}/update`, { username: `official_${owner.user.id}` });
    expect([res.status, res.body.username, res.body.permission_level]).toEqual([200, `official_${owner.user.id}`, 3]);
    const [entry] = await auditOf(owner.user.id);
    expect(entry).toMatchObject({
      actor_kind: 'bot',
      actor_id: botId,
      target_user_id: owner.user.id,
      target_bot_id: null,
      code: 101,
      action: 'rename',
      reason: null,
      data: { from: owner.user.username, to: `official_${owner.user.id}` },
    });
    // The same name again changes nothing and records nothing.
    const count = (await auditOf(owner.user.id)).length;
    expect(
      (await client.post(`/v1/bot/users/${owner.user.id}/update`, { username: `official_${owner.user.id}` })).status,
    ).toBe(200);
    expect((await auditOf(owner.user.id)).length).toBe(count);
  });

  it('refuses a Community bot from its next request once the target is an Admin, and writes no audit entry for a refused or failed rename', async () => {
    const { client } = await createBot(app, { name: 'Late renamer' });
    const a = await login(app);
    const b = await login(app);
    expect((await client.post(`/v1/bot/users/${a.user.id}/update`, { username: `late_${a.user.id}` })).status).toBe(
      200,
    );
    const before = await auditOf(b.user.id);
    const taken = await client.post(`/v1/bot/users/${b.user.id}/update`, { username: `LATE_${a.user.id}` });
    expect([taken.status, taken.body.code]).toEqual([409, 'ERR_USERNAME_TAKEN']);
    const bad = await client.post(`/v1/bot/users/${b.user.id}/update`, { username: 'no' });
    expect([bad.status, bad.body.code]).toEqual([400, 'ERR_VALIDATION']);
    expect(await auditOf(b.user.id)).toEqual(before);
    await setLevel(app, a.user.id, 2);
    const refused = await client.post(`/v1/bot/users/${a.user.id}/update`, { username: `later_${a.user.id}` });
    expect(refused.status).toBe(403);
    expect(await usernameOf(a.user.id)).toBe(`late_${a.user.id}`);
  });
});

describeApp('public bot listings', () => {
  it('lists, finds and searches bots with the public key, with and without /v1', async () => {
    const { id } = await createBot(app, { name: 'Listing Finder', type: 'official' });
    for (const prefix of ['', '/v1']) {
      const list = await publicClient().get(`${prefix}/bots?limit=100`);
      expect(list.status).toBe(200);
      expect(list.body.bots.some((b: { id: number }) => b.id === id)).toBe(true);
      const one = await publicClient().get(`${prefix}/bots/${id}`);
      expect(one.body).toEqual({
        id,
        name: 'Listing Finder',
        avatar_url: null,
        verified: true,
        users: null,
        created_at: expect.any(String),
      });
      const found = await publicClient().get(`${prefix}/bots/search?q=finder`);
      expect(found.body.bots.map((b: { id: number }) => b.id)).toEqual([id]);
    }
    expect((await new Client(app.url).get('/bots')).status).toBe(401);
    expect((await publicClient().get('/bots/424242')).body.code).toBe('ERR_BOT_NOT_FOUND');
  });

  it('shows owner, rate limit and type to an Admin session', async () => {
    const { id } = await createBot(app, { name: 'Admin Visible', rate_limit_per_hour: 77 });
    const admin = await login(app);
    await setLevel(app, admin.user.id, 2);
    admin.client.apiKey = app.publicApiKey;
    const res = await admin.client.get(`/bots/${id}`);
    expect(res.body).toMatchObject({ id, type: 3, rate_limit_per_hour: 77, owner_user_id: null });
    const search = await admin.client.get('/bots/search?q=admin%20visible');
    expect(search.body.bots[0]).toMatchObject({ id, rate_limit_per_hour: 77 });
  });
});

describeApp('statistics and health', () => {
  it('answers GET /v1/health without a key', async () => {
    const res = await new Client(app.url).get('/v1/health');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: 'ok',
      source_hash: 'test-hash',
      uptime_seconds: expect.any(Number),
      version: expect.any(String),
      storage: app.config.databaseUrl ? 'cluster' : 'embedded',
    });
  });

  it('serves the OpenAPI document and the docs page', async () => {
    const doc = await new Client(app.url).get('/openapi.json');
    expect(doc.body.openapi).toMatch(/^3\./);
    expect(Object.keys(doc.body.paths)).toEqual(
      expect.arrayContaining(['/v1/authentication/verify', '/v1/users/me', '/bots/{id}']),
    );
    expect((await new Client(app.url).get('/docs/')).status).toBe(200);
    expect((await new Client(app.url).get('/')).status).toBe(200);
  });

  it('puts the security headers on every answer, errors included, and the docs page keeps its own policy', async () => {
    const anon = new Client(app.url);
    const api = [await anon.get('/v1/health'), await anon.get('/v1/users/me'), await anon.get('/v1/nowhere')];
    for (const res of api) {
      // JSON answers: nothing may load, frame or sniff them.
      expect(res.headers.get('content-security-policy')).toBe("default-src 'none'; frame-ancestors 'none'");
      expect(res.headers.get('x-frame-options')).toBe('DENY');
      expect(res.headers.get('x-xss-protection')).toBeNull();
    }
    for (const res of [await anon.get('/'), await anon.get('/nowhere')]) {
      expect(res.headers.get('content-security-policy')).toContain("default-src 'self'");
      expect(res.headers.get('content-security-policy')).toContain("script-src 'self'");
      expect(res.headers.get('x-frame-options')).toBe('SAMEORIGIN');
    }
    for (const res of [...api, await anon.get('/')]) {
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('cross-origin-resource-policy')).toBe('same-site');
      expect(res.headers.get('strict-transport-security')).toMatch(/^max-age=\d+/);
      expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    }
    const docs = await anon.get('/docs/static/index.html');
    expect(docs.status).toBe(200);
    expect(docs.headers.get('content-security-policy')).toContain('validator.swagger.io');
  });
});

describeApp('operator routes', () => {
  it('sets a permission level with the operator token and records it', async () => {
    const { user, client } = await login(app);
    const res = await operator(app).post(`/v1/admin/users/${user.id}/update`, { permission_level: 1 });
    expect(res.status).toBe(200);
    expect(res.body.permission_level).toBe(1);
    const me = (await client.get('/v1/users/me')).body.user;
    expect(me.permission_level).toBe(1);
    expect(me.permission_since).toEqual(expect.any(String));
    for (const body of [{ permission_level: 4 }, { permission_level: '1' }, {}]) {
      expect((await operator(app).post(`/v1/admin/users/${user.id}/update`, body)).status).toBe(400);
    }
    expect((await operator(app).post('/v1/admin/users/999999/update', { permission_level: 1 })).status).toBe(404);
  });

  it('lets an Admin demote a Moderator to User but not touch another Admin; an Owner may', async () => {
    const [admin, admin2, mod, owner] = [await login(app), await login(app), await login(app), await login(app)];
    await setLevel(app, admin.user.id, 2);
    await setLevel(app, admin2.user.id, 2);
    await setLevel(app, mod.user.id, 1);
    await setLevel(app, owner.user.id, 3);
    expect((await admin.client.post(`/v1/admin/users/${mod.user.id}/update`, { permission_level: 0 })).status).toBe(
      200,
    );
    expect((await admin.client.post(`/v1/admin/users/${mod.user.id}/update`, { permission_level: 1 })).status).toBe(
      403,
    );
    expect((await admin.client.post(`/v1/admin/users/${admin2.user.id}/update`, { permission_level: 0 })).status).toBe(
      403,
    );
    expect((await owner.client.post(`/v1/admin/users/${admin2.user.id}/update`, { permission_level: 0 })).status).toBe(
      200,
    );
    expect((await owner.client.post(`/v1/admin/users/${mod.user.id}/update`, { permission_level: 3 })).status).toBe(
      403,
    );
    expect((await owner.client.post(`/v1/admin/users/${owner.user.id}/update`, { permission_level: 2 })).status).toBe(
      403,
    );
    expect((await mod.client.post(`/v1/admin/users/${admin.user.id}/update`, { permission_level: 0 })).status).toBe(
      403,
    );
  });
});
