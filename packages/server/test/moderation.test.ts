import { Limits } from '@parlor/protocol';
import { generateKeyPair, publicKeyToBase64 } from '@parlor/sdk';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { makeMessagesStore } from '../src/modules/messages/messages.store.js';
import { FakeClock } from '../src/platform/clock.js';
import { deadlockVictimRuns } from '../src/platform/db/after-commit.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyEpoch, keyedChat, type Member, member, sessionIdOf } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows, failInserts } from './support/faults.js';
import { createBot, login, operator, setLevel } from './support/flows.js';
import { gateInserts, hold, lockWaiters, lockWaitersOr, loginUpToVerify, racingUserRow } from './support/pg-locks.js';
import { closeAllSockets, connectSocket, disconnected } from './support/sockets.js';

let app: TestApp;
/** PostgreSQL (cluster project): the tests' own connection, to hold rows as another node would. */
let sql: postgres.Sql | undefined;
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

/** A keyed public chat with a guest member who also holds the chat key. */
async function chatWithGuest(type: 'public' | 'private' = 'public') {
  const base = await keyedChat(app, type);
  const guest = await member(app);
  if (type === 'private') {
    const invite = await base.owner.client.post(`/v1/portal/chats/${base.chatId}/invites/create`, {});
    expect((await join(guest, { invite: invite.body.invite.code })).ok).toBe(true);
  } else {
    expect((await join(guest, { chat_id: base.chatId })).ok).toBe(true);
  }
  const share = await base.owner.client.post(`/v1/portal/chats/${base.chatId}/keys/share`, {
    epoch: base.epoch,
    envelopes: [{ session_id: guest.sessionId, wrapped: Buffer.alloc(88, 7).toString('base64') }],
  });
  expect(share.status).toBe(200);
  return { ...base, guest };
}

const send = (m: Member, chatId: number, chatKey: Uint8Array, epoch: number) =>
  m.client.post(`/v1/portal/chats/${chatId}/messages`, { content: bundle(chatKey, chatId, epoch, 'x') });

describeApp('platform punishments (operator and Admins)', () => {
  it('a ban ends every session and socket, refuses login, and an unban restores it', async () => {
    const target = await member(app);
    const gone = disconnected(target.socket);
    const res = await operator(app).post('/v1/admin/punishments/ban', { user_id: target.user.id, reason: 'spam' });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      ok: true,
      punishment: { action_type: 'PLATFORM_BAN', reason: 'spam', expires_at: null, is_lifted: false },
    });
    await gone;
    expect((await target.client.get('/v1/users/me')).status).toBe(401);
    const again = await new Client(app.url, nextIp(), app.publicApiKey).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: target.platformUserId,
    });
    expect(again.body.code).toBe('ERR_BANNED');
    expect((await operator(app).post('/v1/admin/punishments/unban', { user_id: target.user.id })).status).toBe(200);
    const back = await login(app, { platformUserId: target.platformUserId });
    const punishments = await back.client.get('/v1/users/me/punishments');
    expect(punishments.body[0]).toMatchObject({
      action_type: 'PLATFORM_BAN',
      is_lifted: true,
      lifted_at: expect.any(String),
    });
    const notes = (await back.client.get('/v1/notifications')).body.notifications.map((n: any) => n.title);
    expect(notes).toEqual(expect.arrayContaining(['Account banned', 'Ban lifted']));
  });

  it('a timeout drops sockets and answers 403 ERR_TIMED_OUT until it ends', async () => {
    const target = await member(app);
    const gone = disconnected(target.socket);
    const res = await operator(app).post('/v1/admin/punishments/timeout', { user_id: target.user.id, duration: 600 });
    expect(res.body.punishment).toMatchObject({ action_type: 'PLATFORM_TIMEOUT', expires_at: expect.any(String) });
    await gone;
    const blocked = await target.client.get('/v1/users/me');
    expect(blocked.status).toBe(403);
    expect(blocked.body.code).toBe('ERR_TIMED_OUT');
    clock.advance(600_000);
    expect((await target.client.get('/v1/users/me')).status).toBe(200);
    await app.services.moderation.sweep();
    expect((await target.client.get('/v1/users/me/punishments')).body[0]).toMatchObject({ is_lifted: true });
  });

  it('names in its notification how long the ban or timeout the user lives under lasts (a longer one outlasts a shorter)', async () => {
    const target = await login(app);
    const punish = async (kind: 'ban' | 'timeout', duration: number) => {
      const res = await operator(app).post(`/v1/admin/punishments/${kind}`, { user_id: target.user.id, duration });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    };
    const lastNotice = async () => {
      const res = (await app.database.db.execute(
        `select body from notifications where user_id = ${target.user.id} order by id desc limit 1` as never,
      )) as unknown as { rows: { body: string }[] } | { body: string }[];
      const rows = 'rows' in res ? res.rows : res;
      return (/Duration: \*\*(.*?)\*\*/.exec(rows[0]?.body ?? '') ?? [])[1];
    };
    await punish('timeout', 86_400);
    expect(await lastNotice()).toBe('1 day');
    clock.advance(2 * 3_600_000);
    // A shorter timeout: the day's timeout still applies, 22 hours of it left.
    await punish('timeout', 600);
    expect(await lastNotice()).toBe('22 hours');
    // What is left is named to the minute, rounded up: 22 hours less 90.061 s.
    clock.advance(90_061);
    await punish('timeout', 600);
    expect(await lastNotice()).toBe('21 hours 59 minutes');
    await punish('timeout', 2 * 86_400);
    expect(await lastNotice()).toBe('2 days');
    // A ban over a timeout is a ban of its own length; a timeout of a banned user names its own.
    await punish('ban', 3_600);
    expect(await lastNotice()).toBe('1 hour');
    await punish('timeout', 60);
    expect(await lastNotice()).toBe('1 minute');
    await punish('ban', 60);
    expect(await lastNotice()).toBe('1 hour');
  });

  it('refuses the socket handshake of a timed-out user with ERR_TIMED_OUT and when it ends, and accepts it from then', async () => {
    const target = await member(app);
    const gone = disconnected(target.socket);
    const res = await operator(app).post('/v1/admin/punishments/timeout', { user_id: target.user.id, duration: 600 });
    expect(res.status).toBe(200);
    await gone;
    const handshake = () =>
      connectSocket(app.url, target.client).then(
        (socket) => {
          socket.close();
          return 'connected';
        },
        (err: Error & { data?: unknown }) => ({ code: err.message, data: err.data }),
      );
    // Not ERR_UNAUTHENTICATED: the session is live (clients take that code as its end).
    expect(await handshake()).toEqual({ code: 'ERR_TIMED_OUT', data: { retry_after: 600 } });
    clock.advance(599_001);
    expect(await handshake()).toEqual({ code: 'ERR_TIMED_OUT', data: { retry_after: 1 } });
    clock.advance(999);
    expect(await handshake()).toBe('connected');
  });

  it('refuses the handshake of a session whose user reads Banned (a ban committing at that instant) with ERR_BANNED', async () => {
    // A ban ends every session in its transaction; the state written alone stands for the instant
    // a handshake reads the user between the two (an uncached session, read from SQL).
    const target = await login(app);
    await app.database.db.execute(`update users set state = 2 where id = ${target.user.id}` as never);
    const refused = await connectSocket(app.url, target.client).then(
      () => 'connected',
      (err: Error & { data?: unknown }) => ({ code: err.message, data: err.data }),
    );
    expect(refused).toEqual({ code: 'ERR_BANNED', data: undefined });
  });

  it('shows state Active in GET /v1/users/me and the bot view once a timeout ends, before the sweep', async () => {
    const target = await member(app);
    const { client: botClient } = await createBot(app);
    const botState = async () => (await botClient.get(`/v1/bot/users/${target.user.id}`)).body.state;
    expect((await target.client.get('/v1/users/me')).body.user.state).toBe(0);
    const res = await operator(app).post('/v1/admin/punishments/timeout', { user_id: target.user.id, duration: 60 });
    expect(res.status).toBe(200);
    expect(await botState()).toBe(1);
    clock.advance(60_000);
    expect((await target.client.get('/v1/users/me')).body.user.state).toBe(0);
    expect(await botState()).toBe(0);
    expect(await countRows(app, `select count(*) as n from users where id = ${target.user.id} and state = 1`)).toBe(1);
  });

  it('applies the level rules: an Admin cannot ban an Admin, an Owner can', async () => {
    const [admin, otherAdmin, owner] = [
      await member(app, { level: 2 }),
      await member(app, { level: 2 }),
      await member(app, { level: 3 }),
    ];
    const refused = await admin.client.post('/v1/admin/punishments/ban', { user_id: otherAdmin.user.id, reason: 'x' });
    expect([refused.status, refused.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect((await otherAdmin.client.get('/v1/users/me')).status).toBe(200);
    const gone = disconnected(otherAdmin.socket);
    const banned = await owner.client.post('/v1/admin/punishments/ban', { user_id: otherAdmin.user.id, reason: 'x' });
    expect(banned.status).toBe(200);
    expect(banned.body).toMatchObject({ ok: true, punishment: { action_type: 'PLATFORM_BAN', reason: 'x' } });
    await gone;
    expect((await otherAdmin.client.get('/v1/users/me')).status).toBe(401);
  });

  it('applies the level rules to warnings: not by a plain user, an Admin cannot warn an Admin, an Owner can', async () => {
    const [admin, otherAdmin, owner, plain] = [
      await member(app, { level: 2 }),
      await member(app, { level: 2 }),
      await member(app, { level: 3 }),
      await member(app),
    ];
    const refused = await admin.client.post('/v1/admin/punishments/warn', { user_id: otherAdmin.user.id, reason: 'x' });
    expect([refused.status, refused.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    const byPlain = await plain.client.post('/v1/admin/punishments/warn', { user_id: admin.user.id });
    expect([byPlain.status, byPlain.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect(
      (await owner.client.post('/v1/admin/punishments/warn', { user_id: otherAdmin.user.id, reason: 'x' })).status,
    ).toBe(200);
    expect((await otherAdmin.client.get('/v1/users/me/punishments')).body).toEqual([
      expect.objectContaining({ action_type: 'PLATFORM_WARNING', reason: 'x' }),
    ]);
  });

  it(`accepts timeouts of ${Limits.PUNISH_DURATION_MIN_S} to ${Limits.PUNISH_DURATION_MAX_S} s and reasons up to ${Limits.PUNISH_REASON_MAX}`, async () => {
    const target = await member(app);
    for (const body of [
      { duration: Limits.PUNISH_DURATION_MIN_S - 1 },
      { duration: Limits.PUNISH_DURATION_MAX_S + 1 },
      { duration: 60, reason: 'r'.repeat(Limits.PUNISH_REASON_MAX + 1) },
      { duration: '60' },
    ]) {
      expect(
        (await operator(app).post('/v1/admin/punishments/timeout', { user_id: target.user.id, ...body })).status,
      ).toBe(400);
    }
    for (const duration of [Limits.PUNISH_DURATION_MIN_S, Limits.PUNISH_DURATION_MAX_S]) {
      const ok = await operator(app).post('/v1/admin/punishments/timeout', {
        user_id: target.user.id,
        duration,
        reason: 'r'.repeat(Limits.PUNISH_REASON_MAX),
      });
      expect(ok.status).toBe(200);
    }
  });

  it(`accepts bans of ${Limits.PUNISH_DURATION_MIN_S} to ${Limits.PUNISH_DURATION_MAX_S} s, and reasons up to ${Limits.PUNISH_REASON_MAX} on ban, warn and unban`, async () => {
    const target = await login(app);
    const post = (kind: string, body: object) =>
      operator(app).post(`/v1/admin/punishments/${kind}`, { user_id: target.user.id, ...body });
    const tooLong = 'r'.repeat(Limits.PUNISH_REASON_MAX + 1);
    for (const [kind, body] of [
      ['ban', { duration: Limits.PUNISH_DURATION_MIN_S - 1 }],
      ['ban', { duration: Limits.PUNISH_DURATION_MAX_S + 1 }],
      ['ban', { duration: 60.5 }],
      ['ban', { reason: tooLong }],
      ['warn', { reason: tooLong }],
      ['unban', { reason: tooLong }],
    ] as const) {
      const res = await post(kind, body);
      expect([kind, res.status, res.body.code]).toEqual([kind, 400, 'ERR_VALIDATION']);
    }
    expect(await auditOf(target.user.id)).toEqual([]);
    const longest = 'r'.repeat(Limits.PUNISH_REASON_MAX);
    for (const [kind, body] of [
      ['ban', { duration: Limits.PUNISH_DURATION_MIN_S }],
      ['ban', { duration: Limits.PUNISH_DURATION_MAX_S, reason: longest }],
      ['warn', { reason: longest }],
      ['unban', { reason: longest }],
    ] as const)
      expect((await post(kind, body)).status).toBe(200);
  });

  it('answers {ok, punishment} to ban, timeout and warn and {ok} to unban, with one audit entry each (none for an unban with nothing to lift)', async () => {
    const target = await login(app);
    const punish = (kind: string, body: object = {}) =>
      operator(app).post(`/v1/admin/punishments/${kind}`, { user_id: target.user.id, ...body });
    for (const [kind, type] of [
      ['timeout', 'PLATFORM_TIMEOUT'],
      ['ban', 'PLATFORM_BAN'],
      ['warn', 'PLATFORM_WARNING'],
    ] as const) {
      const res = await punish(kind, kind === 'timeout' ? { duration: 60 } : {});
      expect([res.status, res.body]).toEqual([
        200,
        { ok: true, punishment: expect.objectContaining({ action_type: type }) },
      ]);
    }
    // An unban answers {ok: true} alone, whether it lifted a ban or found none.
    for (let i = 0; i < 2; i++) {
      const res = await punish('unban');
      expect([res.status, res.body]).toEqual([200, { ok: true }]);
    }
    expect((await auditOf(target.user.id)).map((e) => e.action)).toEqual(['unban', 'warn', 'ban', 'timeout']);
  });
});

describeApp('chat moderation (spec 4.6 rules 2-3)', () => {
  it('kick: the member leaves at once, with a system message and a new epoch', async () => {
    const { owner, chatId, guest } = await chatWithGuest();
    const res = await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: guest.user.id, reason: 'rude' });
    expect(res.body).toEqual({ ok: true });
    expect(await guest.socket.next('room:left')).toEqual({ chat_id: chatId, reason: 'kicked' });
    expect(await owner.socket.next('room:rekey')).toEqual({ chat_id: chatId, epoch: 2 });
    const system = await owner.socket.next('message:new', (m) => m.system?.kind === 'kick');
    expect(system.system).toMatchObject({ user_id: guest.user.id, actor_id: owner.user.id, reason: 'rude' });
    const activity = await owner.client.get(`/v1/portal/chats/${chatId}/activity`);
    expect(activity.body.activity[0]).toMatchObject({
      user_id: guest.user.id,
      action: 'kick',
      actor_user_id: owner.user.id,
    });
    // A kick is not a ban: the guest may come back.
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: 999999 })).status).toBe(404);
  });

  it('ban keeps the user out until unban', async () => {
    const { owner, chatId, guest } = await chatWithGuest();
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: guest.user.id })).status).toBe(200);
    expect(await guest.socket.next('room:left')).toEqual({ chat_id: chatId, reason: 'banned' });
    expect(await join(guest, { chat_id: chatId })).toMatchObject({ ok: false, code: 'ERR_CHAT_BANNED' });
    expect(
      (await owner.client.post(`/v1/portal/chats/${chatId}/unban`, { user_id: guest.user.id, reason: 'ok' })).status,
    ).toBe(200);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
  });

  it('a ban of a user who already left persists its system message with the ban, or neither (spec 2.9)', async () => {
    const { owner, chatId, guest } = await chatWithGuest();
    expect(await guest.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    const banned = async () =>
      countRows(
        app,
        `select count(*) as n from moderation_actions where user_id = ${guest.user.id} and action_type = 'CHAT_BAN'`,
      );
    const systemBans = () =>
      countRows(app, `select count(*) as n from messages where chat_id = ${chatId} and system->>'kind' = 'ban'`);
    // The message cannot be written: the ban is not recorded either.
    const lift = await failInserts(app, 'messages', "new.type = 'system'");
    try {
      const res = await owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: guest.user.id, reason: 'spam' });
      expect(res.status).toBe(500);
    } finally {
      await lift();
    }
    expect([await banned(), await systemBans()]).toEqual([0, 0]);
    const ban = await owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: guest.user.id, reason: 'spam' });
    expect(ban.body).toEqual({ ok: true });
    const system = await owner.socket.next('message:new', (m) => m.system?.kind === 'ban');
    expect(system.system).toMatchObject({ user_id: guest.user.id, actor_id: owner.user.id, reason: 'spam' });
    const history = await owner.client.get(`/v1/portal/chats/${chatId}/messages`);
    expect(history.body.messages[0]).toMatchObject({ id: system.id, type: 'system', system: { kind: 'ban' } });
    expect([await banned(), await systemBans()]).toEqual([1, 1]);
    expect(await join(guest, { chat_id: chatId })).toMatchObject({ ok: false, code: 'ERR_CHAT_BANNED' });
  });

  it('a ban of a user already banned from the chat is recorded with its audit entry but writes no second system message', async () => {
    const { owner, chatId, guest } = await chatWithGuest();
    const ban = (reason: string, duration?: number) =>
      owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: guest.user.id, reason, duration });
    const count = (query: string) => countRows(app, `select count(*) as n from ${query}`);
    const records = () =>
      count(`moderation_actions where user_id = ${guest.user.id} and chat_id = ${chatId} and action_type = 'CHAT_BAN'`);
    const audits = () => count(`audit_log where code = 406 and target_user_id = ${guest.user.id}`);
    const systemBans = () => count(`messages where chat_id = ${chatId} and system->>'kind' = 'ban'`);
    const banNotices = () =>
      owner.socket.received
        .filter(
          (r) => r.event === 'message:new' && (r.payload as { system?: { kind?: string } }).system?.kind === 'ban',
        )
        .map((r) => (r.payload as { system: { reason: string } }).system.reason);

    expect((await ban('first')).body).toEqual({ ok: true });
    await owner.socket.next('message:new', (m) => m.system?.reason === 'first');
    // Banned already (and no longer a member): the new ban (its own duration) and audit entry count.
    expect((await ban('again', 3600)).body).toEqual({ ok: true });
    expect([await records(), await audits(), await systemBans()]).toEqual([2, 2, 1]);
    // Once the bans are lifted, a ban is news again. The chat's messages arrive in order, so a
    // notice of the repeated ban would have come before this one.
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/unban`, { user_id: guest.user.id })).status).toBe(200);
    expect((await ban('third')).body).toEqual({ ok: true });
    await owner.socket.next('message:new', (m) => m.system?.reason === 'third');
    expect(banNotices()).toEqual(['first', 'third']);
    expect([await records(), await audits(), await systemBans()]).toEqual([3, 3, 2]);
  });

  it('mute refuses sending with ttl; unmute lifts it and tells the chat; a hard mute outlives chat unmutes', async () => {
    const { owner, chatId, chatKey, epoch, guest } = await chatWithGuest();
    expect((await send(guest, chatId, chatKey, epoch)).status).toBe(200);
    await owner.client.post(`/v1/portal/chats/${chatId}/mute`, { user_id: guest.user.id, duration: 300 });
    const muted = await send(guest, chatId, chatKey, epoch);
    expect(muted.status).toBe(403);
    expect(muted.body).toMatchObject({ code: 'ERR_MUTED', ttl: 300 });
    expect((await owner.socket.next('message:new', (m) => m.system?.kind === 'mute')).system.user_id).toBe(
      guest.user.id,
    );
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/unmute`, { user_id: guest.user.id })).body).toEqual({
      ok: true,
    });
    expect(await owner.socket.next('user:unmuted')).toEqual({ chat_id: chatId, user_id: guest.user.id });
    expect((await send(guest, chatId, chatKey, epoch)).status).toBe(200);
    const mod = await member(app, { level: 1 });
    expect((await mod.client.post('/v1/portal/hard-mute', { user_id: guest.user.id })).status).toBe(200);
    expect((await send(guest, chatId, chatKey, epoch)).body).toMatchObject({ code: 'ERR_MUTED', ttl: 0 });
    const unmute = await owner.client.post(`/v1/portal/chats/${chatId}/unmute`, { user_id: guest.user.id });
    expect([unmute.status, unmute.body]).toEqual([200, { ok: true }]);
    expect((await send(guest, chatId, chatKey, epoch)).body.code).toBe('ERR_MUTED');
    expect((await mod.client.post('/v1/portal/hard-unmute', { user_id: guest.user.id })).status).toBe(200);
    expect((await send(guest, chatId, chatKey, epoch)).status).toBe(200);
  });

  it('a timed mute is lifted by the expiry sweep', async () => {
    const { owner, chatId, chatKey, epoch, guest } = await chatWithGuest();
    await owner.client.post(`/v1/portal/chats/${chatId}/mute`, { user_id: guest.user.id, duration: 60 });
    expect((await send(guest, chatId, chatKey, epoch)).body.ttl).toBe(60);
    clock.advance(60_000);
    expect((await send(guest, chatId, chatKey, epoch)).status).toBe(200);
    await app.services.moderation.sweep();
    const records = (await guest.client.get('/v1/users/me/punishments')).body;
    expect(records.find((r: any) => r.action_type === 'CHAT_MUTE')).toMatchObject({ is_lifted: true });
  });

  it('authorises by chat type: moderators in public chats of lower owners, only owner/Admins in private chats', async () => {
    const pub = await chatWithGuest('public');
    const mod = await member(app, { level: 1 });
    const plain = await member(app);
    // The public chat's owner is an Admin: a Moderator does not outrank it.
    expect((await mod.client.post(`/v1/portal/chats/${pub.chatId}/warn`, { user_id: pub.guest.user.id })).status).toBe(
      403,
    );
    expect(
      (await plain.client.post(`/v1/portal/chats/${pub.chatId}/warn`, { user_id: pub.guest.user.id })).status,
    ).toBe(403);
    const owner3 = await member(app, { level: 3 });
    expect(
      (await owner3.client.post(`/v1/portal/chats/${pub.chatId}/warn`, { user_id: pub.guest.user.id, reason: 'w' }))
        .status,
    ).toBe(200);
    expect((await pub.owner.socket.next('message:new', (m) => m.system?.kind === 'warn')).system.reason).toBe('w');
    // A premium user's public chat: a Moderator outranks its owner.
    const premium = await member(app);
    await app.database.db.execute(
      `update users set subscription_tier = 2, subscription_expires_at = now() + interval '30 days' where id = ${premium.user.id}` as never,
    );
    const chatId = (await premium.client.post('/v1/portal/chats/create', { name: 'Mine', type: 'public' })).body.chat
      .id;
    await join(premium, { chat_id: chatId });
    await join(plain, { chat_id: chatId });
    expect((await mod.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: plain.user.id })).status).toBe(200);
    // Private chats: moderators cannot; Admins can.
    const priv = await chatWithGuest('private');
    expect(
      (await mod.client.post(`/v1/portal/chats/${priv.chatId}/mute`, { user_id: priv.guest.user.id })).status,
    ).toBe(403);
    const admin = await member(app, { level: 2 });
    expect(
      (await admin.client.post(`/v1/portal/chats/${priv.chatId}/mute`, { user_id: priv.guest.user.id })).status,
    ).toBe(200);
    // Unmute: owner or Admin, not a moderator.
    expect(
      (await mod.client.post(`/v1/portal/chats/${priv.chatId}/unmute`, { user_id: priv.guest.user.id })).status,
    ).toBe(403);
    expect(
      (await priv.owner.client.post(`/v1/portal/chats/${priv.chatId}/unmute`, { user_id: priv.guest.user.id })).status,
    ).toBe(200);
    // Nobody moderates themselves.
    expect(
      (await priv.owner.client.post(`/v1/portal/chats/${priv.chatId}/kick`, { user_id: priv.owner.user.id })).status,
    ).toBe(403);
  });

  it('mute and unmute follow spec 4.6 rule 3: the owner or Admins, not a Moderator who outranks the owner', async () => {
    const { owner, chatId } = await premiumChat('public');
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    const mod = await member(app, { level: 1 });
    const admin = await member(app, { level: 2 });
    const muteBy = (m: Member) => m.client.post(`/v1/portal/chats/${chatId}/mute`, { user_id: guest.user.id });
    const refused = await muteBy(mod);
    expect(refused.status, JSON.stringify(refused.body)).toBe(403);
    expect(refused.body.code).toBe('ERR_FORBIDDEN');
    expect((await guest.client.get('/v1/users/me/punishments')).body).toEqual([]);
    // The same Moderator may warn there (rule 2), so the refusal is the mute rule's.
    expect((await mod.client.post(`/v1/portal/chats/${chatId}/warn`, { user_id: guest.user.id })).status).toBe(200);
    expect((await muteBy(admin)).status).toBe(200);
    expect((await muteBy(owner)).status).toBe(200);
  });

  it('mute and warn commit with their system message, or not at all', async () => {
    const { owner, chatId, guest } = await chatWithGuest();
    const notes = async () => (await guest.client.get('/v1/notifications')).body.notifications;
    const notesBefore = await notes();
    const lift = await failInserts(app, 'messages', "new.type = 'system'");
    try {
      for (const [path, body] of [
        ['mute', { user_id: guest.user.id, duration: 300 }],
        ['warn', { user_id: guest.user.id, reason: 'w' }],
      ] as const) {
        const res = await owner.client.post(`/v1/portal/chats/${chatId}/${path}`, body);
        expect(res.status, path).toBe(500);
      }
    } finally {
      await lift();
    }
    // No record, no audit entry, no notification.
    expect((await guest.client.get('/v1/users/me/punishments')).body).toEqual([]);
    expect((await operator(app).get(`/v1/admin/audit?target_user_id=${guest.user.id}`)).body.entries).toEqual([]);
    expect(await notes()).toEqual(notesBefore);
    expect(await countRows(app, `select count(*) as n from moderation_actions where user_id = ${guest.user.id}`)).toBe(
      0,
    );
  });

  it('lets a Moderator delete the last messages of a public chat without joining it', async () => {
    const { owner, chatId, chatKey, epoch, guest } = await chatWithGuest();
    const ids = [
      (await send(guest, chatId, chatKey, epoch)).body.id,
      (await send(owner, chatId, chatKey, epoch)).body.id,
    ];
    // Moderators act in public chats whose owner is below them (spec 4.6 rule 2), on users below them.
    await setLevel(app, owner.user.id, 0);
    const mod = await member(app, { level: 1 });
    const res = await mod.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 2 });
    expect(res.body.deleted).toBe(2);
    expect([...res.body.deleted_ids].sort()).toEqual([...ids].sort());
    const priv = await chatWithGuest('private');
    expect((await mod.client.post(`/v1/portal/chats/${priv.chatId}/messages/delete-last`, { count: 1 })).status).toBe(
      403,
    );
  });

  it('a chat timeout applies platform-wide', async () => {
    const { owner, chatId, guest } = await chatWithGuest();
    const gone = disconnected(guest.socket);
    expect(
      (
        await owner.client.post(`/v1/portal/chats/${chatId}/timeout`, {
          user_id: guest.user.id,
          duration: 120,
          reason: 'cool off',
        })
      ).status,
    ).toBe(200);
    await gone;
    expect((await guest.client.get('/v1/portal/chats')).body.code).toBe('ERR_TIMED_OUT');
  });
});

/**
 * A Premium user's chat of the given type, the owner (of `level`) joined (Premium users own one
 * chat, spec 2.11); `add` makes a new member of a level (by an invite in a private chat).
 */
async function premiumChat(type: 'public' | 'private', level = 0) {
  const owner = await member(app, { level });
  await app.database.db.execute(
    `update users set subscription_tier = 2, subscription_expires_at = now() + interval '30 days' where id = ${owner.user.id}` as never,
  );
  const created = await owner.client.post('/v1/portal/chats/create', { name: 'Mine', type });
  expect(created.status, JSON.stringify(created.body)).toBe(200);
  const chatId: number = created.body.chat.id;
  expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
  let invite: string | undefined;
  const add = async (memberLevel = 0) => {
    if (type === 'private' && !invite)
      invite = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, { max_uses: 1000 })).body.invite
        .code as string;
    const m = await member(app, { level: memberLevel });
    const ack = await join(m, invite ? { invite } : { chat_id: chatId });
    expect(ack.ok, JSON.stringify(ack)).toBe(true);
    return m;
  };
  return { owner, chatId, add };
}

type ChatAction = 'kick' | 'ban' | 'unban' | 'mute' | 'unmute' | 'warn' | 'timeout';
const CHAT_ACTIONS: ChatAction[] = ['kick', 'ban', 'unban', 'mute', 'unmute', 'warn', 'timeout'];

/** `by`'s chat action on the user, with the body it needs (a timeout's duration) and `extra`. */
const chatAct = (by: Member, chatId: number, action: ChatAction, userId: number, extra: object = {}) =>
  by.client.post(`/v1/portal/chats/${chatId}/${action}`, {
    user_id: userId,
    ...(action === 'timeout' ? { duration: 60 } : {}),
    ...extra,
  });

/** A matrix cell whose target is its actor. */
const SELF = -1;

/**
 * Every chat action by each kind of actor, each on a new member (a kick or ban leaves none to act
 * on twice): the table of docs/api.md Moderation, spec 4.6 rules 2-3. `cells` names each actor and
 * its target's level (0 when omitted; SELF: the chat owner acting on itself), `expected` what each
 * answers.
 */
async function matrix(
  c: Awaited<ReturnType<typeof premiumChat>>,
  cells: Record<string, [Member, number?]>,
  expected: (cell: string, action: ChatAction) => number,
) {
  const answers: Record<string, number> = {};
  const wanted: Record<string, number> = {};
  for (const action of CHAT_ACTIONS)
    for (const [cell, [by, level]] of Object.entries(cells)) {
      const target = level === SELF ? c.owner : await c.add(level ?? 0);
      answers[`${cell}:${action}`] = (await chatAct(by, c.chatId, action, target.user.id)).status;
      wanted[`${cell}:${action}`] = expected(cell, action);
    }
  expect(answers).toEqual(wanted);
}

const muting = (action: ChatAction) => action === 'mute' || action === 'unmute';

describeApp('who may take each chat action (spec 4.6 rules 2-3, docs/api.md Moderation)', () => {
  it('in a public chat of a User: its owner, Moderators (not to mute) and Admins, on users below them; nobody on themselves', async () => {
    const c = await premiumChat('public');
    const [mod, admin] = [await member(app, { level: 1 }), await member(app, { level: 2 })];
    const plain = await c.add();
    await matrix(
      c,
      {
        owner: [c.owner],
        mod: [mod],
        admin: [admin],
        plain: [plain],
        'owner-on-self': [c.owner, SELF],
        'owner-on-mod': [c.owner, 1],
        'owner-on-admin': [c.owner, 2],
        'mod-on-mod': [mod, 1],
      },
      (cell, action) => {
        if (cell === 'owner' || cell === 'admin') return 200;
        if (cell === 'mod') return muting(action) ? 403 : 200;
        return 403;
      },
    );
  }, 240_000);

  it('in a private chat of a User: its owner and Admins, never a Moderator', async () => {
    const c = await premiumChat('private');
    const [mod, admin] = [await member(app, { level: 1 }), await member(app, { level: 2 })];
    await matrix(c, { owner: [c.owner], mod: [mod], admin: [admin] }, (cell) => (cell === 'mod' ? 403 : 200));
  }, 240_000);

  it('in a public chat of an Admin: a Moderator and another Admin do not outrank it (the Admin still mutes); an Owner does', async () => {
    const c = await premiumChat('public', 2);
    const [mod, admin, top] = [
      await member(app, { level: 1 }),
      await member(app, { level: 2 }),
      await member(app, { level: 3 }),
    ];
    await matrix(c, { mod: [mod], admin: [admin], top: [top] }, (cell, action) => {
      if (cell === 'top') return 200;
      return cell === 'admin' && muting(action) ? 200 : 403;
    });
  }, 240_000);

  it('answers 404 for a deleted account, an unknown user and an unknown chat, never a 5xx', async () => {
    const c = await premiumChat('public');
    const gone = await c.add();
    expect((await operator(app).post(`/v1/admin/users/${gone.user.id}/delete`, {})).status).toBe(200);
    const answers: Record<string, string> = {};
    const wanted: Record<string, string> = {};
    for (const action of CHAT_ACTIONS) {
      for (const [what, chatId, userId, code] of [
        ['deleted', c.chatId, gone.user.id, 'ERR_USER_NOT_FOUND'],
        ['unknown', c.chatId, 2147483647, 'ERR_USER_NOT_FOUND'],
        ['no-chat', 2147483647, gone.user.id, 'ERR_CHAT_NOT_FOUND'],
      ] as const) {
        const res = await chatAct(c.owner, chatId, action, userId);
        answers[`${what}:${action}`] = `${res.status} ${res.body.code}`;
        wanted[`${what}:${action}`] = `404 ${code}`;
      }
    }
    expect(answers).toEqual(wanted);
  }, 120_000);

  it(`validates chat action bodies: durations ${Limits.PUNISH_DURATION_MIN_S} to ${Limits.PUNISH_DURATION_MAX_S} s, reasons up to ${Limits.PUNISH_REASON_MAX} code points, user ids`, async () => {
    const c = await premiumChat('public');
    const max = Limits.PUNISH_DURATION_MAX_S;
    const reason = (n: number, unit = 'r') => ({ reason: unit.repeat(n) });
    const cases: [string, ChatAction, object, number][] = [
      ['ban 59 s', 'ban', { duration: 59 }, 400],
      ['ban 60 s', 'ban', { duration: 60 }, 200],
      ['ban max', 'ban', { duration: max }, 200],
      ['ban max + 1', 'ban', { duration: max + 1 }, 400],
      ['ban 60.5 s', 'ban', { duration: 60.5 }, 400],
      ['ban "60"', 'ban', { duration: '60' }, 400],
      ['ban null', 'ban', { duration: null }, 400],
      ['mute 0 s', 'mute', { duration: 0 }, 400],
      ['mute 60 s', 'mute', { duration: 60 }, 200],
      ['mute max + 1', 'mute', { duration: max + 1 }, 400],
      ['timeout without duration', 'timeout', { duration: undefined }, 400],
      ['kick reason 500', 'kick', reason(500), 200],
      ['kick reason 501', 'kick', reason(501), 400],
      ['warn reason 500 emoji', 'warn', reason(500, '😀'), 200],
      ['warn reason 501 emoji', 'warn', reason(501, '😀'), 400],
      ['unban reason 500', 'unban', reason(500, 'é'), 200],
      ['unban reason 501', 'unban', reason(501, 'é'), 400],
      ['mute reason 501', 'mute', reason(501), 400],
      ['unmute with a reason', 'unmute', reason(1), 400],
      ['kick user 0', 'kick', { user_id: 0 }, 400],
      ['kick user 2^31', 'kick', { user_id: 2147483648 }, 400],
      ['kick user "1"', 'kick', { user_id: '1' }, 400],
      ['kick without user', 'kick', { user_id: undefined }, 400],
    ];
    const answers: Record<string, number> = {};
    const wanted: Record<string, number> = {};
    for (const [name, action, body, status] of cases) {
      const target = await c.add();
      answers[name] = (await chatAct(c.owner, c.chatId, action, target.user.id, body)).status;
      wanted[name] = status;
    }
    expect(answers).toEqual(wanted);
  }, 240_000);
});

describeApp("chat actions on the chat's owner (docs/api.md Moderation)", () => {
  it("answers 403 ERR_FORBIDDEN to a kick, ban or mute of the chat's owner by staff who outrank it, and writes nothing", async () => {
    for (const [action, level, type] of [
      ['kick', 1, 'public'],
      ['ban', 1, 'public'],
      ['kick', 2, 'private'],
      ['ban', 3, 'private'],
      ['mute', 2, 'public'],
      ['mute', 3, 'private'],
    ] as const) {
      const c = await premiumChat(type);
      const staff = await member(app, { level });
      const before = await footprint(c.owner.user.id, c.chatId);
      const res = await chatAct(staff, c.chatId, action, c.owner.user.id);
      expect([action, type, res.status, res.body]).toEqual([
        action,
        type,
        403,
        { code: 'ERR_FORBIDDEN', message: "The chat's owner cannot be kicked, banned or muted in its own chat." },
      ]);
      expect(await footprint(c.owner.user.id, c.chatId)).toEqual(before);
      // The chat stays in its owner's list (the membership above is unchanged).
      expect((await c.owner.client.get('/v1/portal/chats')).body.chats.map((x: any) => x.id)).toContain(c.chatId);
    }
  }, 120_000);

  it("serves warn, timeout, unban and unmute of the chat's owner: they remove and silence nobody in the chat", async () => {
    const c = await premiumChat('public');
    const admin = await member(app, { level: 2 });
    const answers: Record<string, number> = {};
    for (const action of ['unban', 'unmute', 'warn', 'timeout'] as const)
      answers[action] = (await chatAct(admin, c.chatId, action, c.owner.user.id)).status;
    expect(answers).toEqual({ unban: 200, unmute: 200, warn: 200, timeout: 200 });
  });
});

describeApp('chat actions on an anonymous stranger (docs/api.md Strangers: no notifications)', () => {
  it('stores and announces no notification for a stranger kicked, banned or muted in its direct chat', async () => {
    const admin = await member(app, { level: 2 });
    const answers: Record<string, [number, number]> = {};
    for (const action of ['kick', 'ban', 'mute'] as const) {
      const made = await new Client(app.url, nextIp(), app.publicApiKey).post('/v1/portal/stranger', {});
      expect(made.status, JSON.stringify(made.body)).toBe(200);
      const strangerId: number = made.body.user.id;
      const peer = await member(app);
      const direct = await app.services.chats.createDirect([strangerId, peer.user.id], [`stranger-${action}`]);
      if ('refused' in direct) throw new Error(`direct chat refused: ${JSON.stringify(direct.refused)}`);
      const res = await chatAct(admin, direct.chat.id, action, strangerId);
      const notes = await countRows(app, `select count(*) as n from notifications where user_id = ${strangerId}`);
      answers[action] = [res.status, notes];
    }
    expect(answers).toEqual({ kick: [200, 0], ban: [200, 0], mute: [200, 0] });
  });
});

describeApp('POST /v1/portal/chats/{chat_id}/timeout and /warn: the target is in the chat', () => {
  it('answers 403 ERR_NOT_CHAT_MEMBER for a user who was never in the chat, and changes nothing', async () => {
    const { owner, chatId } = await premiumChat('private');
    const stranger = await member(app);
    for (const [path, body] of [
      ['timeout', { user_id: stranger.user.id, duration: Limits.PUNISH_DURATION_MAX_S }],
      ['warn', { user_id: stranger.user.id, reason: 'x' }],
    ] as const) {
      const res = await owner.client.post(`/v1/portal/chats/${chatId}/${path}`, body);
      expect(res.status, JSON.stringify(res.body)).toBe(403);
      expect(res.body).toEqual({ code: 'ERR_NOT_CHAT_MEMBER', message: 'That user is not in this chat.' });
    }
    expect((await stranger.client.get('/v1/users/me')).body.user.state).toBe(0);
    expect((await stranger.client.get('/v1/users/me/punishments')).body).toEqual([]);
    expect(stranger.socket.connected).toBe(true);
  });

  it(`reaches a former member for ${Limits.CHAT_FORMER_MEMBER_REACH_MS / 3600_000} hours after the membership ended`, async () => {
    const { owner, chatId } = await premiumChat('public');
    const [kicked, left] = [await member(app), await member(app)];
    for (const m of [kicked, left]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: kicked.user.id })).status).toBe(200);
    expect((await left.socket.emitWithAck('room:leave', { chat_id: chatId })).ok).toBe(true);
    // Just kicked: still within reach.
    const timedOut = await owner.client.post(`/v1/portal/chats/${chatId}/timeout`, {
      user_id: kicked.user.id,
      duration: 60,
    });
    expect(timedOut.status, JSON.stringify(timedOut.body)).toBe(200);
    clock.advance(Limits.CHAT_FORMER_MEMBER_REACH_MS);
    const atLimit = await owner.client.post(`/v1/portal/chats/${chatId}/warn`, { user_id: left.user.id });
    expect(atLimit.status, JSON.stringify(atLimit.body)).toBe(200);
    clock.advance(1);
    const past = await owner.client.post(`/v1/portal/chats/${chatId}/warn`, { user_id: left.user.id });
    expect(past.body.code).toBe('ERR_NOT_CHAT_MEMBER');
  });

  it(`accepts durations of ${Limits.PUNISH_DURATION_MIN_S} to ${Limits.PUNISH_DURATION_MAX_S} s and reasons up to ${Limits.PUNISH_REASON_MAX} (spec 8)`, async () => {
    const { owner, chatId, guest } = await chatWithGuest();
    const timeout = (body: object) =>
      owner.client.post(`/v1/portal/chats/${chatId}/timeout`, { user_id: guest.user.id, ...body });
    for (const body of [
      { duration: Limits.PUNISH_DURATION_MIN_S - 1 },
      { duration: Limits.PUNISH_DURATION_MAX_S + 1 },
      { duration: 60, reason: 'r'.repeat(Limits.PUNISH_REASON_MAX + 1) },
    ]) {
      const refused = await timeout(body);
      expect(refused.status, JSON.stringify(body)).toBe(400);
      expect(refused.body.code).toBe('ERR_VALIDATION');
    }
    expect((await guest.client.get('/v1/users/me')).body.user.state).toBe(0);
    for (const duration of [Limits.PUNISH_DURATION_MIN_S, Limits.PUNISH_DURATION_MAX_S]) {
      const ok = await timeout({ duration, reason: 'r'.repeat(Limits.PUNISH_REASON_MAX) });
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    }
    const records = (await operator(app).get(`/v1/admin/audit?target_user_id=${guest.user.id}`)).body.entries;
    expect(records.map((e: any) => e.data.duration)).toEqual([
      Limits.PUNISH_DURATION_MAX_S,
      Limits.PUNISH_DURATION_MIN_S,
    ]);
  });
});

describeApp('chat actions: events, history, mutes and bans', () => {
  it('user:unmuted reaches the chat only; room:left reaches every socket of the kicked user, which then hears the chat no more', async () => {
    const c = await premiumChat('public');
    const [target, other, outsider] = [await c.add(), await c.add(), await member(app)];
    // A second tab of the target that never entered the chat's room.
    const tab = await connectSocket(app.url, target.client);
    const unmuted = { chat_id: c.chatId, user_id: other.user.id };
    const muteAndUnmute = async () => {
      expect((await chatAct(c.owner, c.chatId, 'mute', other.user.id)).status).toBe(200);
      expect((await chatAct(c.owner, c.chatId, 'unmute', other.user.id)).status).toBe(200);
      expect(await c.owner.socket.next('user:unmuted')).toEqual(unmuted);
    };
    await muteAndUnmute();
    expect(await target.socket.next('user:unmuted')).toEqual(unmuted);
    expect((await chatAct(c.owner, c.chatId, 'kick', target.user.id)).status).toBe(200);
    expect(await target.socket.next('room:left')).toEqual({ chat_id: c.chatId, reason: 'kicked' });
    expect(await tab.next('room:left')).toEqual({ chat_id: c.chatId, reason: 'kicked' });
    await muteAndUnmute();
    // Acks on each socket's connection come after anything it was sent before them.
    for (const s of [target.socket, tab, outsider.socket])
      await s.emitWithAck('vm:credentials', { chat_id: c.chatId } as never);
    expect(target.socket.received.filter((r) => r.event === 'user:unmuted')).toHaveLength(1);
    expect(tab.received.filter((r) => r.event === 'user:unmuted')).toHaveLength(0);
    expect(outsider.socket.received.filter((r) => r.event === 'user:unmuted')).toHaveLength(0);
  }, 120_000);

  it('a member who joins later reads the kick, ban, mute and warn system messages in the history', async () => {
    const c = await premiumChat('public');
    for (const action of ['kick', 'ban', 'mute', 'warn'] as const)
      expect((await chatAct(c.owner, c.chatId, action, (await c.add()).user.id, { reason: action })).status).toBe(200);
    const history = await (await c.add()).client.get(`/v1/portal/chats/${c.chatId}/messages`);
    expect(history.status).toBe(200);
    const system = history.body.messages.filter((m: any) => m.type === 'system').map((m: any) => m.system);
    for (const kind of ['kick', 'ban', 'mute', 'warn'])
      expect(system).toContainEqual(expect.objectContaining({ kind, actor_id: c.owner.user.id, reason: kind }));
  }, 120_000);

  it('ttl is the longest of the chat mutes and a hard mute: a shorter re-mute shortens nothing, an unmute leaves the hard mute', async () => {
    const c = await premiumChat('public');
    const guest = await c.add();
    const key = await keyEpoch(c.owner, c.chatId);
    const sent = () => send(guest, c.chatId, key.chatKey, key.epoch);
    expect((await sent()).status).toBe(200);
    expect((await chatAct(c.owner, c.chatId, 'mute', guest.user.id, { duration: 600 })).status).toBe(200);
    expect((await chatAct(c.owner, c.chatId, 'mute', guest.user.id, { duration: 60 })).status).toBe(200);
    expect((await sent()).body).toMatchObject({ code: 'ERR_MUTED', ttl: 600 });
    const mod = await member(app, { level: 1 });
    expect((await mod.client.post('/v1/portal/hard-mute', { user_id: guest.user.id, duration: 1200 })).status).toBe(
      200,
    );
    expect((await sent()).body).toMatchObject({ code: 'ERR_MUTED', ttl: 1200 });
    expect((await chatAct(c.owner, c.chatId, 'unmute', guest.user.id)).status).toBe(200);
    clock.advance(10_000);
    expect((await sent()).body).toMatchObject({ code: 'ERR_MUTED', ttl: 1190 });
    expect((await mod.client.post('/v1/portal/hard-unmute', { user_id: guest.user.id })).status).toBe(200);
    expect((await sent()).status).toBe(200);
  }, 120_000);

  it('a timed chat ban refuses a rejoin by invite until its end', async () => {
    const c = await premiumChat('private');
    const guest = await c.add();
    const invite = (await c.owner.client.post(`/v1/portal/chats/${c.chatId}/invites/create`, {})).body.invite.code;
    expect((await chatAct(c.owner, c.chatId, 'ban', guest.user.id, { duration: 60 })).status).toBe(200);
    expect(await join(guest, { invite })).toMatchObject({ ok: false, code: 'ERR_CHAT_BANNED' });
    clock.advance(60_000);
    expect((await join(guest, { invite })).ok).toBe(true);
  }, 60_000);
});

/** A direct chat of two new members, as a match makes it. */
async function directChat() {
  const [a, b] = [await member(app), await member(app)];
  const made = await app.services.chats.createDirect([a.user.id, b.user.id], ['moderation']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  return { a, b, chatId: made.chat.id };
}

describeApp('chat actions in an archived direct chat (spec 3: read-only)', () => {
  it('answers kick, ban, mute and warn 403 ERR_CHAT_READ_ONLY and writes nothing; unmute, unban and timeout, which write nothing there, are served', async () => {
    const { a, b, chatId } = await directChat();
    const early = await member(app, { level: 2 });
    // A mute from while the chat was active, for an unmute to lift once it is archived.
    expect((await chatAct(early, chatId, 'mute', b.user.id)).status).toBe(200);
    clock.advance(Limits.DIRECT_CHAT_TTL_MS);
    // Staff sessions made after the advance (a staff session lives one day).
    const [mod, admin] = [await member(app, { level: 1 }), await member(app, { level: 2 })];
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(true);
    const messagesIn = () => countRows(app, `select count(*) as n from messages where chat_id = ${chatId}`);
    const recordsIn = () => countRows(app, `select count(*) as n from moderation_actions where chat_id = ${chatId}`);
    const [messagesBefore, recordsBefore] = [await messagesIn(), await recordsIn()];
    const answers: Record<string, [number, string]> = {};
    for (const [by, action] of [
      [admin, 'mute'],
      [mod, 'warn'],
      [mod, 'ban'],
      [mod, 'kick'],
    ] as const) {
      const res = await chatAct(by, chatId, action, b.user.id);
      answers[action] = [res.status, res.body.code];
    }
    const readOnly: [number, string] = [403, 'ERR_CHAT_READ_ONLY'];
    expect(answers).toEqual({ mute: readOnly, warn: readOnly, ban: readOnly, kick: readOnly });
    expect([await messagesIn(), await recordsIn()]).toEqual([messagesBefore, recordsBefore]);
    // The peer is still a member: the archive stays in its list, at its epoch.
    expect((await b.client.get('/v1/portal/chats')).body.chats.map((c: any) => c.id)).toContain(chatId);
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).body.chat.epoch).toBe(1);

    expect((await chatAct(admin, chatId, 'unmute', b.user.id)).status).toBe(200);
    const lifted = `select count(*) as n from moderation_actions where chat_id = ${chatId} and action_type = 'CHAT_MUTE' and is_lifted`;
    expect(await countRows(app, lifted)).toBe(1);
    expect((await chatAct(mod, chatId, 'unban', b.user.id)).status).toBe(200);
    expect((await chatAct(mod, chatId, 'timeout', b.user.id)).status).toBe(200);
    expect((await b.client.get('/v1/users/me')).body.code).toBe('ERR_TIMED_OUT');
    expect(await messagesIn()).toBe(messagesBefore);
  }, 60_000);
});

describeApp('a kick or ban in a direct chat ends it as a leave does (docs/api.md Matchmaking)', () => {
  it('archives it at its epoch, tells the peer, and frees both users: idle, and the peer may search again', async () => {
    const mod = await member(app, { level: 1 });
    for (const action of ['kick', 'ban'] as const) {
      const { a, b, chatId } = await directChat();
      const archived: number[] = [];
      const stop = app.services.chats.onArchived((id) => archived.push(id));
      const system = a.socket.next('message:new', (m) => m.chat_id === chatId && m.system?.kind === action);
      const updated = a.socket.next('chat:updated', (u) => u.chat.id === chatId);
      try {
        expect((await chatAct(mod, chatId, action, b.user.id)).status).toBe(200);
        expect((await system).system).toMatchObject({ kind: action, user_id: b.user.id, actor_id: mod.user.id });
        expect((await updated).chat).toMatchObject({ archived: true, member_count: 1, epoch: 1 });
      } finally {
        stop();
      }
      expect(archived).toEqual([chatId]);
      expect((await b.socket.next('room:left')).chat_id).toBe(chatId);
      const listed = (await a.client.get('/v1/portal/chats')).body.chats.find((c: any) => c.id === chatId);
      expect([action, listed]).toMatchObject([action, { archived: true, member_count: 1, epoch: 1 }]);
      for (const m of [a, b]) expect((await m.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
      // The peer's one free direct-chat slot is free again: it searches at once.
      const search = await a.client.post('/v1/portal/match', { interests: [`ex${action}${a.user.id}`] });
      expect([action, search.status, search.body.state]).toEqual([action, 200, 'searching']);
      expect((await a.client.post('/v1/portal/match/dequeue', {})).status).toBe(200);
      // The kick's or ban's own records, beside the archive.
      const record = `select count(*) as n from moderation_actions where chat_id = ${chatId} and user_id = ${b.user.id}`;
      expect(await countRows(app, record)).toBe(1);
      const history = `select count(*) as n from chat_activity where chat_id = ${chatId} and user_id = ${b.user.id} and action = '${action}' and actor_user_id = ${mod.user.id}`;
      expect(await countRows(app, history)).toBe(1);
    }
  }, 60_000);
});

/** Audit entries about a user (the admin audit route). */
const auditOf = async (userId: number) =>
  (await operator(app).get(`/v1/admin/audit?target_user_id=${userId}`)).body.entries as { action: string }[];

describeApp('nothing to lift: 200, and nothing recorded, notified or announced', () => {
  it('POST /v1/admin/punishments/unban of a user who is not banned writes no audit entry and no notification', async () => {
    const target = await member(app);
    const notesBefore = (await target.client.get('/v1/notifications')).body.notifications;
    const res = await operator(app).post('/v1/admin/punishments/unban', { user_id: target.user.id, reason: 'noop' });
    expect([res.status, res.body]).toEqual([200, { ok: true }]);
    expect(await auditOf(target.user.id)).toEqual([]);
    expect((await target.client.get('/v1/notifications')).body.notifications).toEqual(notesBefore);
    // A second unban after a real one is the same no-op: one unban entry, one "Ban lifted".
    expect((await operator(app).post('/v1/admin/punishments/ban', { user_id: target.user.id })).status).toBe(200);
    for (let i = 0; i < 2; i++)
      expect((await operator(app).post('/v1/admin/punishments/unban', { user_id: target.user.id })).status).toBe(200);
    expect((await auditOf(target.user.id)).map((e) => e.action)).toEqual(['unban', 'ban']);
    const back = await login(app, { platformUserId: target.platformUserId });
    const titles = (await back.client.get('/v1/notifications')).body.notifications.map((n: any) => n.title);
    expect(titles.filter((t: string) => t === 'Ban lifted')).toHaveLength(1);
  });

  it('chat unmute, unban and hard-unmute of a user with nothing to lift write no audit entry; unmute sends no user:unmuted', async () => {
    const { owner, chatId, guest } = await chatWithGuest();
    const other = await member(app);
    expect((await join(other, { chat_id: chatId })).ok).toBe(true);
    const mod = await member(app, { level: 1 });
    for (const res of [
      await owner.client.post(`/v1/portal/chats/${chatId}/unmute`, { user_id: guest.user.id }),
      await owner.client.post(`/v1/portal/chats/${chatId}/unban`, { user_id: guest.user.id }),
      await mod.client.post('/v1/portal/hard-unmute', { user_id: guest.user.id }),
    ])
      expect([res.status, res.body]).toEqual([200, { ok: true }]);
    expect(await auditOf(guest.user.id)).toEqual([]);
    // The next user:unmuted the chat hears is the real unmute of the other member (events of one
    // socket arrive in order): the no-op above sent none.
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/mute`, { user_id: other.user.id })).status).toBe(200);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/unmute`, { user_id: other.user.id })).status).toBe(200);
    expect(await owner.socket.next('user:unmuted')).toEqual({ chat_id: chatId, user_id: other.user.id });
    expect((await auditOf(other.user.id)).map((e) => e.action)).toEqual(['chat-unmute', 'chat_mute']);
  });
});

/** Moderation records of a user, as stored. */
const recordsOf = (userId: number) =>
  countRows(app, `select count(*) as n from moderation_actions where user_id = ${userId}`);

/** The request `run` made while the user's row is held by `work` (pg-locks racingUserRow); PostgreSQL only. */
function racing<T>(userId: number, work: string, run: () => Promise<T>) {
  if (!sql) throw new Error('cluster only');
  return racingUserRow(sql, userId, work, run);
}

// PGlite runs one transaction at a time, so nothing interleaves there; on PostgreSQL the test holds
// the target's row (a promotion or a deletion not yet committed) and the request waits for it.
const onPostgres = it.skipIf(MODE !== 'cluster');

describeApp('moderation decides the level rule on the target row it locks (PostgreSQL)', () => {
  const platform = {
    ban: { duration: 3600 },
    timeout: { duration: 60 },
    warn: { reason: 'race' },
    unban: {},
  } as const;
  for (const [kind, body] of Object.entries(platform)) {
    onPostgres(
      `an Admin's ${kind} racing the target's promotion to Admin answers 403 and changes nothing`,
      async () => {
        const admin = await member(app, { level: 2 });
        const target = await member(app);
        if (kind === 'unban')
          expect((await operator(app).post('/v1/admin/punishments/ban', { user_id: target.user.id })).status).toBe(200);
        const recordsBefore = await recordsOf(target.user.id);
        const auditBefore = await auditOf(target.user.id);
        const res = await racing(
          target.user.id,
          `update users set permission_level = 2 where id = ${target.user.id}`,
          () => admin.client.post(`/v1/admin/punishments/${kind}`, { user_id: target.user.id, ...body }),
        );
        expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
        expect(await recordsOf(target.user.id)).toBe(recordsBefore);
        expect(
          await countRows(
            app,
            `select count(*) as n from moderation_actions where user_id = ${target.user.id} and is_lifted`,
          ),
        ).toBe(0);
        expect(await auditOf(target.user.id)).toEqual(auditBefore);
        const state = kind === 'unban' ? 2 : 0;
        expect(
          await countRows(app, `select count(*) as n from users where id = ${target.user.id} and state = ${state}`),
        ).toBe(1);
      },
    );
  }

  for (const kind of ['kick', 'ban', 'mute', 'warn', 'timeout'] as const) {
    onPostgres(
      `a chat ${kind} by a User-level chat owner racing the target's promotion to Moderator answers 403 and changes nothing`,
      async () => {
        const { owner, chatId } = await premiumChat('public');
        const guest = await member(app);
        expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
        const res = await racing(
          guest.user.id,
          `update users set permission_level = 1 where id = ${guest.user.id}`,
          () =>
            owner.client.post(`/v1/portal/chats/${chatId}/${kind}`, {
              user_id: guest.user.id,
              ...(kind === 'timeout' ? { duration: 60 } : {}),
            }),
        );
        expect(res.status, JSON.stringify(res.body)).toBe(403);
        expect(res.body.code).toBe('ERR_FORBIDDEN');
        expect(await recordsOf(guest.user.id)).toBe(0);
        expect(await auditOf(guest.user.id)).toEqual([]);
        const stillIn = `select count(*) as n from chat_members where chat_id = ${chatId} and user_id = ${guest.user.id} and left_at is null`;
        expect(await countRows(app, stillIn)).toBe(1);
      },
    );
  }

  for (const [path, body] of [
    ['/v1/admin/punishments/warn', { reason: 'x' }],
    ['chat mute', {}],
  ] as const) {
    onPostgres(`${path} of a user deleted while it runs answers 404 ERR_USER_NOT_FOUND, not 500`, async () => {
      const { owner, chatId } = await premiumChat('public');
      const target = await member(app);
      expect((await join(target, { chat_id: chatId })).ok).toBe(true);
      const res = await racing(target.user.id, `delete from users where id = ${target.user.id}`, () =>
        path === 'chat mute'
          ? owner.client.post(`/v1/portal/chats/${chatId}/mute`, { user_id: target.user.id })
          : operator(app).post(path, { user_id: target.user.id, ...body }),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 404, code: 'ERR_USER_NOT_FOUND' });
    });
  }
});

/**
 * What a punishment or chat action may have left on its target: records (and lifted ones), audit
 * entries, notifications, live sessions and state, and in the chat its membership and messages.
 */
async function footprint(userId: number, chatId?: number) {
  const n = (query: string) => countRows(app, query);
  return {
    records: await recordsOf(userId),
    lifted: await n(`select count(*) as n from moderation_actions where user_id = ${userId} and is_lifted`),
    audit: await auditOf(userId),
    notifications: await n(`select count(*) as n from notifications where user_id = ${userId}`),
    sessions: await n(`select count(*) as n from sessions where user_id = ${userId} and ended_at is null`),
    state: await n(`select state as n from users where id = ${userId}`),
    ...(chatId === undefined
      ? {}
      : {
          member: await n(
            `select count(*) as n from chat_members where chat_id = ${chatId} and user_id = ${userId} and left_at is null`,
          ),
          messages: await n(`select count(*) as n from messages where chat_id = ${chatId}`),
        }),
  };
}

/**
 * The caller's level and state are read under its users row lock, taken with the target's in one
 * statement (id order), not taken from its session as read when the request began: the test holds
 * the target's row while its transaction demotes, bans or deletes the caller (another node's
 * change, not committed yet), and the action waits for it.
 */
describeApp('moderation decides on the caller’s level and state as read under its row lock (PostgreSQL)', () => {
  const platform = {
    ban: { duration: 3600 },
    unban: {},
    timeout: { duration: 60 },
    warn: { reason: 'race' },
  } as const;
  for (const [kind, body] of Object.entries(platform)) {
    onPostgres(
      `an Admin demoted to User while its ${kind} runs answers 403 ERR_FORBIDDEN and writes nothing`,
      async () => {
        const admin = await member(app, { level: 2 });
        const target = await member(app);
        if (kind === 'unban')
          expect((await operator(app).post('/v1/admin/punishments/ban', { user_id: target.user.id })).status).toBe(200);
        const before = await footprint(target.user.id);
        const res = await racing(
          target.user.id,
          `update users set permission_level = 0 where id = ${admin.user.id}`,
          () => admin.client.post(`/v1/admin/punishments/${kind}`, { user_id: target.user.id, ...body }),
        );
        expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
        expect(await footprint(target.user.id)).toEqual(before);
      },
    );
  }

  onPostgres('an Admin deleted while its warn runs answers 403 ERR_FORBIDDEN and writes nothing', async () => {
    const admin = await member(app, { level: 2 });
    const target = await member(app);
    const before = await footprint(target.user.id);
    const res = await racing(target.user.id, `delete from users where id = ${admin.user.id}`, () =>
      admin.client.post('/v1/admin/punishments/warn', { user_id: target.user.id, reason: 'x' }),
    );
    expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect(await footprint(target.user.id)).toEqual(before);
  });

  for (const kind of ['ban', 'timeout'] as const) {
    onPostgres(
      `two Owners ${kind === 'ban' ? 'banning' : 'timing out'} each other at once: one is refused (403) and one Owner remains free`,
      async () => {
        const pg = sql as postgres.Sql;
        const a = await member(app, { level: 3 });
        const b = await member(app, { level: 3 });
        const body = (userId: number) => (kind === 'ban' ? { user_id: userId } : { user_id: userId, duration: 3600 });
        // Both rows held until both requests have passed their guards and wait for them.
        const holder = hold(pg, (tx) => tx`select id from users where id in (${a.user.id}, ${b.user.id}) for update`);
        await holder.ready;
        const aActsOnB = a.client.post(`/v1/admin/punishments/${kind}`, body(b.user.id));
        const bActsOnA = b.client.post(`/v1/admin/punishments/${kind}`, body(a.user.id));
        await lockWaiters(pg, 2);
        await holder.end();
        const answers = [await aActsOnB, await bActsOnA].map((r) => [r.status, r.body.code]);
        expect(answers.sort()).toEqual([
          [200, undefined],
          [403, 'ERR_FORBIDDEN'],
        ]);
        const ids = `${a.user.id}, ${b.user.id}`;
        const state = kind === 'ban' ? 2 : 1;
        expect(await countRows(app, `select count(*) as n from users where id in (${ids}) and state = ${state}`)).toBe(
          1,
        );
        expect(await countRows(app, `select count(*) as n from moderation_actions where user_id in (${ids})`)).toBe(1);
        expect(
          await countRows(
            app,
            `select count(*) as n from audit_log where target_user_id in (${ids}) and action = '${kind}'`,
          ),
        ).toBe(1);
      },
    );
  }

  for (const kind of CHAT_ACTIONS) {
    onPostgres(`a chat ${kind} by an Admin demoted to User while it runs answers 403 and changes nothing`, async () => {
      const c = await premiumChat('public');
      const guest = await c.add();
      if (kind === 'unban' || kind === 'unmute') {
        const lifted = kind === 'unban' ? 'ban' : 'mute';
        expect((await chatAct(c.owner, c.chatId, lifted, guest.user.id)).status).toBe(200);
      }
      const admin = await member(app, { level: 2 });
      const before = await footprint(guest.user.id, c.chatId);
      const res = await racing(guest.user.id, `update users set permission_level = 0 where id = ${admin.user.id}`, () =>
        chatAct(admin, c.chatId, kind, guest.user.id),
      );
      expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
      expect(await footprint(guest.user.id, c.chatId)).toEqual(before);
    });
  }

  onPostgres('a chat kick by its owner banned while it runs answers 403 and changes nothing', async () => {
    const c = await premiumChat('public');
    const guest = await c.add();
    const before = await footprint(guest.user.id, c.chatId);
    const res = await racing(guest.user.id, `update users set state = 2 where id = ${c.owner.user.id}`, () =>
      chatAct(c.owner, c.chatId, 'kick', guest.user.id),
    );
    expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect(await footprint(guest.user.id, c.chatId)).toEqual(before);
  });

  for (const path of ['hard-mute', 'hard-unmute'] as const) {
    onPostgres(`a ${path} by a Moderator demoted to User while it runs answers 403 and changes nothing`, async () => {
      const mod = await member(app, { level: 1 });
      const target = await member(app);
      if (path === 'hard-unmute')
        expect((await mod.client.post('/v1/portal/hard-mute', { user_id: target.user.id })).status).toBe(200);
      const before = await footprint(target.user.id);
      const res = await racing(target.user.id, `update users set permission_level = 0 where id = ${mod.user.id}`, () =>
        mod.client.post(`/v1/portal/${path}`, { user_id: target.user.id }),
      );
      expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
      expect(await footprint(target.user.id)).toEqual(before);
    });
  }
});

/**
 * A chat action decides spec 4.6 rule 2 again on the chat row its transaction locks (kick, ban,
 * mute and warn as for a write in the chat, timeout, unban and unmute FOR SHARE): the test holds
 * the row, changed to private by a transaction not yet committed (the owner's settings on another
 * node), and the Moderator's action, whose checks read the chat still public, waits for it.
 */
describeApp('moderation decides the chat rule on the chat row it locks (PostgreSQL)', () => {
  for (const kind of ['kick', 'ban', 'warn', 'timeout', 'unban'] as const) {
    onPostgres(
      `a Moderator's ${kind} racing the chat's change to private answers 403 ERR_FORBIDDEN and changes nothing (spec 4.6 rule 2)`,
      async () => {
        const pg = sql as postgres.Sql;
        const c = await premiumChat('public');
        const guest = await c.add();
        if (kind === 'unban') expect((await chatAct(c.owner, c.chatId, 'ban', guest.user.id)).status).toBe(200);
        const mod = await member(app, { level: 1 });
        const state = async () => ({
          records: await recordsOf(guest.user.id),
          lifted: await countRows(
            app,
            `select count(*) as n from moderation_actions where user_id = ${guest.user.id} and is_lifted`,
          ),
          audit: await auditOf(guest.user.id),
          member: await countRows(
            app,
            `select count(*) as n from chat_members where chat_id = ${c.chatId} and user_id = ${guest.user.id} and left_at is null`,
          ),
          userState: await countRows(app, `select state as n from users where id = ${guest.user.id}`),
        });
        const before = await state();
        const holder = hold(pg, async (tx) => {
          await tx`select id from chats where id = ${c.chatId} for update`;
          await tx`update chats set type = 'private' where id = ${c.chatId}`;
        });
        await holder.ready;
        const res = chatAct(mod, c.chatId, kind, guest.user.id);
        await lockWaitersOr(pg, 1, res);
        await holder.end();
        const answer = await res;
        expect([answer.status, answer.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
        expect(await state()).toEqual(before);
      },
    );
  }

  for (const [kind, level] of [
    ['kick', 1],
    ['ban', 1],
    ['mute', 2],
  ] as const) {
    onPostgres(
      `a level-${level} ${kind} of a member who becomes the chat's owner meanwhile answers 403 ERR_FORBIDDEN and writes nothing`,
      async () => {
        const pg = sql as postgres.Sql;
        const c = await premiumChat('public');
        const guest = await c.add();
        const staff = await member(app, { level });
        const before = await footprint(guest.user.id, c.chatId);
        const holder = hold(pg, async (tx) => {
          await tx`select id from chats where id = ${c.chatId} for update`;
          await tx`update chats set owner_user_id = ${guest.user.id} where id = ${c.chatId}`;
        });
        await holder.ready;
        const res = chatAct(staff, c.chatId, kind, guest.user.id);
        await lockWaitersOr(pg, 1, res);
        await holder.end();
        const answer = await res;
        expect([answer.status, answer.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
        expect(await footprint(guest.user.id, c.chatId)).toEqual(before);
      },
    );
  }
});

/**
 * A kick takes the chat row's lock, then the target's users row; a chat mute, a chat warning and a
 * platform ban write the chat row too (a system message's id, the epochs a ban raises), and a chat
 * timeout holds it FOR SHARE (its chat rule is decided on it), so they take it before the user's,
 * in the same order: two moderators acting on one member at once wait
 * for each other instead of deadlocking (one of them answered 500, its action lost). The test fixes
 * the interleaving that deadlocked: the kick holds the chat row and waits (at its membership
 * update, for a row the test holds) while the other action starts. PGlite runs one transaction at a
 * time: nothing interleaves there.
 */
describeApp('moderators acting on one member at once wait for each other (PostgreSQL)', () => {
  const others = {
    mute: (chatId: number, owner: Member, target: Member) =>
      owner.client.post(`/v1/portal/chats/${chatId}/mute`, { user_id: target.user.id, reason: 'x' }),
    warn: (chatId: number, owner: Member, target: Member) =>
      owner.client.post(`/v1/portal/chats/${chatId}/warn`, { user_id: target.user.id, reason: 'x' }),
    'platform ban': (_chatId: number, _owner: Member, target: Member) =>
      operator(app).post('/v1/admin/punishments/ban', { user_id: target.user.id }),
    timeout: (chatId: number, owner: Member, target: Member) =>
      owner.client.post(`/v1/portal/chats/${chatId}/timeout`, { user_id: target.user.id, duration: 60 }),
  };
  const recorded = {
    mute: 'CHAT_MUTE',
    warn: 'PLATFORM_WARNING',
    'platform ban': 'PLATFORM_BAN',
    timeout: 'PLATFORM_TIMEOUT',
  };
  for (const [other, act] of Object.entries(others) as [keyof typeof others, (typeof others)['mute']][]) {
    onPostgres(`a kick and a ${other} of the same member at once both answer 200 and both take effect`, async () => {
      const pg = sql as postgres.Sql;
      const { owner, chatId } = await keyedChat(app);
      const guest = await member(app);
      expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
      const holder = hold(
        pg,
        (tx) => tx`select 1 from chat_members where chat_id = ${chatId} and user_id = ${guest.user.id} for share`,
      );
      await holder.ready;
      const kick = owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: guest.user.id });
      await lockWaiters(pg, 1);
      const second = act(chatId, owner, guest);
      await lockWaiters(pg, 2);
      await holder.end();
      const [k, s] = await Promise.all([kick, second]);
      expect({ kick: [k.status, k.body.code], [other]: [s.status, s.body.code] }).toEqual({
        kick: [200, undefined],
        [other]: [200, undefined],
      });
      const stillIn = `select count(*) as n from chat_members where chat_id = ${chatId} and user_id = ${guest.user.id} and left_at is null`;
      expect(await countRows(app, stillIn)).toBe(0);
      const records = `select count(*) as n from moderation_actions where user_id = ${guest.user.id} and action_type in ('CHAT_KICK', '${recorded[other]}')`;
      expect(await countRows(app, records)).toBe(2);
    });
  }

  onPostgres('a new member joining and a mute of it at once both succeed', async () => {
    const pg = sql as postgres.Sql;
    const { owner, chatId } = await keyedChat(app);
    const guest = await member(app);
    const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
    const code: string = invite.body.invite.code;
    // The join holds the chat row and waits at its invite's use (a row the test holds).
    const holder = hold(pg, (tx) => tx`select 1 from chat_invites where code = ${code} for update`);
    await holder.ready;
    const joined = join(guest, { invite: code });
    await lockWaiters(pg, 1);
    const mute = owner.client.post(`/v1/portal/chats/${chatId}/mute`, { user_id: guest.user.id });
    await lockWaiters(pg, 2);
    await holder.end();
    const [j, m] = await Promise.all([joined, mute]);
    expect({ join: j.ok, mute: [m.status, m.body.code] }).toEqual({ join: true, mute: [200, undefined] });
    const muted = `select count(*) as n from moderation_actions where user_id = ${guest.user.id} and chat_id = ${chatId} and action_type = 'CHAT_MUTE'`;
    expect(await countRows(app, muted)).toBe(1);
  });
});

describeApp('a ban or timeout ends the punished user’s search', () => {
  let n = 0;
  const tag = () => `modq${Date.now() % 1000}x${++n}`;
  const punishments: [string, (target: Member) => Promise<{ status: number; body: any }>][] = [
    ['an admin ban', (target) => operator(app).post('/v1/admin/punishments/ban', { user_id: target.user.id })],
    [
      'an admin timeout',
      (target) => operator(app).post('/v1/admin/punishments/timeout', { user_id: target.user.id, duration: 3600 }),
    ],
    [
      'a chat timeout',
      async (target) => {
        const { owner, chatId } = await premiumChat('public');
        expect((await join(target, { chat_id: chatId })).ok).toBe(true);
        return owner.client.post(`/v1/portal/chats/${chatId}/timeout`, { user_id: target.user.id, duration: 3600 });
      },
    ],
  ];
  for (const [what, punish] of punishments) {
    it(`${what} takes a searching user out of the match queue: the next searcher on its tag is not paired with it`, async () => {
      const t = tag();
      const [target, next] = [await member(app), await member(app)];
      expect((await target.client.post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
      const res = await punish(target);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect((await app.services.matchmaking.status(target.user.id)).state).toBe('idle');
      expect((await next.client.post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
      expect((await next.client.get('/v1/portal/match/status')).body.state).toBe('searching');
      await next.client.post('/v1/portal/match/dequeue', {});
    });
  }
});

/**
 * A send's checks read the statement's snapshot; only the write of the chat row sees what
 * committed while it waited for that row. A chat mute holds the chat row (its system message's id)
 * and raises the row's restrictions_seq, which the send requires unchanged: a send of the target
 * queued behind the mute is refused as muted, never stored after the mute's system message, while
 * sends that meet on the row leave the counter alone and all write. PGlite runs one transaction at
 * a time: nothing interleaves there.
 */
describeApp('sends racing a chat mute, and each other, on the chat row (PostgreSQL)', () => {
  onPostgres('an innocent send that meets three mutes of others in a row is stored (200), not refused', async () => {
    const pg = sql as postgres.Sql;
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    // What a chat mute of someone else does to the chat row (messages.store raiseRestrictions), held
    // open as a mute holds it while it waits for its target's row: each run of the send waits for
    // the row, finds the counter raised, writes nothing, passes its checks and runs again.
    const mute = () =>
      hold(pg, (tx) => tx`update chats set restrictions_seq = restrictions_seq + 1 where id = ${chatId}`);
    const sendWaits = async () => {
      for (;;) {
        const [row] = await pg<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and query like '%with input (ord, u, s, c)%'`;
        if ((row?.n ?? 0) === 1) return;
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    let held = mute();
    await held.ready;
    const sent = send(owner, chatId, chatKey, epoch);
    for (let i = 0; i < 2; i++) {
      await sendWaits();
      const next = mute();
      await lockWaiters(pg, 2);
      await held.end();
      await next.ready;
      held = next;
    }
    await sendWaits();
    await held.end();
    const res = await sent;
    expect([res.status, res.body.code]).toEqual([200, undefined]);
    const stored = await pg<{ n: number }[]>`
      select count(*)::int as n from messages where chat_id = ${chatId} and type = 'user'`;
    expect(stored[0]?.n).toBe(1);
  });

  onPostgres(
    'a send by the target waiting for the row of its chat mute answers 403 ERR_MUTED and stores nothing',
    async () => {
      const pg = sql as postgres.Sql;
      const { owner, chatId, chatKey, epoch, guest } = await chatWithGuest();
      // The mute takes the chat row, then waits for the target's (held here); the send waits for the chat row.
      const holder = hold(pg, (tx) => tx`select id from users where id = ${guest.user.id} for update`);
      await holder.ready;
      const mute = owner.client.post(`/v1/portal/chats/${chatId}/mute`, { user_id: guest.user.id, duration: 300 });
      await lockWaiters(pg, 1);
      const sent = send(guest, chatId, chatKey, epoch);
      await lockWaiters(pg, 2);
      await holder.end();
      const [m, s] = await Promise.all([mute, sent]);
      expect(m.status).toBe(200);
      expect({ status: s.status, body: s.body }).toMatchObject({ status: 403, body: { code: 'ERR_MUTED', ttl: 300 } });
      const history = await owner.client.get(`/v1/portal/chats/${chatId}/messages?limit=1`);
      expect(history.body.messages[0]).toMatchObject({
        type: 'system',
        system: { kind: 'mute', user_id: guest.user.id },
      });
      const guestSent = `select count(*) as n from messages where chat_id = ${chatId} and sender_id = ${guest.user.id}`;
      expect(await countRows(app, guestSent)).toBe(0);
    },
  );

  onPostgres('two send statements waiting for the chat row at once both write, with consecutive ids', async () => {
    const pg = sql as postgres.Sql;
    const { owner, chatId, epoch, guest } = await chatWithGuest();
    // Two statements, as two nodes send (one node sends a chat's batches one at a time).
    const store = makeMessagesStore(app.database.db);
    const batch = (m: Member, content: string) =>
      store.sendBatch({
        chatId,
        epoch,
        now: clock.now(),
        items: [{ userId: m.user.id, sessionId: m.sessionId, content }],
      });
    const holder = hold(pg, (tx) => tx`select id from chats where id = ${chatId} for no key update`);
    await holder.ready;
    const first = batch(owner, 'a');
    await lockWaiters(pg, 1);
    const second = batch(guest, 'b');
    await lockWaiters(pg, 2);
    await holder.end();
    const [[a], [b]] = await Promise.all([first, second]);
    expect(a).toBeDefined();
    expect(b).toMatchObject({ ms: a?.ms, seq: (a?.seq ?? 0) + 1 });
  });
});

/**
 * docs/api.md Moderation, lock order: the user's chat rows (id order), then the user's row, then
 * session rows. A platform ban takes them in that order; a logout, a first key registration and a
 * login that evicts a keyed session of the banned user took a session row (or the user's) first
 * and so met the ban in a deadlock (PostgreSQL's 1 s check, then one of them ran again). Each test
 * fixes that interleaving: the ban holds the chats and the user's row and waits at its record's
 * insert (a trigger the test gates) while the other request starts; then the ban goes on. PGlite
 * runs one transaction at a time: nothing interleaves there.
 */
describeApp('a platform ban and the banned user’s own session writes at once (PostgreSQL)', () => {
  /** A ban of `target` held at its record's insert (holding the chats and the user's row). */
  async function heldBan(pg: postgres.Sql, targetId: number) {
    const gate = await gateInserts(pg, 'moderation_actions', `new.user_id = ${targetId}`);
    const ban = operator(app).post('/v1/admin/punishments/ban', { user_id: targetId });
    await lockWaiters(pg, 1);
    return { gate, ban };
  }

  /** A keyed member of a keyed chat. */
  async function guestInChat() {
    const { chatId } = await keyedChat(app);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    return guest;
  }

  const liveSessions = (userId: number) =>
    countRows(app, `select count(*) as n from sessions where user_id = ${userId} and ended_at is null`);
  const stateOf = async (userId: number) => countRows(app, `select state as n from users where id = ${userId}`);

  onPostgres('a ban and a logout of a keyed session: no deadlock, both answer 200', async () => {
    const pg = sql as postgres.Sql;
    const guest = await guestInChat();
    const before = deadlockVictimRuns();
    const { gate, ban } = await heldBan(pg, guest.user.id);
    let answers: Awaited<typeof ban>[];
    try {
      const logout = guest.client.post('/v1/authentication/logout', {});
      await lockWaiters(pg, 2);
      await gate.open();
      answers = await Promise.all([ban, logout]);
    } finally {
      await gate.close();
    }
    expect({
      ban: answers[0]?.status,
      logout: answers[1]?.status,
      deadlocks: deadlockVictimRuns() - before,
    }).toEqual({ ban: 200, logout: 200, deadlocks: 0 });
    expect(await liveSessions(guest.user.id)).toBe(0);
    expect(await countRows(app, `select count(*) as n from session_keys where user_id = ${guest.user.id}`)).toBe(0);
    expect(await stateOf(guest.user.id)).toBe(2);
  });

  onPostgres('a ban and a first key registration: no deadlock; the ended session takes no key', async () => {
    const pg = sql as postgres.Sql;
    const { chatId } = await keyedChat(app);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    // A second session of the guest, with no key yet.
    const fresh = await login(app, { platformUserId: guest.platformUserId });
    const freshId = await sessionIdOf(app, fresh.client);
    const publicKey = publicKeyToBase64(generateKeyPair().publicKey);
    const before = deadlockVictimRuns();
    const { gate, ban } = await heldBan(pg, guest.user.id);
    let answers: Awaited<typeof ban>[];
    try {
      const reg = fresh.client.post('/v1/portal/keys', { public_key: publicKey });
      await lockWaiters(pg, 2);
      await gate.open();
      answers = await Promise.all([ban, reg]);
    } finally {
      await gate.close();
    }
    expect({
      ban: answers[0]?.status,
      registration: [answers[1]?.status, answers[1]?.body.code],
      deadlocks: deadlockVictimRuns() - before,
    }).toEqual({ ban: 200, registration: [401, 'ERR_UNAUTHENTICATED'], deadlocks: 0 });
    expect(await countRows(app, `select count(*) as n from session_keys where session_id = ${freshId}`)).toBe(0);
    expect(await liveSessions(guest.user.id)).toBe(0);
    expect(await stateOf(guest.user.id)).toBe(2);
  });

  onPostgres('a ban and an account deletion: no deadlock, both answer 200, the account is gone', async () => {
    const pg = sql as postgres.Sql;
    const { chatId } = await keyedChat(app);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    const before = deadlockVictimRuns();
    // The test holds the chat's row: the ban queues on it first (chats, then the user's row), then
    // the deletion. A deletion that took the user's row before the chats (as it did) would hold it
    // while the ban, once the chat is free, waits for it: a deadlock.
    const held = hold(pg, (tx) => tx`select id from chats where id = ${chatId} for update`);
    await held.ready;
    let answers: { status: number }[];
    try {
      const ban = operator(app).post('/v1/admin/punishments/ban', { user_id: guest.user.id });
      await lockWaiters(pg, 1);
      const deletion = operator(app).post(`/v1/admin/users/${guest.user.id}/delete`, {});
      await lockWaiters(pg, 2);
      await held.end();
      answers = await Promise.all([ban, deletion]);
    } finally {
      await held.end();
    }
    expect({
      ban: answers[0]?.status,
      deletion: answers[1]?.status,
      deadlocks: deadlockVictimRuns() - before,
    }).toEqual({ ban: 200, deletion: 200, deadlocks: 0 });
    expect(await countRows(app, `select count(*) as n from users where id = ${guest.user.id}`)).toBe(0);
  });

  onPostgres('a ban and a login that evicts a keyed session: no deadlock, both answer 200', async () => {
    const pg = sql as postgres.Sql;
    const guest = await guestInChat();
    // The guest at the session cap: its oldest session (keyed, in the chat) goes at the next login.
    for (let i = 1; i < Limits.MAX_SESSIONS_PER_USER; i++) await member(app, { platformUserId: guest.platformUserId });
    const next = await loginUpToVerify(app, guest.platformUserId);
    const before = deadlockVictimRuns();
    // This time the login comes first: it holds the user's row (and, keeping to the order, the
    // chats) at its session's insert while the ban starts.
    const gate = await gateInserts(pg, 'sessions', `new.user_id = ${guest.user.id}`);
    let answers: Awaited<ReturnType<typeof next.verify>>[];
    try {
      const verify = next.verify();
      await lockWaiters(pg, 1);
      const ban = operator(app).post('/v1/admin/punishments/ban', { user_id: guest.user.id });
      await lockWaiters(pg, 2);
      await gate.open();
      answers = await Promise.all([verify, ban]);
    } finally {
      await gate.close();
    }
    expect({
      login: answers[0]?.status,
      ban: answers[1]?.status,
      deadlocks: deadlockVictimRuns() - before,
    }).toEqual({ login: 200, ban: 200, deadlocks: 0 });
    const evicted = `select count(*) as n from sessions where id = ${guest.sessionId} and end_reason = 'evicted'`;
    expect(await countRows(app, evicted)).toBe(1);
    expect(await liveSessions(guest.user.id)).toBe(0);
    expect(await stateOf(guest.user.id)).toBe(2);
  });
});
