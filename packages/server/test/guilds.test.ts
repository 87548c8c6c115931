import { AuditCodes, GUILD_PLATFORM, Limits, RoomSettingsDefaults } from '@parlor/protocol';
import { desc, eq } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { auditLog, guilds } from '../src/platform/db/schema.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows } from './support/faults.js';
import { createBot, createLoginBot, type LoggedIn, login, nextIdentity, operator, setLevel } from './support/flows.js';
import { hold, lockWaiters, lockWaitersOr } from './support/pg-locks.js';
import { closeAllSockets } from './support/sockets.js';

const DAY = 24 * 3600 * 1000;

let app: TestApp;
/** The community bot that reports guilds. */
let bot: Client;
/** Delivers login codes (Official bots only, docs/api.md Login). */
let loginBot: Client;
let op: Client;
let admin: LoggedIn;
/** PostgreSQL (cluster project): the tests' own connection, to hold rows as another node would. */
let sql: postgres.Sql | undefined;
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  app = await startApp({ clock });
  bot = (await createBot(app)).client;
  loginBot = await createLoginBot(app);
  op = operator(app);
  admin = await login(app, { bot: loginBot });
  await setLevel(app, admin.user.id, 2);
  if (app.config.databaseUrl) sql = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await sql?.end({ timeout: 1 });
  await app?.close();
});

const expectError = (res: { status: number; body: any }, status: number, code: string) => {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body.code).toBe(code);
};

const upsert = (id: string, body: Record<string, unknown>, by: Client = bot) => by.post(`/v1/bot/guilds/${id}`, body);
const put = (by: Client, path: string, body: unknown) => by.request('PUT', path, { body });
const vanity = (by: Client, id: string, value: string) => put(by, `/v1/guilds/${id}/vanity`, { vanity_invite: value });
const roomSettings = (by: Client, id: string, body: unknown) => put(by, `/v1/guilds/${id}/room-settings`, body);
const premium = (id: string, days: number, by: Client = op) => by.post(`/v1/admin/guilds/${id}/premium`, { days });

/** A bot-reported guild with a fresh owner identity; `withPremium` adds 30 days of premium. */
async function guild(opts: { withPremium?: boolean; name?: string } = {}) {
  const id = nextIdentity();
  const owner = nextIdentity();
  const res = await upsert(id, { name: opts.name ?? `Guild ${id}`, member_count: 10, owner_chatplatform_id: owner });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  if (opts.withPremium) expect((await premium(id, 30)).status).toBe(200);
  return { id, owner, row: res.body };
}

/** A fresh vanity per call: lower-case letters and digits, 3-32 characters. */
let vanityCounter = 0;
function nextVanity(): string {
  vanityCounter += 1;
  return `v${Date.now().toString(36)}-${vanityCounter}`;
}

const guildAudits = (code: number) =>
  app.database.db.select().from(auditLog).where(eq(auditLog.code, code)).orderBy(desc(auditLog.id));

describeApp('POST /v1/bot/guilds/{guild_id}', () => {
  it('creates the guild and answers the fields of spec 4.3', async () => {
    const id = nextIdentity();
    const res = await upsert(id, { name: 'Chess club', member_count: 42, owner_chatplatform_id: '80351110224678912' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(
      [
        'chatplatform_id',
        'name',
        'prefix',
        'member_count',
        'is_whitelisted',
        'owner_chatplatform_id',
        'state',
        'id',
        'has_bot',
        'source',
        'created_at',
        'updated_at',
      ].sort(),
    );
    expect(res.body).toMatchObject({
      chatplatform_id: id,
      name: 'Chess club',
      prefix: '',
      member_count: 42,
      is_whitelisted: false,
      owner_chatplatform_id: '80351110224678912',
      state: 0,
      id: expect.any(Number),
      has_bot: true,
      source: 'bot',
    });
    expect(res.body.created_at).toBe(res.body.updated_at);
  });

  it('updates the same record; omitted optional fields keep their value, null clears the avatar', async () => {
    const id = nextIdentity();
    const owner = nextIdentity();
    const first = await upsert(id, {
      name: 'Old',
      member_count: 1,
      owner_chatplatform_id: owner,
      avatar_url: 'https://cdn.example/g.png',
      prefix: '!',
    });
    clock.advance(1000);
    const second = await upsert(id, { name: 'New', member_count: 2 });
    expect(second.status).toBe(200);
    expect(second.body).toMatchObject({
      id: first.body.id,
      name: 'New',
      member_count: 2,
      prefix: '!',
      owner_chatplatform_id: owner,
      created_at: first.body.created_at,
    });
    expect(second.body.updated_at > first.body.updated_at).toBe(true);
    const cleared = await upsert(id, { name: 'New', member_count: 3, avatar_url: null, prefix: '?' });
    expect(cleared.body.prefix).toBe('?');
    const full = await admin.client.get(`/v1/guilds/${id}`);
    expect(full.body).toMatchObject({ avatar_url: '', prefix: '?', member_count: 3, has_premium: false });
  });

  it.each([
    ['no name', { member_count: 1 }, 'body/name'],
    ['an empty name', { name: '', member_count: 1 }, 'body/name'],
    ['a blank name', { name: '   ', member_count: 1 }, 'body/name'],
    ['a 101-character name', { name: 'x'.repeat(101), member_count: 1 }, 'body/name'],
    ['no member_count', { name: 'G' }, 'body/member_count'],
    ['a negative member_count', { name: 'G', member_count: -1 }, 'body/member_count'],
    ['a fractional member_count', { name: 'G', member_count: 1.5 }, 'body/member_count'],
    ['a member_count as text', { name: 'G', member_count: '3' }, 'body/member_count'],
    [
      'an owner id with letters',
      { name: 'G', member_count: 1, owner_chatplatform_id: '12a' },
      'body/owner_chatplatform_id',
    ],
    ['a numeric owner id', { name: 'G', member_count: 1, owner_chatplatform_id: 12 }, 'body/owner_chatplatform_id'],
    ['a non-http avatar', { name: 'G', member_count: 1, avatar_url: 'ftp://x/y.png' }, 'body/avatar_url'],
    ['an unknown field', { name: 'G', member_count: 1, vanity_invite: 'abc' }, 'body/vanity_invite'],
  ])('answers 400 ERR_VALIDATION on %s', async (_name, body, path) => {
    const res = await upsert(nextIdentity(), body);
    expectError(res, 400, 'ERR_VALIDATION');
    expect(res.body.errors.map((e: { path: string }) => e.path)).toContain(path);
  });

  it('answers 400 ERR_VALIDATION to an avatar_url that is no http(s) URL with a host, changing nothing', async () => {
    const id = nextIdentity();
    const first = await upsert(id, { name: 'G', member_count: 1, avatar_url: 'https://cdn.example/g.png' });
    expect(first.status).toBe(200);
    for (const bad of ['https://', 'http://[', 'https://%zz/', 'javascript:alert(1)']) {
      const res = await upsert(id, { name: 'Changed', member_count: 2, avatar_url: bad });
      expectError(res, 400, 'ERR_VALIDATION');
      expect(res.body.errors.map((e: { path: string }) => e.path)).toContain('body/avatar_url');
    }
    expect((await admin.client.get(`/v1/guilds/${id}`)).body).toMatchObject({
      name: 'G',
      member_count: 1,
      avatar_url: 'https://cdn.example/g.png',
    });
    // A new guild reported with such an avatar is not created.
    const fresh = nextIdentity();
    expectError(await upsert(fresh, { name: 'G', member_count: 1, avatar_url: 'https://' }), 400, 'ERR_VALIDATION');
    expectError(await admin.client.get(`/v1/guilds/${fresh}`), 404, 'ERR_GUILD_NOT_FOUND');
  });

  it('accepts guild ids of 1 and 20 digits and refuses others with 400', async () => {
    expect((await upsert('7', { name: 'G', member_count: 0 })).status).toBe(200);
    expect((await upsert('18446744073709551615', { name: 'G', member_count: 0 })).status).toBe(200);
    for (const bad of ['123456789012345678901', 'abc', '-1', '1.5'])
      expectError(await upsert(bad, { name: 'G', member_count: 0 }), 400, 'ERR_VALIDATION');
  });

  it('needs a bot key: none or the public key answers 401 ERR_INVALID_API_KEY', async () => {
    const anon = new Client(app.url, nextIp(), null);
    expectError(await upsert(nextIdentity(), { name: 'G', member_count: 1 }, anon), 401, 'ERR_INVALID_API_KEY');
    const withPublicKey = new Client(app.url, nextIp(), app.publicApiKey);
    expectError(
      await upsert(nextIdentity(), { name: 'G', member_count: 1 }, withPublicKey),
      401,
      'ERR_INVALID_API_KEY',
    );
  });
});

/** The bot recorded as the guild's reporter (null: none), as stored. */
const reporterOf = async (id: string) =>
  (await app.database.db.select().from(guilds).where(eq(guilds.chatplatformId, id)))[0]?.reportedByBotId;

describeApp('POST /v1/bot/guilds/{guild_id}: only the reporting bot (or an Official bot) reports a guild', () => {
  it('answers 403 ERR_GUILD_OTHER_BOT to another bot, which changes nothing; the reporting bot goes on', async () => {
    const first = await createBot(app, { name: 'Guild bot', type: 'verified' });
    const other = (await createBot(app, { name: 'Other bot' })).client;
    const g = await guild({ withPremium: true });
    // The shared bot reported it; a guild of `first`'s own:
    const id = nextIdentity();
    const owner = nextIdentity();
    expect(
      (await upsert(id, { name: 'Big', member_count: 5000, owner_chatplatform_id: owner }, first.client)).status,
    ).toBe(200);
    expect(await reporterOf(id)).toBe(first.id);
    const attacker = await login(app, { bot: loginBot });
    for (const [guildId, by] of [
      [id, other],
      [g.id, other],
      [id, bot],
    ] as const) {
      const hijack = await upsert(
        guildId,
        { name: 'Taken', member_count: 1, owner_chatplatform_id: attacker.platformUserId, prefix: '$' },
        by,
      );
      expectError(hijack, 403, 'ERR_GUILD_OTHER_BOT');
    }
    // Nothing moved: the attacker manages neither guild, and the records are as they were.
    expectError(
      await roomSettings(attacker.client, g.id, { start_url: 'https://phish.example/' }),
      403,
      'ERR_FORBIDDEN',
    );
    expect((await admin.client.get(`/v1/guilds/${id}`)).body).toMatchObject({
      name: 'Big',
      member_count: 5000,
      owner_chatplatform_id: owner,
      prefix: '',
    });
    expect((await admin.client.get(`/v1/guilds/${g.id}`)).body.owner_chatplatform_id).toBe(g.owner);
    const again = await upsert(id, { name: 'Bigger', member_count: 5001 }, first.client);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ name: 'Bigger', owner_chatplatform_id: owner });
  });

  it('lets an Official bot report any guild without taking it from its reporting bot', async () => {
    const official = (await createBot(app, { name: 'First-party', type: 'official' })).client;
    const g = await guild();
    const newOwner = nextIdentity();
    const res = await upsert(g.id, { name: 'Renamed', member_count: 11, owner_chatplatform_id: newOwner }, official);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ name: 'Renamed', owner_chatplatform_id: newOwner });
    // The guild's own bot still reports it.
    expect((await upsert(g.id, { name: 'Back', member_count: 12 })).status).toBe(200);
    // A guild an Official bot reports first is that bot's.
    const id = nextIdentity();
    expect((await upsert(id, { name: 'Official first', member_count: 1 }, official)).status).toBe(200);
    expectError(await upsert(id, { name: 'Mine', member_count: 1 }), 403, 'ERR_GUILD_OTHER_BOT');
  });

  it('gives a guild with no reporting bot (stored before it was recorded) to the next bot that reports it', async () => {
    const g = await guild();
    await app.database.db.update(guilds).set({ reportedByBotId: null }).where(eq(guilds.chatplatformId, g.id));
    const next = await createBot(app, { name: 'Next bot' });
    expect((await upsert(g.id, { name: 'Claimed', member_count: 2 }, next.client)).status).toBe(200);
    expect(await reporterOf(g.id)).toBe(next.id);
    expectError(await upsert(g.id, { name: 'Shared bot', member_count: 2 }), 403, 'ERR_GUILD_OTHER_BOT');
  });

  it('gives the guild of a deleted bot to the next bot that reports it', async () => {
    const gone = await createBot(app, { name: 'Soon deleted' });
    const id = nextIdentity();
    expect((await upsert(id, { name: 'Orphan', member_count: 1 }, gone.client)).status).toBe(200);
    expectError(await upsert(id, { name: 'Early', member_count: 1 }), 403, 'ERR_GUILD_OTHER_BOT');
    expect((await op.post(`/v1/admin/bots/${gone.id}/delete`)).status).toBe(200);
    expect((await admin.client.get(`/v1/guilds/${id}`)).body.has_bot).toBe(false);
    const next = await createBot(app, { name: 'Successor' });
    const adopted = await upsert(id, { name: 'Adopted', member_count: 1 }, next.client);
    expect(adopted.status).toBe(200);
    expect(adopted.body.has_bot).toBe(true);
    expect(await reporterOf(id)).toBe(next.id);
  });

  it('gives a new guild reported by two bots at once to exactly one of them', async () => {
    const [a, b] = [await createBot(app, { name: 'A' }), await createBot(app, { name: 'B' })];
    const id = nextIdentity();
    const answers = await Promise.all(
      [a, b].map((x) => upsert(id, { name: 'Race', member_count: 1, owner_chatplatform_id: nextIdentity() }, x.client)),
    );
    expect(answers.map((r) => r.status).sort()).toEqual([200, 403]);
    const winner = answers[0]?.status === 200 ? a : b;
    expect(await reporterOf(id)).toBe(winner.id);
  });
});

describeApp('GET /v1/users/me/guilds', () => {
  it('lists the guilds owned by one of the caller’s linked identities, with room settings at their defaults', async () => {
    const ownerId = nextIdentity();
    const a = nextIdentity();
    const b = nextIdentity();
    await upsert(a, { name: 'A', member_count: 1, owner_chatplatform_id: ownerId });
    await upsert(b, { name: 'B', member_count: 2, owner_chatplatform_id: ownerId });
    await upsert(nextIdentity(), { name: 'Not mine', member_count: 3, owner_chatplatform_id: nextIdentity() });
    const owner = await login(app, { bot: loginBot, platformUserId: ownerId });
    const res = await owner.client.get('/v1/users/me/guilds');
    expect(res.status).toBe(200);
    expect(res.body.map((g: { chatplatform_id: string }) => g.chatplatform_id)).toEqual([a, b]);
    expect(res.body[0]).toMatchObject({
      name: 'A',
      owner_chatplatform_id: ownerId,
      has_premium: false,
      subscription_expires_at: null,
      vanity_invite: null,
      chat_id: null,
      sponsor_ids: [],
      room_settings: RoomSettingsDefaults,
    });
  });

  it('counts only the identity on the guilds’ platform: the same id on another platform owns nothing', async () => {
    const g = await guild();
    const impostor = await login(app, { bot: loginBot, platform: 'platform_b', platformUserId: g.owner });
    expect((await impostor.client.get('/v1/users/me/guilds')).body).toEqual([]);
    expectError(await impostor.client.get(`/v1/guilds/${g.id}`), 403, 'ERR_FORBIDDEN');
    expectError(await roomSettings(impostor.client, g.id, { kiosk: true }), 403, 'ERR_FORBIDDEN');
    const owner = await login(app, { bot: loginBot, platform: GUILD_PLATFORM, platformUserId: g.owner });
    expect((await owner.client.get('/v1/users/me/guilds')).body.map((x: any) => x.chatplatform_id)).toEqual([g.id]);
    expect((await roomSettings(owner.client, g.id, { kiosk: true })).status).toBe(200);
  });

  it('answers [] to a user who owns nothing, 401 without a session', async () => {
    const someone = await login(app, { bot: loginBot });
    expect((await someone.client.get('/v1/users/me/guilds')).body).toEqual([]);
    expectError(await new Client(app.url).get('/v1/users/me/guilds'), 401, 'ERR_UNAUTHENTICATED');
  });
});

describeApp('PUT /v1/guilds/{guild_id}/vanity', () => {
  it('sets the vanity of a premium guild and answers the fields of spec 4.4 (plus vanity_invite, chat_id)', async () => {
    const g = await guild({ withPremium: true, name: 'Vanity guild' });
    const owner = await login(app, { bot: loginBot, platformUserId: g.owner });
    const v = nextVanity();
    const res = await vanity(owner.client, g.id, v);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(
      [
        'chatplatform_id',
        'name',
        'avatar_url',
        'has_premium',
        'member_count',
        'prefix',
        'subscription_expires_at',
        'source',
        'created_at',
        'updated_at',
        'vanity_invite',
        'chat_id',
      ].sort(),
    );
    expect(res.body).toMatchObject({
      chatplatform_id: g.id,
      name: 'Vanity guild',
      has_premium: true,
      vanity_invite: v,
      chat_id: expect.any(Number),
      source: 'bot',
    });
    // The guild's public chat: no owner, named after the guild.
    const chat = await owner.client.get(`/v1/portal/chats/${res.body.chat_id}`);
    expect(chat.body.chat).toMatchObject({ type: 'public', name: 'Vanity guild', owner_id: null });
    // A new vanity keeps the chat; the same one again changes nothing.
    const other = nextVanity();
    const changed = await vanity(owner.client, g.id, other);
    expect(changed.body).toMatchObject({ vanity_invite: other, chat_id: res.body.chat_id });
    expect((await vanity(owner.client, g.id, other)).status).toBe(200);
    const audits = await guildAudits(AuditCodes.GUILD_VANITY_SET);
    expect(audits.filter((a) => (a.data as { guild_id: string }).guild_id === g.id)).toHaveLength(2);
  });

  it('accepts 3 and 32 characters; refuses 2, 33, edge hyphens and upper case with 400', async () => {
    const g = await guild({ withPremium: true });
    const base = Date.now().toString(36);
    const three = `${base.slice(-2)}7`;
    expect((await vanity(admin.client, g.id, three)).status).toBe(200);
    const long = `${base}-${'x'.repeat(32)}`.slice(0, 32);
    expect(long).toHaveLength(32);
    expect((await vanity(admin.client, g.id, long)).status).toBe(200);
    expect((await vanity(admin.client, g.id, 'a-b')).status).toBe(200);
    for (const bad of ['ab', `${long}y`, '-abc', 'abc-', 'Abcd', 'ab_c', 'ab c', ''])
      expectError(await vanity(admin.client, g.id, bad), 400, 'ERR_VALIDATION');
    expectError(await put(admin.client, `/v1/guilds/${g.id}/vanity`, {}), 400, 'ERR_VALIDATION');
    expectError(
      await put(admin.client, `/v1/guilds/${g.id}/vanity`, { vanity_invite: 'abcd', x: 1 }),
      400,
      'ERR_VALIDATION',
    );
  });

  it('answers 403 ERR_GUILD_PREMIUM_REQUIRED without active premium (never granted, or revoked)', async () => {
    const g = await guild();
    expectError(await vanity(admin.client, g.id, nextVanity()), 403, 'ERR_GUILD_PREMIUM_REQUIRED');
    await premium(g.id, 1);
    expect((await vanity(admin.client, g.id, nextVanity())).status).toBe(200);
    expect((await op.post(`/v1/admin/guilds/${g.id}/premium/revoke`, {})).status).toBe(200);
    expectError(await vanity(admin.client, g.id, nextVanity()), 403, 'ERR_GUILD_PREMIUM_REQUIRED');
  });

  it('answers 409 ERR_VANITY_TAKEN when another guild has the vanity', async () => {
    const first = await guild({ withPremium: true });
    const second = await guild({ withPremium: true });
    const v = nextVanity();
    expect((await vanity(admin.client, first.id, v)).status).toBe(200);
    expectError(await vanity(admin.client, second.id, v), 409, 'ERR_VANITY_TAKEN');
    // Two guilds racing for one free vanity: exactly one wins.
    const free = nextVanity();
    const race = await Promise.all([vanity(admin.client, first.id, free), vanity(admin.client, second.id, free)]);
    expect(race.map((r) => r.status).sort()).toEqual([200, 409]);
  });

  it('lets the owner (linked identity), a sponsor and Admins in; refuses others with 403, unknown guilds 404', async () => {
    const g = await guild({ withPremium: true });
    const owner = await login(app, { bot: loginBot, platformUserId: g.owner });
    expect((await vanity(owner.client, g.id, nextVanity())).status).toBe(200);
    const sponsor = await login(app, { bot: loginBot });
    expectError(await vanity(sponsor.client, g.id, nextVanity()), 403, 'ERR_FORBIDDEN');
    expect((await op.post(`/v1/admin/guilds/${g.id}/sponsors/add`, { user_id: sponsor.user.id })).status).toBe(200);
    expect((await vanity(sponsor.client, g.id, nextVanity())).status).toBe(200);
    expect((await vanity(admin.client, g.id, nextVanity())).status).toBe(200);
    const moderator = await login(app, { bot: loginBot });
    await setLevel(app, moderator.user.id, 1);
    expectError(await vanity(moderator.client, g.id, nextVanity()), 403, 'ERR_FORBIDDEN');
    // The owner of another guild is a stranger here.
    const otherOwner = await login(app, { bot: loginBot, platformUserId: (await guild()).owner });
    expectError(await vanity(otherOwner.client, g.id, nextVanity()), 403, 'ERR_FORBIDDEN');
    expectError(await vanity(admin.client, nextIdentity(), nextVanity()), 404, 'ERR_GUILD_NOT_FOUND');
    expectError(await vanity(new Client(app.url), g.id, nextVanity()), 401, 'ERR_UNAUTHENTICATED');
    expect((await owner.client.get(`/v1/guilds/${g.id}`)).status).toBe(200);
    expectError(await moderator.client.get(`/v1/guilds/${g.id}`), 403, 'ERR_FORBIDDEN');
    expectError(await new Client(app.url).get(`/v1/guilds/${g.id}`), 401, 'ERR_UNAUTHENTICATED');
  });

  it('answers 405 to POST (the guild endpoints are PUT) and 415 to a non-JSON body', async () => {
    const g = await guild();
    const res = await admin.client.post(`/v1/guilds/${g.id}/vanity`, { vanity_invite: 'abcd' });
    expectError(res, 405, 'ERR_METHOD_NOT_ALLOWED');
    expect(res.headers.get('allow')).toContain('PUT');
    const text = await admin.client.request('PUT', `/v1/guilds/${g.id}/vanity`, {
      raw: 'vanity_invite=abcd',
      contentType: 'text/plain',
    });
    expectError(text, 415, 'ERR_UNSUPPORTED_MEDIA_TYPE');
  });
});

describeApp('PUT /v1/guilds/{guild_id}/room-settings', () => {
  it('changes only the fields given and answers all the settings', async () => {
    const g = await guild();
    const owner = await login(app, { bot: loginBot, platformUserId: g.owner });
    const kiosk = await roomSettings(owner.client, g.id, { kiosk: true });
    expect(kiosk.status, JSON.stringify(kiosk.body)).toBe(200);
    expect(kiosk.body).toEqual({ ...RoomSettingsDefaults, kiosk: true });
    const more = await roomSettings(owner.client, g.id, {
      browser: 'tor',
      proxy: 'eu',
      allow_control_requests: false,
      start_url: 'https://example.org/start?q=1',
    });
    expect(more.body).toEqual({
      browser: 'tor',
      proxy: 'eu',
      start_url: 'https://example.org/start?q=1',
      kiosk: true,
      allow_control_requests: false,
    });
    expect((await owner.client.get(`/v1/guilds/${g.id}`)).body.room_settings).toEqual(more.body);
    // One audit per update of this guild, newest first, each naming what it changed.
    const audits = (await guildAudits(AuditCodes.GUILD_ROOM_SETTINGS_UPDATE)).filter(
      (a) => (a.data as { guild_id: string }).guild_id === g.id,
    );
    expect(audits.map((a) => a.data)).toEqual([
      {
        guild_id: g.id,
        browser: 'tor',
        proxy: 'eu',
        allow_control_requests: false,
        start_url: 'https://example.org/start?q=1',
      },
      { guild_id: g.id, kiosk: true },
    ]);
  });

  it('accepts a start_url of 2000 characters and refuses 2001, other schemes and non-URLs', async () => {
    const g = await guild();
    const prefix = 'https://example.com/';
    const url2000 = prefix + 'a'.repeat(2000 - prefix.length);
    const ok = await roomSettings(admin.client, g.id, { start_url: url2000 });
    expect(ok.status).toBe(200);
    expect(ok.body.start_url).toBe(url2000);
    for (const bad of [
      `${url2000}a`,
      'ftp://example.com/',
      'javascript:alert(1)',
      'https://',
      'example.com',
      'https://a b',
    ])
      expectError(await roomSettings(admin.client, g.id, { start_url: bad }), 400, 'ERR_VALIDATION');
  });

  it('answers 400 ERR_VALIDATION to a start_url the pattern passes but no browser parses, spending no write', async () => {
    const g = await guild();
    const owner = await login(app, { bot: loginBot, platformUserId: g.owner });
    for (const bad of ['http://[', 'http://%zz/', 'https://[::1/', 'http://a:99999/'])
      expectError(await roomSettings(owner.client, g.id, { start_url: bad }), 400, 'ERR_VALIDATION');
    // None of the refused PUTs spent one of the owner's writes: all WRITES_PER_USER valid ones pass.
    for (let i = 0; i < Limits.WRITES_PER_USER; i += 1) {
      const res = await roomSettings(owner.client, g.id, { kiosk: i % 2 === 0 });
      expect(res.status, `write ${i + 1}`).toBe(200);
    }
    expect((await owner.client.get(`/v1/guilds/${g.id}`)).body.room_settings.start_url).toBe(
      RoomSettingsDefaults.start_url,
    );
  });

  it.each([
    ['an empty body', {}],
    ['an unknown browser', { browser: 'chrome' }],
    ['an unknown proxy', { proxy: 'asia' }],
    ['kiosk as text', { kiosk: 'true' }],
    ['an unknown field', { theme: 'dark' }],
  ])('answers 400 ERR_VALIDATION on %s', async (_name, body) => {
    const g = await guild();
    expectError(await roomSettings(admin.client, g.id, body), 400, 'ERR_VALIDATION');
  });

  it('refuses a user who is neither owner, sponsor nor Admin (403) and unknown guilds (404)', async () => {
    const g = await guild();
    const someone = await login(app, { bot: loginBot });
    expectError(await roomSettings(someone.client, g.id, { kiosk: true }), 403, 'ERR_FORBIDDEN');
    expectError(await roomSettings(admin.client, nextIdentity(), { kiosk: true }), 404, 'ERR_GUILD_NOT_FOUND');
  });
});

/**
 * The caller loses the guild (another node's committed change of the guild row) after the request
 * could have read its right but before it writes: the test changes the locked row in a transaction
 * of its own, lets the request queue behind that row (or answer, if it does not wait), then commits.
 */
async function lostMeanwhile(db: postgres.Sql, guildId: string, change: string, run: () => Promise<any>) {
  const other = hold(db, async (tx) => {
    await tx`select id from guilds where chatplatform_id = ${guildId} for update`;
    await tx.unsafe(change);
  });
  await other.ready;
  const answer = run();
  await lockWaitersOr(db, 1, answer);
  await other.end();
  return answer;
}

// PGlite runs one transaction at a time, so the embedded store cannot interleave these; on
// PostgreSQL the test fixes the interleaving with a row lock and waits on pg_stat_activity.
describeApp('PUT /v1/guilds/{guild_id}/…: the right to manage is decided on the locked guild row', () => {
  const losses = {
    'a sponsor whose sponsorship is removed': 'sponsor',
    'an owner whose guild the bot reports with another owner id': 'owner',
  } as const;
  const writes = {
    vanity: {
      send: (by: Client, id: string) => vanity(by, id, nextVanity()),
      column: 'vanity_invite',
      unchanged: null,
      code: AuditCodes.GUILD_VANITY_SET,
    },
    'room-settings': {
      send: (by: Client, id: string) => roomSettings(by, id, { start_url: 'https://phish.example/' }),
      column: 'room_start_url',
      unchanged: RoomSettingsDefaults.start_url,
      code: AuditCodes.GUILD_ROOM_SETTINGS_UPDATE,
    },
  } as const;
  const cases = Object.entries(writes).flatMap(([path, write]) =>
    Object.entries(losses).map(([who, loss]) => [path, who, write, loss] as const),
  );

  it.skipIf(MODE !== 'cluster').each(cases)(
    'PUT %s by %s while it waits answers 403 ERR_FORBIDDEN, writing and recording nothing',
    async (_path, _who, write, loss) => {
      if (!sql) throw new Error('cluster only');
      const g = await guild({ withPremium: true });
      let caller: LoggedIn;
      let change: string;
      if (loss === 'sponsor') {
        caller = await login(app, { bot: loginBot });
        expect((await op.post(`/v1/admin/guilds/${g.id}/sponsors/add`, { user_id: caller.user.id })).status).toBe(200);
        change = `delete from guild_sponsors where user_id = ${caller.user.id}
          and guild_id = (select id from guilds where chatplatform_id = '${g.id}')`;
      } else {
        caller = await login(app, { bot: loginBot, platformUserId: g.owner });
        change = `update guilds set owner_chatplatform_id = '${nextIdentity()}' where chatplatform_id = '${g.id}'`;
      }
      const res = await lostMeanwhile(sql, g.id, change, () => write.send(caller.client, g.id));
      expectError(res, 403, 'ERR_FORBIDDEN');
      const [row] = await sql`select ${sql(write.column)} as value from guilds where chatplatform_id = ${g.id}`;
      expect(row?.value).toBe(write.unchanged);
      const audits = (await guildAudits(write.code)).filter((a) => (a.data as { guild_id: string }).guild_id === g.id);
      expect(audits).toEqual([]);
    },
  );
});

/**
 * An Admin the node's session cache knows, moved to `level` by a write it has not heard of (as
 * another node's commit whose invalidation is on its way); the app's clock stands still, so the
 * cached session does not expire.
 */
async function demotedBehindTheCache(level = 0): Promise<LoggedIn> {
  const who = await login(app, { bot: loginBot });
  await setLevel(app, who.user.id, 2);
  expect((await who.client.get('/v1/users/me')).body.user.permission_level).toBe(2);
  await app.database.db.execute(`update users set permission_level = ${level} where id = ${who.user.id}` as never);
  expect((await who.client.get('/v1/users/me')).body.user.permission_level).toBe(2);
  return who;
}

describeApp('PUT /v1/guilds/{guild_id}/…: the caller’s level is decided as stored', () => {
  it('answers 403 ERR_FORBIDDEN to an Admin demoted to User by a write the node’s session cache has not heard of, and changes no guild room settings or vanity', async () => {
    const g = await guild({ withPremium: true });
    const actor = await demotedBehindTheCache();
    expectError(await roomSettings(actor.client, g.id, { start_url: 'https://phish.example/' }), 403, 'ERR_FORBIDDEN');
    expectError(await vanity(actor.client, g.id, nextVanity()), 403, 'ERR_FORBIDDEN');
    const stored = (await admin.client.get(`/v1/guilds/${g.id}`)).body;
    expect(stored).toMatchObject({ vanity_invite: null, room_settings: { start_url: RoomSettingsDefaults.start_url } });
  });
});

describeApp('guild room settings and the room VM', () => {
  it('starts the guild chat’s VM with the guild’s settings (Tor, refused here before any browser runs)', async () => {
    const g = await guild({ withPremium: true });
    const chatId: number = (await vanity(admin.client, g.id, nextVanity())).body.chat_id;
    expect((await roomSettings(admin.client, g.id, { browser: 'tor' })).status).toBe(200);
    const owner = await login(app, { bot: loginBot });
    await setLevel(app, owner.user.id, 3);
    const res = await owner.client.post(`/v1/portal/chats/${chatId}/start`, {});
    expectError(res, 503, 'ERR_ROOM_START_FAILED');
    expect(res.body.message).toMatch(/Tor/);
  });
});

describeApp('POST /v1/admin/guilds/{guild_id}/premium, …/premium/revoke', () => {
  it('gives premium for days from now and records it; revoking ends it once', async () => {
    const g = await guild();
    const res = await premium(g.id, 30);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const until = new Date(clock.now().getTime() + 30 * DAY).toISOString();
    expect(res.body).toMatchObject({ chatplatform_id: g.id, has_premium: true, subscription_expires_at: until });
    const granted = (await guildAudits(AuditCodes.GUILD_PREMIUM_GRANT)).find(
      (a) => (a.data as { guild_id: string }).guild_id === g.id,
    );
    expect(granted).toMatchObject({ actorKind: 'operator', action: 'grant', data: { days: 30, expires_at: until } });

    const revoked = await op.post(`/v1/admin/guilds/${g.id}/premium/revoke`, { reason: 'refund' });
    expect(revoked.body).toMatchObject({ has_premium: false, subscription_expires_at: null });
    expect((await op.post(`/v1/admin/guilds/${g.id}/premium/revoke`)).status).toBe(200);
    const revokes = (await guildAudits(AuditCodes.GUILD_PREMIUM_REVOKE)).filter(
      (a) => (a.data as { guild_id: string }).guild_id === g.id,
    );
    expect(revokes).toHaveLength(1);
    expect(revokes[0]).toMatchObject({ reason: 'refund', action: 'revoke' });
  });

  it('takes an Admin session too; refuses Moderators (403) and the anonymous (401)', async () => {
    const g = await guild();
    const res = await premium(g.id, 5, admin.client);
    expect(res.status).toBe(200);
    const granted = (await guildAudits(AuditCodes.GUILD_PREMIUM_GRANT)).find(
      (a) => (a.data as { guild_id: string }).guild_id === g.id,
    );
    expect(granted).toMatchObject({ actorKind: 'user', actorId: admin.user.id });
    const moderator = await login(app, { bot: loginBot });
    await setLevel(app, moderator.user.id, 1);
    expectError(await premium(g.id, 5, moderator.client), 403, 'ERR_FORBIDDEN');
    expectError(await premium(g.id, 5, new Client(app.url)), 401, 'ERR_UNAUTHENTICATED');
  });

  it('answers 403 ERR_FORBIDDEN to an Admin demoted to User by a write the node’s session cache has not heard of: it grants no guild premium and revokes none', async () => {
    const g = await guild();
    const actor = await demotedBehindTheCache();
    expectError(await premium(g.id, 3650, actor.client), 403, 'ERR_FORBIDDEN');
    expect((await premium(g.id, 30)).status).toBe(200);
    expectError(await actor.client.post(`/v1/admin/guilds/${g.id}/premium/revoke`, {}), 403, 'ERR_FORBIDDEN');
    const until = new Date(clock.now().getTime() + 30 * DAY).toISOString();
    expect((await admin.client.get(`/v1/guilds/${g.id}`)).body.subscription_expires_at).toBe(until);
    const audits = [
      ...(await guildAudits(AuditCodes.GUILD_PREMIUM_GRANT)),
      ...(await guildAudits(AuditCodes.GUILD_PREMIUM_REVOKE)),
    ].filter((a) => a.actorId === actor.user.id);
    expect(audits).toEqual([]);
  });

  it('refuses days 0, 3651, fractions and text (400) and unknown guilds (404)', async () => {
    const g = await guild();
    for (const days of [0, 3651, 1.5, '3', -1])
      expectError(await op.post(`/v1/admin/guilds/${g.id}/premium`, { days }), 400, 'ERR_VALIDATION');
    expectError(await op.post(`/v1/admin/guilds/${g.id}/premium`, {}), 400, 'ERR_VALIDATION');
    expect((await premium(g.id, 3650)).status).toBe(200);
    expectError(await premium(nextIdentity(), 3), 404, 'ERR_GUILD_NOT_FOUND');
    expectError(await op.post(`/v1/admin/guilds/${nextIdentity()}/premium/revoke`, {}), 404, 'ERR_GUILD_NOT_FOUND');
  });
});

describeApp('POST /v1/admin/guilds/{guild_id}/sponsors/add, …/remove', () => {
  it('adds and removes a sponsor (idempotently, recorded once each); the sponsor manages the guild meanwhile', async () => {
    const g = await guild();
    const sponsor = await login(app, { bot: loginBot });
    const added = await op.post(`/v1/admin/guilds/${g.id}/sponsors/add`, { user_id: sponsor.user.id });
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    expect(added.body.sponsor_ids).toEqual([sponsor.user.id]);
    expect(
      (await op.post(`/v1/admin/guilds/${g.id}/sponsors/add`, { user_id: sponsor.user.id })).body.sponsor_ids,
    ).toEqual([sponsor.user.id]);
    expect((await roomSettings(sponsor.client, g.id, { proxy: 'us' })).status).toBe(200);
    expect((await sponsor.client.get(`/v1/guilds/${g.id}`)).body.sponsor_ids).toEqual([sponsor.user.id]);
    // Sponsors are not owners: the guild is not in their own list.
    expect((await sponsor.client.get('/v1/users/me/guilds')).body).toEqual([]);

    const removed = await op.post(`/v1/admin/guilds/${g.id}/sponsors/remove`, { user_id: sponsor.user.id });
    expect(removed.body.sponsor_ids).toEqual([]);
    expect((await op.post(`/v1/admin/guilds/${g.id}/sponsors/remove`, { user_id: sponsor.user.id })).status).toBe(200);
    expectError(await roomSettings(sponsor.client, g.id, { proxy: 'eu' }), 403, 'ERR_FORBIDDEN');

    const adds = (await guildAudits(AuditCodes.GUILD_SPONSOR_ADD)).filter((a) => a.targetUserId === sponsor.user.id);
    const removes = (await guildAudits(AuditCodes.GUILD_SPONSOR_REMOVE)).filter(
      (a) => a.targetUserId === sponsor.user.id,
    );
    expect(adds).toHaveLength(1);
    expect(removes).toHaveLength(1);
    expect(adds[0]).toMatchObject({ actorKind: 'operator', data: { guild_id: g.id } });
  });

  it('answers 403 ERR_FORBIDDEN to an Admin demoted to User by a write the node’s session cache has not heard of: it makes itself no sponsor of a guild, and removes none', async () => {
    const g = await guild();
    const sponsor = await login(app, { bot: loginBot });
    expect((await op.post(`/v1/admin/guilds/${g.id}/sponsors/add`, { user_id: sponsor.user.id })).status).toBe(200);
    const actor = await demotedBehindTheCache();
    const add = await actor.client.post(`/v1/admin/guilds/${g.id}/sponsors/add`, { user_id: actor.user.id });
    const remove = await actor.client.post(`/v1/admin/guilds/${g.id}/sponsors/remove`, { user_id: sponsor.user.id });
    expect([add.status, add.body.code, remove.status, remove.body.code]).toEqual([
      403,
      'ERR_FORBIDDEN',
      403,
      'ERR_FORBIDDEN',
    ]);
    expect((await admin.client.get(`/v1/guilds/${g.id}`)).body.sponsor_ids).toEqual([sponsor.user.id]);
    expect(
      [
        ...(await guildAudits(AuditCodes.GUILD_SPONSOR_ADD)),
        ...(await guildAudits(AuditCodes.GUILD_SPONSOR_REMOVE)),
      ].filter((a) => a.actorId === actor.user.id),
    ).toEqual([]);
  });

  it('answers 404 ERR_USER_NOT_FOUND for an unknown user, 404 ERR_GUILD_NOT_FOUND for an unknown guild', async () => {
    const g = await guild();
    expectError(
      await op.post(`/v1/admin/guilds/${g.id}/sponsors/add`, { user_id: 2147483000 }),
      404,
      'ERR_USER_NOT_FOUND',
    );
    expectError(
      await op.post(`/v1/admin/guilds/${nextIdentity()}/sponsors/add`, { user_id: admin.user.id }),
      404,
      'ERR_GUILD_NOT_FOUND',
    );
    expectError(await op.post(`/v1/admin/guilds/${g.id}/sponsors/add`, { user_id: '1' }), 400, 'ERR_VALIDATION');
  });

  // PGlite runs one transaction at a time; on PostgreSQL the test deletes the user in a
  // transaction of its own and lets the add wait for that row.
  it.skipIf(MODE !== 'cluster')(
    'answers 404 ERR_USER_NOT_FOUND, not 500, when the user is deleted while it runs',
    async () => {
      if (!sql) throw new Error('cluster only');
      const g = await guild();
      const doomed = await login(app, { bot: loginBot });
      const deletion = hold(sql, async (tx) => {
        await tx`select id from users where id = ${doomed.user.id} for update`;
        await tx`delete from users where id = ${doomed.user.id}`;
      });
      await deletion.ready;
      const add = op.post(`/v1/admin/guilds/${g.id}/sponsors/add`, { user_id: doomed.user.id });
      await lockWaiters(sql, 1);
      await deletion.end();
      expectError(await add, 404, 'ERR_USER_NOT_FOUND');
      expect((await admin.client.get(`/v1/guilds/${g.id}`)).body.sponsor_ids).toEqual([]);
    },
  );
});

describeApp('room:join {vanity}', () => {
  it('joins the guild chat, recorded with method vanity; unknown vanities and lapsed premium answer ERR_INVITE_NOT_FOUND', async () => {
    const g = await guild({ withPremium: true, name: 'Joinable' });
    const v = nextVanity();
    const set = await vanity(admin.client, g.id, v);
    expect(set.status).toBe(200);
    const chatId: number = set.body.chat_id;

    const visitor = await member(app);
    const ack = await visitor.socket.emitWithAck('room:join', { vanity: v });
    expect(ack, JSON.stringify(ack)).toMatchObject({ ok: true, chat: { id: chatId, type: 'public', owner_id: null } });
    expect((await visitor.client.get('/v1/portal/chats')).body.chats.map((c: { id: number }) => c.id)).toContain(
      chatId,
    );

    const moderator = await login(app, { bot: loginBot });
    await setLevel(app, moderator.user.id, 1);
    const activity = await moderator.client.get(`/v1/portal/chats/${chatId}/activity`);
    expect(activity.status).toBe(200);
    expect(activity.body.activity).toEqual([
      expect.objectContaining({ user_id: visitor.user.id, action: 'join', method: 'vanity', invite_code: null }),
    ]);

    const unknown = await visitor.socket.emitWithAck('room:join', { vanity: nextVanity() });
    expect(unknown).toMatchObject({ ok: false, code: 'ERR_INVITE_NOT_FOUND' });
    expect((await op.post(`/v1/admin/guilds/${g.id}/premium/revoke`, {})).status).toBe(200);
    const late = await member(app);
    expect(await late.socket.emitWithAck('room:join', { vanity: v })).toMatchObject({
      ok: false,
      code: 'ERR_INVITE_NOT_FOUND',
    });
    // The vanity stays reserved for its guild while premium is off.
    const other = await guild({ withPremium: true });
    expectError(await vanity(admin.client, other.id, v), 409, 'ERR_VANITY_TAKEN');
  });

  it('does not open the guild chat an Admin made private to its vanity (nor to its id); its members stay', async () => {
    const g = await guild({ withPremium: true, name: 'Made private' });
    const v = nextVanity();
    const set = await vanity(admin.client, g.id, v);
    expect(set.status).toBe(200);
    const chatId: number = set.body.chat_id;
    const early = await member(app);
    expect((await early.socket.emitWithAck('room:join', { vanity: v })).ok).toBe(true);
    const made = await admin.client.post(`/v1/portal/chats/${chatId}/config/update`, { type: 'private' });
    const before = await countRows(app, `select count(*) as n from chat_members where chat_id = ${chatId}`);
    expect(made.status, JSON.stringify(made.body)).toBe(200);

    const visitor = await member(app);
    for (const target of [{ chat_id: chatId }, { vanity: v }])
      expect(await visitor.socket.emitWithAck('room:join', target)).toMatchObject({
        ok: false,
        code: 'ERR_CANNOT_BROWSE_PRIVATE',
      });
    expect(await countRows(app, `select count(*) as n from chat_members where chat_id = ${chatId}`)).toBe(before);
    // One who joined while it was public still enters it by its vanity.
    expect(await early.socket.emitWithAck('room:join', { vanity: v })).toMatchObject({
      ok: true,
      chat: { id: chatId, type: 'private' },
    });
  });
});
