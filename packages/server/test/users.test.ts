import { Limits } from '@parlor/protocol';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { createLoginBot, type LoggedIn, login, setLevel } from './support/flows.js';
import { hold, lockWaiters } from './support/pg-locks.js';

let app: TestApp;
let bot: Client;
/** PostgreSQL (cluster project): the tests' own connection, to hold rows as another node would. */
let pg: postgres.Sql | undefined;

beforeAll(async () => {
  app = await startApp();
  bot = await createLoginBot(app);
  if (app.config.databaseUrl) pg = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  await pg?.end({ timeout: 1 });
  await app?.close();
});

const sql = (q: string) => app.database.db.execute(q as never);

describeApp('GET /v1/users/me', () => {
  it('answers {user} with every field of spec 2.1', async () => {
    const { client, platformUserId } = await login(app, { bot });
    const res = await client.get('/v1/users/me');
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['user']);
    expect(res.body.user).toEqual({
      id: expect.any(Number),
      username: expect.stringMatching(/^user_/),
      avatar_url: `https://cdn.example/${platformUserId}.png`,
      subscription_tier: 0,
      state: 0,
      permission_level: 0,
      subscription_expires_at: null,
      subscription_granted_by: null,
      last_activity_at: expect.any(String),
      permission_since: null,
      avatar_source: 'platform_a',
      linked_platforms: [
        {
          platform: 'platform_a',
          platform_user_id: platformUserId,
          platform_username: `name${platformUserId}`,
          platform_avatar_url: `https://cdn.example/${platformUserId}.png`,
          linked_at: expect.any(String),
          last_authenticated_at: expect.any(String),
        },
      ],
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
  });

  it('answers 401 ERR_UNAUTHENTICATED without a session, or with a forged one', async () => {
    const c = new Client(app.url);
    expect((await c.get('/v1/users/me')).body.code).toBe('ERR_UNAUTHENTICATED');
    c.cookie = 'x'.repeat(43);
    const res = await c.get('/v1/users/me');
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('ERR_UNAUTHENTICATED');
  });
});

describeApp('POST /v1/users/me/update', () => {
  let me: LoggedIn;
  beforeAll(async () => {
    me = await login(app, { bot });
  });

  it('accepts usernames of 3 and 32 characters and refuses 2 and 33 in errors', async () => {
    for (const name of ['abc', `a${'b'.repeat(31)}`]) {
      const res = await me.client.post('/v1/users/me/update', { username: name });
      expect(res.status).toBe(200);
      expect(res.body.errors).toBeNull();
      expect(res.body.user.username).toBe(name);
    }
    for (const name of ['ab', `a${'b'.repeat(32)}`, 'has space', 'émile']) {
      const res = await me.client.post('/v1/users/me/update', { username: name });
      expect(res.status).toBe(200);
      expect(res.body.errors).toEqual({ username: expect.stringContaining('3-32') });
      expect(res.body.user.username).toBe(`a${'b'.repeat(31)}`);
    }
  });

  it('keeps the fields independent: a bad username does not stop a good avatar_source', async () => {
    const res = await me.client.post('/v1/users/me/update', { username: 'x', avatar_source: 'platform_a_3' });
    expect(res.status).toBe(200);
    expect(res.body.errors).toEqual({ username: expect.any(String) });
    expect(res.body.user.avatar_source).toBe('platform_a_3');
    expect(res.body.user.avatar_url).toBe(`${app.config.publicUrl}/avatars/platform_a_3.svg`);
    const svg = await new Client(app.url).get('/avatars/platform_a_3.svg');
    expect(svg.status).toBe(200);
    expect(svg.headers.get('content-type')).toContain('image/svg+xml');
  });

  it('serves the default avatars for any site to show (Cross-Origin-Resource-Policy: cross-origin)', async () => {
    const svg = await new Client(app.url).get('/avatars/platform_a_0.svg');
    expect(svg.status).toBe(200);
    expect(svg.headers.get('cross-origin-resource-policy')).toBe('cross-origin');
    expect(svg.headers.get('x-content-type-options')).toBe('nosniff');
  });

  it('reports an over-long username in errors and still applies a good avatar_source', async () => {
    const before = (await me.client.get('/v1/users/me')).body.user;
    const res = await me.client.post('/v1/users/me/update', {
      username: 'a'.repeat(257),
      avatar_source: 'platform_a_2',
    });
    expect(res.status).toBe(200);
    expect(res.body.errors).toEqual({ username: expect.stringContaining('3-32') });
    expect(res.body.user.username).toBe(before.username);
    expect(res.body.user.avatar_source).toBe('platform_a_2');
  });

  it('reports an over-long avatar_source in errors and still applies a good username', async () => {
    const before = (await me.client.get('/v1/users/me')).body.user;
    const name = `long_src_${me.user.id}`;
    const res = await me.client.post('/v1/users/me/update', { username: name, avatar_source: 'p'.repeat(65) });
    expect(res.status).toBe(200);
    expect(res.body.errors).toEqual({ avatar_source: expect.any(String) });
    expect(res.body.user.username).toBe(name);
    expect(res.body.user.avatar_source).toBe(before.avatar_source);
  });

  it('refuses an avatar_source that is neither linked nor a default key; empty falls back to the earliest platform', async () => {
    const bad = await me.client.post('/v1/users/me/update', { avatar_source: 'platform_b' });
    expect(bad.body.errors).toEqual({ avatar_source: expect.any(String) });
    const six = await me.client.post('/v1/users/me/update', { avatar_source: 'platform_a_6' });
    expect(six.body.errors).toEqual({ avatar_source: expect.any(String) });
    const cleared = await me.client.post('/v1/users/me/update', { avatar_source: '' });
    expect(cleared.body.errors).toBeNull();
    expect(cleared.body.user.avatar_source).toBe('platform_a');
    expect(cleared.body.user.avatar_url).toBe(`https://cdn.example/${me.platformUserId}.png`);
  });

  it('reports a username taken by someone else, in any case, and lets me keep my own', async () => {
    const other = await login(app, { bot });
    await other.client.post('/v1/users/me/update', { username: 'Taken.Name' });
    const res = await me.client.post('/v1/users/me/update', { username: 'taken.name' });
    expect(res.body.errors).toEqual({ username: 'is taken' });
    const same = await other.client.post('/v1/users/me/update', { username: 'TAKEN.NAME' });
    expect(same.body.errors).toBeNull();
    expect(same.body.user.username).toBe('TAKEN.NAME');
  });

  it('rejects wrong types and unknown fields with 400 ERR_VALIDATION and changes nothing', async () => {
    const before = (await me.client.get('/v1/users/me')).body.user;
    for (const body of [
      { username: 42 },
      { username: ['abc'] },
      { nickname: 'abc' },
      { username: 'fine_name', extra: 1 },
    ]) {
      const res = await me.client.post('/v1/users/me/update', body);
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('ERR_VALIDATION');
      expect(res.body.errors.length).toBeGreaterThan(0);
    }
    expect((await me.client.get('/v1/users/me')).body.user).toEqual(before);
  });

  // The update holds the user's row, then the caller's session row: a session destroyed while the
  // update waited for the user's row (the destroy committed and answered) answers 401 and writes
  // nothing. The test holds the row as another transaction would; PGlite runs one at a time.
  it.skipIf(MODE === 'embedded')(
    'answers 401 and writes nothing when its session is destroyed while it waits for the user row (PostgreSQL)',
    async () => {
      const db = pg as postgres.Sql;
      const a = await login(app, { bot });
      const b = await login(app, { bot, platformUserId: a.platformUserId });
      const nameAndAvatar = async () => {
        const { username, avatar_source } = (await a.client.get('/v1/users/me')).body.user;
        return { username, avatar_source };
      };
      const before = await nameAndAvatar();
      const holder = hold(db, (tx) => tx`select id from users where id = ${a.user.id} for update`);
      await holder.ready;
      const update = b.client.post('/v1/users/me/update', {
        username: `gone_${a.user.id}`,
        avatar_source: 'platform_a_4',
      });
      await lockWaiters(db, 1);
      const destroyed = await a.client.post(`/v1/users/me/sessions/${b.client.cookie?.slice(-6)}/destroy`, {});
      expect([destroyed.status, destroyed.body]).toEqual([200, { destroyed: true }]);
      await holder.end();
      const answer = await update;
      expect([answer.status, answer.body.code]).toEqual([401, 'ERR_UNAUTHENTICATED']);
      expect(await nameAndAvatar()).toEqual(before);
    },
  );
});

describeApp('GET /v1/users/me/subscription', () => {
  it('answers Basic for a new account', async () => {
    const { client } = await login(app, { bot });
    const res = await client.get('/v1/users/me/subscription');
    expect(res.body).toEqual({
      tier: 0,
      tier_name: 'basic',
      has_premium: false,
      expires_at: null,
      granted_by: null,
      trial_used: false,
    });
  });
});

describeApp('GET /v1/users/me/punishments', () => {
  it('pages newest first with limit 1-100 and offset ≥ 0', async () => {
    const { client, user } = await login(app, { bot });
    for (let i = 0; i < 3; i++) {
      await sql(
        `insert into moderation_actions (user_id, action_type, reason, created_at) values (${user.id}, 'PLATFORM_WARNING', 'r${i}', now() + interval '${i} seconds')`,
      );
    }
    const all = await client.get('/v1/users/me/punishments');
    expect(all.status).toBe(200);
    expect(all.body.map((p: { reason: string }) => p.reason)).toEqual(['r2', 'r1', 'r0']);
    expect(all.body[0]).toEqual({
      id: expect.any(Number),
      action_type: 'PLATFORM_WARNING',
      reason: 'r2',
      is_lifted: false,
      expires_at: null,
      lifted_at: null,
      created_at: expect.any(String),
    });
    expect(
      (await client.get('/v1/users/me/punishments?limit=1&offset=1')).body.map((p: { reason: string }) => p.reason),
    ).toEqual(['r1']);
    // The default page, and the largest, over more records than either holds.
    await sql(
      `insert into moderation_actions (user_id, action_type, reason, created_at) select ${user.id}, 'PLATFORM_WARNING', 'old', now() - interval '1 day' from generate_series(1, ${Limits.PUNISHMENTS_PAGE_MAX})`,
    );
    expect((await client.get('/v1/users/me/punishments')).body).toHaveLength(Limits.PUNISHMENTS_PAGE_DEFAULT);
    expect((await client.get(`/v1/users/me/punishments?limit=${Limits.PUNISHMENTS_PAGE_MAX}`)).body).toHaveLength(
      Limits.PUNISHMENTS_PAGE_MAX,
    );
    expect((await client.get('/v1/users/me/punishments?offset=0')).status).toBe(200);
    for (const q of ['limit=0', `limit=${Limits.PUNISHMENTS_PAGE_MAX + 1}`, 'offset=-1', 'limit=abc', 'other=1']) {
      const res = await client.get(`/v1/users/me/punishments?${q}`);
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('ERR_VALIDATION');
    }
  });
});

describeApp('GET /v1/users/{id} and /v1/users/search', () => {
  it('shows the public profile to the public key and to users, full detail to Admins', async () => {
    const target = await login(app, { bot });
    const publicView = await new Client(app.url, nextIp(), app.publicApiKey).get(`/v1/users/${target.user.id}`);
    expect(publicView.status).toBe(200);
    expect(Object.keys(publicView.body).sort()).toEqual([
      'avatar_url',
      'created_at',
      'has_premium',
      'id',
      'permission_level',
      'username',
    ]);
    const peer = await login(app, { bot });
    expect(Object.keys((await peer.client.get(`/v1/users/${target.user.id}`)).body)).not.toContain('linked_platforms');
    const admin = await login(app, { bot });
    await setLevel(app, admin.user.id, 2);
    const full = await admin.client.get(`/v1/users/${target.user.id}`);
    expect(full.body).toMatchObject({
      id: target.user.id,
      linked_platforms: expect.any(Array),
      subscription_history: [],
      has_premium: false,
    });
    expect((await new Client(app.url).get(`/v1/users/${target.user.id}`)).status).toBe(401);
    expect((await peer.client.get('/v1/users/999999')).body.code).toBe('ERR_USER_NOT_FOUND');
    expect((await peer.client.get('/v1/users/0')).status).toBe(400);
  });

  it("shows an Admin the full detail of users at and above its level too (spec 5: no redaction), a User only another's public profile", async () => {
    const [admin, otherAdmin, owner, user] = [
      await login(app, { bot }),
      await login(app, { bot }),
      await login(app, { bot }),
      await login(app, { bot }),
    ];
    await setLevel(app, admin.user.id, 2);
    await setLevel(app, otherAdmin.user.id, 2);
    await setLevel(app, owner.user.id, 3);
    for (const target of [otherAdmin, owner]) {
      const view = await admin.client.get(`/v1/users/${target.user.id}`);
      expect(view.status).toBe(200);
      expect(view.body).toMatchObject({ id: target.user.id, subscription_history: [] });
      expect(view.body).toHaveProperty('linked_platforms');
    }
    const asUser = await user.client.get(`/v1/users/${owner.user.id}`);
    expect(asUser.body).not.toHaveProperty('linked_platforms');
    expect(asUser.body).not.toHaveProperty('subscription_history');
  });

  it('searches usernames by substring; Admin search sees only users below the Admin', async () => {
    const tag = `srch${Date.now() % 100000}`;
    const low = await login(app, { bot });
    const high = await login(app, { bot });
    await low.client.post('/v1/users/me/update', { username: `${tag}_low` });
    await high.client.post('/v1/users/me/update', { username: `${tag}_high` });
    await setLevel(app, high.user.id, 2);
    const admin = await login(app, { bot });
    await setLevel(app, admin.user.id, 2);
    const asUser = await low.client.get(`/v1/users/search?q=${tag}`);
    expect(asUser.body.users.map((u: { username: string }) => u.username).sort()).toEqual([
      `${tag}_high`,
      `${tag}_low`,
    ]);
    const asAdmin = await admin.client.get(`/v1/users/search?q=${tag}`);
    expect(asAdmin.body.users.map((u: { username: string }) => u.username)).toEqual([`${tag}_low`]);
    expect(asAdmin.body.users[0]).toHaveProperty('linked_platforms');
    const wildcard = await low.client.get('/v1/users/search?q=%25');
    expect(wildcard.body.users).toEqual([]);
    expect((await low.client.get('/v1/users/search')).status).toBe(400);
    expect((await low.client.get(`/v1/users/search?q=${tag}&limit=101`)).status).toBe(400);
  });

  it('lists no anonymous stranger in search, to users or Admins; its public profile reads by id', async () => {
    const created = await new Client(app.url, nextIp(), app.publicApiKey).post('/v1/portal/stranger', {});
    expect(created.status).toBe(200);
    const { id, username } = created.body.user as { id: number; username: string };
    const user = await login(app, { bot });
    const admin = await login(app, { bot });
    await setLevel(app, admin.user.id, 2);
    for (const who of [user, admin]) {
      const found = await who.client.get(`/v1/users/search?q=${encodeURIComponent(username)}`);
      expect([found.status, found.body.users.map((u: { id: number }) => u.id)]).toEqual([200, []]);
    }
    const profile = await user.client.get(`/v1/users/${id}`);
    expect([profile.status, profile.body.username]).toEqual([200, username]);
  });

  it('takes the operator token with the Bearer scheme in any case', async () => {
    for (const scheme of ['Bearer', 'bearer', 'BEARER']) {
      const res = await new Client(app.url, nextIp(), null, { authorization: `${scheme} ${app.operatorToken}` }).get(
        '/v1/admin/audit?limit=1',
      );
      expect([scheme, res.status]).toEqual([scheme, 200]);
    }
  });
});
