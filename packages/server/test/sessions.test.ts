import { Limits } from '@parlor/protocol';
import { eq } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SESSIONS_KEPT_MS } from '../src/modules/sessions/sessions.store.js';
import { FakeClock } from '../src/platform/clock.js';
import { deadlockVictimRuns, runAgainRuns } from '../src/platform/db/after-commit.js';
import { schema } from '../src/platform/db/index.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { join, keyedChat, type Member, member, sessionIdOf } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows, expectOnePartFailed, failUpdates, loggedTick } from './support/faults.js';
import { createLoginBot, login, nextIdentity, operator, setLevel } from './support/flows.js';
import { gateInserts, hold, lockWaiters, lockWaitersOr, loginUpToVerify } from './support/pg-locks.js';
import { closeAllSockets, connectSocket, disconnected } from './support/sockets.js';

let app: TestApp;
let bot: Client;
/** PostgreSQL (cluster project): the tests' own connection, to hold rows as another node would. */
let pg: postgres.Sql | undefined;
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  app = await startApp({ clock });
  bot = await createLoginBot(app);
  if (app.config.databaseUrl) pg = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await pg?.end({ timeout: 1 });
  await app?.close();
});

/** Logs the same identity in again from a new client (a new device). */
const device = async (platformUserId: string) => (await login(app, { bot, platformUserId })).client;

describeApp('GET /v1/users/me/sessions', () => {
  it('lists live sessions with suffix, address, agent, empty geo for private addresses, and is_current', async () => {
    const client = new Client(app.url, '10.1.2.3', app.publicApiKey);
    await login(app, { bot, client });
    const res = await client.get('/v1/users/me/sessions');
    expect(res.status).toBe(200);
    expect(res.body.history).toEqual([]);
    expect(res.body.sessions).toHaveLength(1);
    const [s] = res.body.sessions;
    expect(s).toMatchObject({
      token_suffix: client.cookie?.slice(-6),
      client_ip: client.ip,
      user_agent: expect.any(String),
      is_current: true,
      geo: {
        city: '',
        region_name: '',
        country_code: '',
        lat: 0,
        lon: 0,
        isp: '',
        org: '',
        is_mobile: false,
        is_proxy: false,
        is_hosting: false,
      },
    });
    expect(Date.parse(s.expires_at) - Date.parse(s.created_at)).toBe(Limits.SESSION_TTL_USER_MS);
  });

  it('fills geo from the offline database for a public address', async () => {
    const client = new Client(app.url, '8.8.8.8', app.publicApiKey);
    await login(app, { bot, client });
    const res = await client.get('/v1/users/me/sessions');
    expect(res.body.sessions[0].client_ip).toBe('8.8.8.8');
    expect(res.body.sessions[0].geo.country_code).toBe('US');
  });

  it('lists in history only the sessions over for less than 30 days, whether or not the retention sweep came by', async () => {
    const first = await login(app, { bot });
    const suffix = first.client.cookie?.slice(-6);
    expect((await first.client.post('/v1/authentication/logout', {})).status).toBe(200);
    clock.advance(SESSIONS_KEPT_MS - 1);
    const second = await device(first.platformUserId);
    const history = async () =>
      (await second.get('/v1/users/me/sessions')).body.history.map((h: { token_suffix: string }) => h.token_suffix);
    expect(await history()).toEqual([suffix]);
    clock.advance(1);
    expect(await history()).toEqual([]);
    // The sweep has not deleted it yet: the window is the clock's, not the sweep's.
    const stored = `select count(*) as n from sessions where user_id = ${first.user.id} and ended_at is not null`;
    expect(await countRows(app, stored)).toBe(1);
  });
});

describeApp('session limits', () => {
  it(`keeps ${Limits.MAX_SESSIONS_PER_USER} live sessions; the next login evicts the oldest`, async () => {
    const first = await login(app, { bot });
    const devices = [first.client];
    for (let i = 1; i < Limits.MAX_SESSIONS_PER_USER; i++) devices.push(await device(first.platformUserId));
    for (const d of devices) expect((await d.get('/v1/users/me')).status).toBe(200);
    const sixth = await device(first.platformUserId);
    const listed = await sixth.get('/v1/users/me/sessions');
    expect(listed.body.sessions).toHaveLength(Limits.MAX_SESSIONS_PER_USER);
    expect((await devices[0]?.get('/v1/users/me'))?.status).toBe(401);
    for (const d of devices.slice(1)) expect((await d.get('/v1/users/me')).status).toBe(200);
    expect(listed.body.history.map((h: { token_suffix: string }) => h.token_suffix)).toEqual([
      first.client.cookie?.slice(-6),
    ]);
  });

  it('expires a user session after 30 days, not before', async () => {
    const { client } = await login(app, { bot });
    clock.advance(Limits.SESSION_TTL_USER_MS - 1000);
    expect((await client.get('/v1/users/me')).status).toBe(200);
    clock.advance(1000);
    expect((await client.get('/v1/users/me')).status).toBe(401);
  });

  it('gives Admins 1-day sessions, and shortens live sessions on promotion', async () => {
    const { client, user, platformUserId } = await login(app, { bot });
    await setLevel(app, user.id, 2);
    const live = await client.get('/v1/users/me/sessions');
    expect(Date.parse(live.body.sessions[0].expires_at) - clock.now().getTime()).toBe(Limits.SESSION_TTL_STAFF_MS);
    const fresh = await device(platformUserId);
    const listed = await fresh.get('/v1/users/me/sessions');
    const current = listed.body.sessions.find((s: { is_current: boolean }) => s.is_current);
    expect(Date.parse(current.expires_at) - Date.parse(current.created_at)).toBe(Limits.SESSION_TTL_STAFF_MS);
    clock.advance(Limits.SESSION_TTL_STAFF_MS - 1000);
    expect((await fresh.get('/v1/users/me')).status).toBe(200);
    clock.advance(1000);
    expect((await fresh.get('/v1/users/me')).status).toBe(401);
  });

  it('gives the Owner 1-day sessions too, and Moderators 30-day ones', async () => {
    for (const [level, ttl] of [
      [3, Limits.SESSION_TTL_STAFF_MS],
      [1, Limits.SESSION_TTL_USER_MS],
    ] as const) {
      const { user, platformUserId } = await login(app, { bot });
      await setLevel(app, user.id, level);
      const fresh = await device(platformUserId);
      const current = (await fresh.get('/v1/users/me/sessions')).body.sessions.find(
        (s: { is_current: boolean }) => s.is_current,
      );
      expect(Date.parse(current.expires_at) - Date.parse(current.created_at), `level ${level}`).toBe(ttl);
    }
  });
});

describeApp('POST /v1/users/me/sessions/{token_suffix}/destroy', () => {
  it('ends another session of mine', async () => {
    const a = await login(app, { bot });
    const b = await device(a.platformUserId);
    const res = await a.client.post(`/v1/users/me/sessions/${b.cookie?.slice(-6)}/destroy`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ destroyed: true });
    expect((await b.get('/v1/users/me')).status).toBe(401);
    expect((await a.client.get('/v1/users/me')).status).toBe(200);
  });

  it('answers 400 ERR_CANNOT_DESTROY_CURRENT_SESSION for the current session', async () => {
    const { client } = await login(app, { bot });
    const res = await client.post(`/v1/users/me/sessions/${client.cookie?.slice(-6)}/destroy`);
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('ERR_CANNOT_DESTROY_CURRENT_SESSION');
    expect((await client.get('/v1/users/me')).status).toBe(200);
  });

  it("answers 404 ERR_SESSION_NOT_FOUND for an unknown suffix or another user's session", async () => {
    const a = await login(app, { bot });
    const other = await login(app, { bot });
    // Spec 4.2 rule 2: any suffix of no live session of the caller, whatever its length, is unknown.
    for (const suffix of [
      'zzzzzz',
      other.client.cookie?.slice(-6),
      'z'.repeat(17),
      `${a.client.cookie?.slice(-6)}${'z'.repeat(200)}`,
    ]) {
      const res = await a.client.post(`/v1/users/me/sessions/${suffix}/destroy`);
      expect(res.status).toBe(404);
      expect(res.body.code).toBe('ERR_SESSION_NOT_FOUND');
    }
    expect((await other.client.get('/v1/users/me')).status).toBe(200);
  });
});

describeApp('POST /v1/users/me/sessions/destroy', () => {
  it('ends every session but the current one and counts them', async () => {
    const a = await login(app, { bot });
    const others = [await device(a.platformUserId), await device(a.platformUserId)];
    const res = await a.client.post('/v1/users/me/sessions/destroy', {});
    expect(res.body).toEqual({ destroyed: 2 });
    for (const o of others) expect((await o.get('/v1/users/me')).status).toBe(401);
    expect((await a.client.get('/v1/users/me')).status).toBe(200);
    expect((await a.client.post('/v1/users/me/sessions/destroy')).body).toEqual({ destroyed: 0 });
  });

  it('refuses a body with fields', async () => {
    const a = await login(app, { bot });
    const res = await a.client.post('/v1/users/me/sessions/destroy', { all: true });
    expect(res.status).toBe(400);
    expect(res.body.errors).toEqual([{ path: 'body/all', message: 'is not a known field' }]);
  });
});

describeApp('signing out while timed out (docs/api.md, Moderation)', () => {
  it('a timed-out user may end another session, the others and its own; every other route answers 403 ERR_TIMED_OUT', async () => {
    const a = await login(app, { bot });
    const [b, c] = [await device(a.platformUserId), await device(a.platformUserId)];
    const res = await operator(app).post('/v1/admin/punishments/timeout', { user_id: a.user.id, duration: 600 });
    expect(res.status).toBe(200);
    for (const refused of [await a.client.get('/v1/users/me/sessions'), await a.client.get('/v1/users/me')])
      expect([refused.status, refused.body.code]).toEqual([403, 'ERR_TIMED_OUT']);

    const one = await a.client.post(`/v1/users/me/sessions/${b.cookie?.slice(-6)}/destroy`);
    expect([one.status, one.body]).toEqual([200, { destroyed: true }]);
    expect((await b.get('/v1/users/me')).status).toBe(401);
    const others = await a.client.post('/v1/users/me/sessions/destroy', {});
    expect([others.status, others.body]).toEqual([200, { destroyed: 1 }]);
    expect((await c.get('/v1/users/me')).status).toBe(401);

    // The cookie as another tab holds it: the logout clears it from this client.
    const sameCookie = a.client.on(app);
    const out = await a.client.post('/v1/authentication/logout', {});
    expect([out.status, out.body]).toEqual([200, { ok: true }]);
    expect((await sameCookie.get('/v1/users/me')).status).toBe(401);
    expect(
      await countRows(app, `select count(*) as n from sessions where user_id = ${a.user.id} and ended_at is null`),
    ).toBe(0);
    // Still timed out: a new login is refused until the timeout ends.
    const again = await new Client(app.url, nextIp(), app.publicApiKey).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: a.platformUserId,
    });
    expect([again.status, again.body.code]).toEqual([403, 'ERR_TIMED_OUT']);
  });

  it('still authenticates and checks the origin: no session is 401, a foreign origin 403, and nothing ends', async () => {
    const a = await login(app, { bot });
    await device(a.platformUserId);
    expect(
      (await operator(app).post('/v1/admin/punishments/timeout', { user_id: a.user.id, duration: 600 })).status,
    ).toBe(200);
    const anonymous = new Client(app.url, nextIp(), app.publicApiKey);
    for (const path of ['/v1/authentication/logout', '/v1/users/me/sessions/destroy']) {
      const res = await anonymous.post(path, {});
      expect([res.status, res.body.code]).toEqual([401, 'ERR_UNAUTHENTICATED']);
      const foreign = await a.client.post(path, {}, { headers: { origin: 'https://evil.example' } });
      expect([foreign.status, foreign.body.code]).toEqual([403, 'ERR_ORIGIN_NOT_ALLOWED']);
    }
    expect(
      await countRows(app, `select count(*) as n from sessions where user_id = ${a.user.id} and ended_at is null`),
    ).toBe(2);
  });
});

describeApp('login codes and time', () => {
  it('answers POST /v1/authentication/request with expires_at ten minutes away and never the code', async () => {
    const res = await new Client(app.url, nextIp(), app.publicApiKey).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ expires_at: new Date(clock.now().getTime() + Limits.LOGIN_CODE_TTL_MS).toISOString() });
  });

  it('accepts a code just before 10 minutes and refuses it at 10 minutes', async () => {
    const ids = ['900001', '900002'];
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const codes: string[] = [];
    for (const id of ids) {
      await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
      const fetched = await bot.post('/v1/authentication/bot/login-code', {
        platform: 'platform_a',
        platform_user_id: id,
        platform_username: 'x',
        platform_avatar_url: '',
      });
      codes.push(fetched.body.code);
    }
    clock.advance(Limits.LOGIN_CODE_TTL_MS - 1);
    expect((await client.post('/v1/authentication/verify', { code: codes[0] })).status).toBe(200);
    clock.advance(1);
    const late = await client.post('/v1/authentication/verify', { code: codes[1] });
    expect(late.status).toBe(400);
    expect(late.body.code).toBe('ERR_INVALID_CODE');
  });
});

describeApp('notifications written at login', () => {
  it('welcomes a new account, and tells a known account about a new address only', async () => {
    const { user, platformUserId, client } = await login(app, { bot });
    await login(app, { bot, platformUserId, client: new Client(app.url, client.ip, app.publicApiKey) });
    const rows = async () =>
      (await app.database.db.execute(
        `select title, body from notifications where user_id = ${user.id} order by id` as never,
      )) as unknown as { rows: { title: string; body: string }[] } | { title: string; body: string }[];
    const list = (r: Awaited<ReturnType<typeof rows>>) => ('rows' in r ? r.rows : r);
    expect(list(await rows()).map((n) => n.title)).toEqual(['Welcome to Parlor']);
    const elsewhere = new Client(app.url, '203.0.113.77', app.publicApiKey);
    await login(app, { bot, platformUserId, client: elsewhere });
    const after = list(await rows());
    expect(after.map((n) => n.title)).toEqual(['Welcome to Parlor', 'New login']);
    expect(after[1]?.body).toContain('203.0.113.77');
  });

  it('tells of an address again once its last session is over for 30 days, whether or not the retention sweep came by', async () => {
    // Two accounts, each signed in from its own address and signed out at the same instant.
    const [kept, aged] = [await login(app, { bot }), await login(app, { bot })];
    for (const u of [kept, aged]) expect((await u.client.post('/v1/authentication/logout', {})).status).toBe(200);
    const newLogins = async (userId: number) =>
      countRows(app, `select count(*) as n from notifications where user_id = ${userId} and title = 'New login'`);
    const again = async (u: typeof kept) =>
      login(app, { bot, platformUserId: u.platformUserId, client: new Client(app.url, u.client.ip, app.publicApiKey) });
    clock.advance(SESSIONS_KEPT_MS - 1);
    await again(kept);
    expect(await newLogins(kept.user.id)).toBe(0);
    clock.advance(1);
    await again(aged);
    expect(await newLogins(aged.user.id)).toBe(1);
    // The sweep has not deleted the old session yet: the window is the clock's, not the sweep's.
    const stored = `select count(*) as n from sessions where user_id = ${aged.user.id} and ended_at is not null`;
    expect(await countRows(app, stored)).toBe(1);
  });
});

describeApp('session activity', () => {
  it('records when each session was last seen, at most once a minute, for concurrent requests too', async () => {
    const a = await device('activity-user');
    const b = await device('activity-user');
    const me = (await a.get('/v1/users/me')).body;
    const userId = (me.user?.id ?? me.id) as number;
    const seen = async () =>
      (
        await app.database.db
          .select({ lastSeenAt: schema.sessions.lastSeenAt })
          .from(schema.sessions)
          .where(eq(schema.sessions.userId, userId))
      ).map((r) => r.lastSeenAt?.getTime());
    expect(await seen()).toHaveLength(2);
    clock.advance(61_000);
    const at = clock.now().getTime();
    const answers = await Promise.all([a.get('/v1/users/me'), b.get('/v1/users/me'), a.get('/v1/users/me')]);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(await seen()).toEqual([at, at]);
    // Half a minute later, requests of both sessions write nothing.
    clock.advance(30_000);
    const again = await Promise.all([a.get('/v1/users/me'), b.get('/v1/users/me')]);
    expect(again.map((r) => r.status)).toEqual([200, 200]);
    expect(await seen()).toEqual([at, at]);
    // Past the minute, only the session that made a request is written.
    clock.advance(31_000);
    const later = clock.now().getTime();
    expect((await a.get('/v1/users/me')).status).toBe(200);
    expect((await seen()).sort((x, y) => (x ?? 0) - (y ?? 0))).toEqual([at, later]);
  });
});

const HOUR_MS = 3600_000;
const db = () => app.database.db;
const sessionRow = async (id: number) =>
  (await db().select().from(schema.sessions).where(eq(schema.sessions.id, id)))[0];
const keyRows = (sessionId: number) =>
  countRows(app, `select count(*) as n from session_keys where session_id = ${sessionId}`);
const epochOf = async (chatId: number) =>
  Number(
    (await db().select({ epoch: schema.chats.epoch }).from(schema.chats).where(eq(schema.chats.id, chatId)))[0]?.epoch,
  );

/** Moves the clock a second past the expiry of a member's session. */
async function pastExpiryOf(m: Member) {
  const row = await sessionRow(m.sessionId);
  if (!row) throw new Error('no session row');
  clock.advance(row.expiresAt.getTime() - clock.now().getTime() + 1000);
}

/**
 * A member with a key and a socket, on a 1-day (Admin) session, in a keyed chat whose owner's
 * session ends 12 hours after it: the member's expiry leaves the owner there to see the rekey.
 */
async function expiringMember() {
  const guest = await member(app, { level: 2 });
  clock.advance(12 * HOUR_MS);
  const chat = await keyedChat(app);
  expect((await join(guest, { chat_id: chat.chatId })).ok).toBe(true);
  return { guest, chat, epoch: await epochOf(chat.chatId) };
}

/** What a session ended by its expiry leaves: over at its expiry, no key, its chat one epoch on. */
async function expectEndedByExpiry(guest: Member, chat: { chatId: number }, epoch: number) {
  const row = await sessionRow(guest.sessionId);
  expect({ endedAt: row?.endedAt, endReason: row?.endReason }).toEqual({
    endedAt: row?.expiresAt,
    endReason: 'expired',
  });
  expect(await keyRows(guest.sessionId)).toBe(0);
  expect(await epochOf(chat.chatId)).toBe(epoch + 1);
}

describeApp('session expiry', () => {
  it('drops the socket of a session when it expires, removes its key and moves its chats to a new epoch', async () => {
    const { guest, chat, epoch } = await expiringMember();
    await pastExpiryOf(guest);
    // No request of the guest's: the node finds its socket past the session's expiry.
    expect(await disconnected(guest.socket)).toBe('io server disconnect');
    const rekey = await chat.owner.socket.next('room:rekey', (p) => p.chat_id === chat.chatId && p.epoch > epoch);
    expect(rekey).toEqual({ chat_id: chat.chatId, epoch: epoch + 1 });
    // The guest's only session: its user has none left, so every session of it is dropped (null).
    expect(await chat.owner.socket.next('portal:key_removed', (p) => p.chat_id === chat.chatId)).toEqual({
      chat_id: chat.chatId,
      user_id: guest.user.id,
      session_id: null,
    });
    await expectEndedByExpiry(guest, chat, epoch);
    await expect(connectSocket(app.url, guest.client)).rejects.toThrow('ERR_UNAUTHENTICATED');
  });

  it('serves no event of a socket past its expiry: room:join is refused (or cannot be sent) and makes no member', async () => {
    const guest = await member(app, { level: 2 });
    clock.advance(12 * HOUR_MS);
    const chat = await keyedChat(app);
    await pastExpiryOf(guest);
    // Sent at once: the node's check may or may not have dropped the socket yet.
    const answer = await Promise.race([
      guest.socket.emitWithAck('room:join', { chat_id: chat.chatId } as never) as Promise<{ code?: string }>,
      disconnected(guest.socket).then(() => ({ code: 'disconnected' })),
    ]);
    expect(['ERR_UNAUTHENTICATED', 'disconnected']).toContain(answer.code);
    await disconnected(guest.socket);
    const members = `select count(*) as n from chat_members where chat_id = ${chat.chatId} and user_id = ${guest.user.id}`;
    expect(await countRows(app, members)).toBe(0);
  });

  it('the expiry sweep ends a session that has no socket as a logout does, once when two sweeps run at once', async () => {
    const { guest, chat, epoch } = await expiringMember();
    guest.socket.close();
    await pastExpiryOf(guest);
    const sweep = () => app.services.sessions.sweepExpired();
    const [a, b] = await Promise.all([sweep(), sweep()]);
    // Sessions of earlier tests expired too; the guest's is ended once, by one of the two.
    expect(a + b).toBeGreaterThanOrEqual(1);
    await expectEndedByExpiry(guest, chat, epoch);
    await chat.owner.socket.next('room:rekey', (p) => p.chat_id === chat.chatId && p.epoch === epoch + 1);
    await chat.owner.socket.next('portal:key_removed', (p) => p.user_id === guest.user.id && p.session_id === null);
    expect(await app.services.sessions.sweepExpired()).toBe(0);
  });

  it('the expiry sweep goes past a user whose sessions cannot be ended: the later ones end in the same tick, the failure is logged with the user', async () => {
    clock.advance(1000);
    const a = await login(app, { bot });
    clock.advance(1);
    const b = await login(app, { bot });
    const [aId, bId] = [await sessionIdOf(app, a.client), await sessionIdOf(app, b.client)];
    // Every session that expires before them ends first: the tick below meets a's, then b's.
    clock.advance(Limits.SESSION_TTL_USER_MS - 1000);
    await app.services.sessions.sweepExpired();
    const ended = (id: number) =>
      countRows(app, `select count(*) as n from sessions where id = ${id} and end_reason = 'expired'`);
    const lift = await failUpdates(app, 'sessions', `old.id = ${aId}`);
    try {
      clock.advance(2000);
      // Batches of one: the second one reads past a's session, which the first could not end.
      const lines = await loggedTick('session-expiry', () =>
        app.services.sessions.sweepExpired({ batch: 1, maxBatches: 2 }),
      );
      expect([await ended(aId), await ended(bId)]).toEqual([0, 1]);
      expectOnePartFailed(lines, 'session-expiry', { userId: a.user.id });
      expect(JSON.stringify(lines)).not.toContain(a.client.cookie as string);
    } finally {
      await lift();
    }
    // The next tick ends it.
    expect(await app.services.sessions.sweepExpired()).toBe(1);
    expect(await ended(aId)).toBe(1);
  });

  it('a request with an expired session answers 401 and has ended it by then', async () => {
    const { guest, chat, epoch } = await expiringMember();
    guest.socket.close();
    await pastExpiryOf(guest);
    expect((await guest.client.get('/v1/users/me')).status).toBe(401);
    await expectEndedByExpiry(guest, chat, epoch);
  });
});

/** Holds the next handshake after its session check, before the connection joins its rooms. */
function holdNextHandshake() {
  let reached!: () => void;
  const atHold = new Promise<void>((resolve) => {
    reached = resolve;
  });
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  let holding = true;
  app.services.realtime.io.use((_socket, next) => {
    if (!holding) return next();
    holding = false;
    reached();
    void held.then(() => next());
  });
  return { atHold, release };
}

describeApp('a session that ends while its socket handshake runs', () => {
  it.each(['logout', 'eviction at a sixth login'])(
    'drops the socket once it is in its session room (%s between the check and the join)',
    async (how) => {
      const guest = await login(app, { bot });
      const hold = holdNextHandshake();
      const connecting = connectSocket(app.url, guest.client);
      await hold.atHold;
      if (how === 'logout') {
        expect((await guest.client.post('/v1/authentication/logout', {})).status).toBe(200);
      } else {
        for (let i = 0; i < Limits.MAX_SESSIONS_PER_USER; i++) await device(guest.platformUserId);
      }
      expect((await guest.client.get('/v1/users/me')).status).toBe(401);
      hold.release();
      const socket = await connecting;
      await disconnected(socket);
      expect(socket.connected).toBe(false);
    },
  );
});

describeApp('a user change while its socket handshake runs', () => {
  it('drops the socket of a demoted Admin once it is in its rooms; the reconnection is a User', async () => {
    const { chatId } = await keyedChat(app, 'private');
    const admin = await login(app, { bot });
    await setLevel(app, admin.user.id, 2);
    const hold = holdNextHandshake();
    const connecting = connectSocket(app.url, admin.client);
    await hold.atHold;
    // The handshake read level 2; the demotion's drop of the user's sockets finds none yet.
    await setLevel(app, admin.user.id, 0);
    hold.release();
    const socket = await connecting;
    await disconnected(socket);
    expect(socket.connected).toBe(false);
    const again = await connectSocket(app.url, admin.client);
    const answer = (await again.emitWithAck('room:join', { chat_id: chatId } as never)) as { code?: string };
    expect(answer.code).toBe('ERR_CANNOT_BROWSE_PRIVATE');
  });

  it('drops the socket of a user renamed between the check and the join', async () => {
    const guest = await login(app, { bot });
    const hold = holdNextHandshake();
    const connecting = connectSocket(app.url, guest.client);
    await hold.atHold;
    const renamed = `renamed_${guest.user.id}`;
    expect((await operator(app).post(`/v1/admin/users/${guest.user.id}/update`, { username: renamed })).status).toBe(
      200,
    );
    hold.release();
    const socket = await connecting;
    await disconnected(socket);
    expect(socket.connected).toBe(false);
  });
});

/**
 * docs/api.md Moderation, lock order: the user's chat rows, then the user's row, then session
 * rows. A login that evicts a keyed session raises the user's chats' epochs, and so does the
 * logout of a keyed session: the login took the user's row before the chats and the logout its
 * session row before both, so the two deadlocked (PostgreSQL's 1 s check, then one ran again).
 * The test holds the login at its new session's insert (a trigger it gates), with what it has
 * locked by then, while the logout starts. PGlite runs one transaction at a time.
 */
describeApp('a login that evicts a keyed session and a logout of the same user (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')('both answer 200 without a deadlock; the oldest session is evicted', async () => {
    const db = pg as postgres.Sql;
    const { owner: oldest, chatId } = await keyedChat(app);
    const sessions = [oldest];
    for (let i = 1; i < Limits.MAX_SESSIONS_PER_USER; i++)
      sessions.push(await member(app, { platformUserId: oldest.platformUserId }));
    const leaving = sessions[2] as Member;
    const next = await loginUpToVerify(app, oldest.platformUserId);
    const epochBefore = await countRows(app, `select epoch as n from chats where id = ${chatId}`);
    const before = deadlockVictimRuns();
    const gate = await gateInserts(db, 'sessions', `new.user_id = ${oldest.user.id}`);
    let answers: Awaited<ReturnType<typeof next.verify>>[];
    try {
      const verify = next.verify();
      await lockWaiters(db, 1);
      const logout = leaving.client.post('/v1/authentication/logout', {});
      await lockWaiters(db, 2);
      await gate.open();
      answers = await Promise.all([verify, logout]);
    } finally {
      await gate.close();
    }
    expect({
      login: answers[0]?.status,
      logout: answers[1]?.status,
      deadlocks: deadlockVictimRuns() - before,
    }).toEqual({ login: 200, logout: 200, deadlocks: 0 });
    const ended = (id: number) =>
      countRows(app, `select count(*) as n from sessions where id = ${id} and ended_at is not null`);
    const keys = (id: number) => countRows(app, `select count(*) as n from session_keys where session_id = ${id}`);
    expect({
      evicted: await ended(oldest.sessionId),
      loggedOut: await ended(leaving.sessionId),
      keys: (await keys(oldest.sessionId)) + (await keys(leaving.sessionId)),
      live: await countRows(
        app,
        `select count(*) as n from sessions where user_id = ${oldest.user.id} and ended_at is null`,
      ),
    }).toEqual({ evicted: 1, loggedOut: 1, keys: 0, live: Limits.MAX_SESSIONS_PER_USER - 1 });
    // Both ends removed a key: the chat moved on twice.
    expect(await countRows(app, `select epoch as n from chats where id = ${chatId}`)).toBe(epochBefore + 2);
  });
});

/**
 * Logins of one user at the cap at the same time each evict the oldest session left when they
 * get the user's row, which is not the one each read before (unlocked) to decide whether to lock
 * the user's chats first. A login that read a keyless oldest session locked nothing ahead, then
 * evicted a keyed one and had to run again (RunAgain, keys.service removeSessionsIn). So a login
 * at the cap locks ahead when any live session has a key. PGlite runs one transaction at a time.
 */
describeApp('two logins of a user at the cap whose oldest session has no key (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')('both answer 200 and neither runs again; the two oldest are evicted', async () => {
    const db = pg as postgres.Sql;
    const oldest = await login(app, { bot });
    const keyed: Member[] = [];
    for (let i = 1; i < Limits.MAX_SESSIONS_PER_USER; i++)
      keyed.push(await member(app, { platformUserId: oldest.platformUserId }));
    const oldestId = await sessionIdOf(app, oldest.client);
    const first = await loginUpToVerify(app, oldest.platformUserId);
    const before = runAgainRuns();
    const gate = await gateInserts(db, 'sessions', `new.user_id = ${oldest.user.id}`);
    let answers: Awaited<ReturnType<typeof first.verify>>[];
    try {
      const a = first.verify();
      await lockWaiters(db, 1);
      // An identity has one code at a time: the second login's comes once the first used its own.
      const second = await loginUpToVerify(app, oldest.platformUserId);
      const b = second.verify();
      await lockWaiters(db, 2);
      await gate.open();
      answers = await Promise.all([a, b]);
    } finally {
      await gate.close();
    }
    expect({
      first: answers[0]?.status,
      second: answers[1]?.status,
      runsAgain: runAgainRuns() - before,
    }).toEqual({ first: 200, second: 200, runsAgain: 0 });
    const ended = (id: number) =>
      countRows(app, `select count(*) as n from sessions where id = ${id} and end_reason = 'evicted'`);
    expect([await ended(oldestId), await ended((keyed[0] as Member).sessionId)]).toEqual([1, 1]);
  });
});

/**
 * A login at the cap chooses its evictions among the live sessions it has locked; a destroy ending
 * some of them holds their rows (without the user's row: none has a key), so the login waits for
 * it and counts only what it left: the two run one after the other (the destroy first leaves the
 * login below the cap, evicting nothing). Here the destroy waits for a session row another
 * transaction holds while the login comes. PGlite runs one transaction at a time.
 */
describeApp('a login at the cap while its oldest session destroys others (PostgreSQL)', () => {
  /** S1..S5 of one user (none keyed), S2's row held by another transaction, and a sixth login up to its verify. */
  const atCapWithS2Held = async () => {
    const db = pg as postgres.Sql;
    const first = await login(app, { bot });
    const clients: Client[] = [first.client];
    for (let i = 1; i < Limits.MAX_SESSIONS_PER_USER; i++) {
      clock.advance(1000);
      clients.push((await login(app, { bot, platformUserId: first.platformUserId })).client);
    }
    const next = await loginUpToVerify(app, first.platformUserId);
    const s2Id = await sessionIdOf(app, clients[1] as Client);
    const holder = hold(db, (tx) => tx`select id from sessions where id = ${s2Id} for update`);
    await holder.ready;
    /** Runs `destroy` (by S1), then the sixth login once the destroy waits; answers what came of both. */
    const race = async (destroy: () => Promise<{ status: number }>) => {
      const destroying = destroy();
      await lockWaiters(db, 1);
      const verify = next.verify();
      await lockWaiters(db, 2);
      await holder.end();
      const [d, v] = await Promise.all([destroying, verify]);
      const live = await countRows(
        app,
        `select count(*) as n from sessions where user_id = ${first.user.id} and ended_at is null`,
      );
      const s1 = (await (clients[0] as Client).get('/v1/users/me')).status;
      return { destroy: d.status, login: v.status, live, s1 };
    };
    return { s1: clients[0] as Client, s2: clients[1] as Client, race };
  };

  it.skipIf(MODE === 'embedded')(
    'destroying the others first: the login finds S1 alone and evicts nothing (S1 and the new session live)',
    async () => {
      const { s1, race } = await atCapWithS2Held();
      expect(await race(() => s1.post('/v1/users/me/sessions/destroy', {}))).toEqual({
        destroy: 200,
        login: 200,
        live: 2,
        s1: 200,
      });
    },
  );

  it.skipIf(MODE === 'embedded')(
    'destroying S2 by suffix first: the login finds four live and evicts nothing (five live, S1 among them)',
    async () => {
      const { s1, s2, race } = await atCapWithS2Held();
      expect(await race(() => s1.post(`/v1/users/me/sessions/${s2.cookie?.slice(-6)}/destroy`, {}))).toEqual({
        destroy: 200,
        login: 200,
        live: 5,
        s1: 200,
      });
    },
  );
});

/**
 * A destroy acts for its session only while that session is live: it locks the caller's session
 * row (with those it ends, in id order) after the locks that come ahead of session rows, and a
 * session that ended while its request waited answers 401 and ends nothing (spec 4.2 "all
 * sessions except the current one"; spec 5 "the evicted session's cookie becomes invalid").
 * The test holds rows as another transaction would. PGlite runs one transaction at a time.
 */
describeApp('a destroy by a session that ends while the destroy waits (PostgreSQL)', () => {
  const live = async (c: Client) => (await c.get('/v1/users/me')).status;
  const suffix = (c: Client) => c.cookie?.slice(-6);
  /**
   * A user with sessions A, B and C (C keyed: its end takes the user's row ahead of session rows),
   * and the user's row held by another transaction until `holder.end()`.
   */
  const userRowHeld = async () => {
    const db = pg as postgres.Sql;
    const a = await login(app, { bot });
    const b = await device(a.platformUserId);
    const c = await member(app, { platformUserId: a.platformUserId });
    const holder = hold(db, (tx) => tx`select id from users where id = ${a.user.id} for update`);
    await holder.ready;
    return { db, a, b, c, holder };
  };

  it.skipIf(MODE === 'embedded')(
    'destroying the others: a session destroyed while it waited for the user row answers 401 and ends no other',
    async () => {
      const { db, a, b, c, holder } = await userRowHeld();
      const bDestroysOthers = b.post('/v1/users/me/sessions/destroy', {});
      await lockWaiters(db, 1);
      // Meanwhile A destroys B: it commits and answers; B's cookie is then refused.
      const aDestroysB = await a.client.post(`/v1/users/me/sessions/${suffix(b)}/destroy`, {});
      expect([aDestroysB.status, aDestroysB.body]).toEqual([200, { destroyed: true }]);
      expect(await live(b)).toBe(401);
      await holder.end();
      const answer = await bDestroysOthers;
      expect([answer.status, answer.body.code]).toEqual([401, 'ERR_UNAUTHENTICATED']);
      expect({ a: await live(a.client), c: await live(c.client) }).toEqual({ a: 200, c: 200 });
    },
  );

  it.skipIf(MODE === 'embedded')(
    'destroying one: a session destroyed while it waited for the user row answers 401 and ends nothing',
    async () => {
      const { db, a, b, c, holder } = await userRowHeld();
      // A destroys the keyed C: it waits for the user's row.
      const aDestroysC = a.client.post(`/v1/users/me/sessions/${suffix(c.client)}/destroy`, {});
      await lockWaiters(db, 1);
      const bDestroysA = await b.post(`/v1/users/me/sessions/${suffix(a.client)}/destroy`, {});
      expect([bDestroysA.status, bDestroysA.body]).toEqual([200, { destroyed: true }]);
      await holder.end();
      const answer = await aDestroysC;
      expect([answer.status, answer.body.code]).toEqual([401, 'ERR_UNAUTHENTICATED']);
      expect({ b: await live(b), c: await live(c.client) }).toEqual({ b: 200, c: 200 });
    },
  );

  it.skipIf(MODE === 'embedded')(
    'two sessions destroying each other run one after the other: the second answers 401, without a deadlock',
    async () => {
      const db = pg as postgres.Sql;
      const a = await login(app, { bot });
      const b = await device(a.platformUserId);
      const c = await device(a.platformUserId);
      const cId = await sessionIdOf(app, c);
      const before = deadlockVictimRuns();
      // Another transaction holds C's row: B's "destroy the others" has taken A's and its own, and
      // waits for C's; A's destroy of B then waits for A's.
      const holder = hold(db, (tx) => tx`select id from sessions where id = ${cId} for update`);
      await holder.ready;
      const bDestroysOthers = b.post('/v1/users/me/sessions/destroy', {});
      await lockWaiters(db, 1);
      const aDestroysB = a.client.post(`/v1/users/me/sessions/${suffix(b)}/destroy`, {});
      await lockWaitersOr(db, 2, aDestroysB);
      await holder.end();
      const [first, second] = await Promise.all([bDestroysOthers, aDestroysB]);
      expect({
        b: [first.status, first.body],
        a: [second.status, second.body.code],
        deadlocks: deadlockVictimRuns() - before,
      }).toEqual({ b: [200, { destroyed: 2 }], a: [401, 'ERR_UNAUTHENTICATED'], deadlocks: 0 });
      expect({ a: await live(a.client), b: await live(b), c: await live(c) }).toEqual({ a: 401, b: 200, c: 401 });
    },
  );
});
