import { AuditCodes } from '@parlor/protocol';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyEpoch, keyedChat, member } from './support/chat-flows.js';
import { type Answer, Client, nextIp } from './support/client.js';
import { countRows } from './support/faults.js';
import { createBot, createLoginBot, type LoggedIn, login, operator, setLevel } from './support/flows.js';
import { gateInserts, hold, lockWaiters, lockWaitersOr } from './support/pg-locks.js';
import { closeAllSockets, connectSocket, disconnected } from './support/sockets.js';

/** The admin surface's own behaviour; who may call each route is admin-levels.test.ts. */

let app: TestApp;
let op: Client;
let loginBot: Client;
let admin: LoggedIn;
let owner: LoggedIn;
/** PostgreSQL (cluster project): the tests' own connection, to hold rows as another node would. */
let sql: postgres.Sql | undefined;

beforeAll(async () => {
  app = await startApp();
  if (app.config.databaseUrl) sql = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
  op = operator(app);
  loginBot = await createLoginBot(app);
  admin = await login(app, { bot: loginBot });
  await setLevel(app, admin.user.id, 2);
  owner = await login(app, { bot: loginBot });
  await setLevel(app, owner.user.id, 3);
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

/** The newest audit entries about a user or a bot, read through the admin route. */
const auditOf = async (query: string) => {
  const res = await op.get(`/v1/admin/audit?${query}`);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.entries as any[];
};

describeApp('POST /v1/admin/bots/{bot_id}/update', () => {
  it('changes every field, answers the full profile and audits the changes (202)', async () => {
    const bot = await createBot(app, { name: 'Before' });
    const res = await admin.client.post(`/v1/admin/bots/${bot.id}/update`, {
      name: 'After',
      type: 'verified',
      rate_limit_per_hour: 1234,
      owner_user_id: admin.user.id,
      avatar_url: 'https://cdn.example/bot.png',
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({
      id: bot.id,
      name: 'After',
      avatar_url: 'https://cdn.example/bot.png',
      type: 2,
      rate_limit_per_hour: 1234,
      owner_user_id: admin.user.id,
      stats: { users: null, latency_ms: null, reported_at: null },
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
    expect((await bot.client.get('/v1/bot/me')).body).toEqual(res.body);
    const [entry] = (await auditOf(`code=${AuditCodes.BOT_UPDATE}`)).filter((e) => e.target_bot_id === bot.id);
    expect(entry).toMatchObject({
      actor_kind: 'user',
      actor_id: admin.user.id,
      action: 'update',
      data: { name: { from: 'Before', to: 'After' }, type: { from: 3, to: 2 }, rate_limit_per_hour: { to: 1234 } },
    });

    const cleared = await op.post(`/v1/admin/bots/${bot.id}/update`, { owner_user_id: null, avatar_url: null });
    expect(cleared.body).toMatchObject({ owner_user_id: null, avatar_url: null, name: 'After' });
  });

  it('refuses an unknown owner (404 ERR_USER_NOT_FOUND), an unknown bot (404) and an empty body (400)', async () => {
    const bot = await createBot(app);
    expectError(
      await op.post(`/v1/admin/bots/${bot.id}/update`, { owner_user_id: 2_000_000_000 }),
      404,
      'ERR_USER_NOT_FOUND',
    );
    expectError(await op.post('/v1/admin/bots/2000000000/update', { name: 'x' }), 404, 'ERR_BOT_NOT_FOUND');
    expectError(await op.post(`/v1/admin/bots/${bot.id}/update`, {}), 400, 'ERR_VALIDATION');
    expectError(await op.post(`/v1/admin/bots/${bot.id}/update`, { avatar_url: 'ftp://x' }), 400, 'ERR_VALIDATION');
  });

  it('answers 400 ERR_VALIDATION to an avatar_url that is no http(s) URL with a host, changing nothing', async () => {
    const bot = await createBot(app);
    const before = await bot.client.get('/v1/bot/me');
    expect(before.status).toBe(200);
    for (const avatar_url of ['https://', 'http://[', 'https:// example.com/a.png']) {
      expectError(await op.post(`/v1/admin/bots/${bot.id}/update`, { avatar_url }), 400, 'ERR_VALIDATION');
    }
    expect((await bot.client.get('/v1/bot/me')).body).toEqual(before.body);
  });

  it('lets only Owners and the operator register an official bot', async () => {
    expectError(
      await admin.client.post('/v1/admin/bots/create', { name: 'Official?', type: 'official' }),
      403,
      'ERR_FORBIDDEN',
    );
    const res = await owner.client.post('/v1/admin/bots/create', { name: 'Official', type: 'official' });
    expect(res.status).toBe(200);
  });
});

describeApp('POST /v1/admin/bots/{bot_id}/delete', () => {
  it('stops the key at once (401), hides the bot, and audits the deletion (203)', async () => {
    const bot = await createBot(app, { name: 'Doomed' });
    expect((await bot.client.get('/v1/bot/me')).status).toBe(200);
    const res = await admin.client.post(`/v1/admin/bots/${bot.id}/delete`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true });
    expectError(await bot.client.get('/v1/bot/me'), 401, 'ERR_INVALID_API_KEY');
    const publicView = await new Client(app.url, nextIp(), app.publicApiKey).get(`/v1/bots/${bot.id}`);
    expectError(publicView, 404, 'ERR_BOT_NOT_FOUND');
    expectError(await admin.client.post(`/v1/admin/bots/${bot.id}/delete`), 404, 'ERR_BOT_NOT_FOUND');
    expectError(await admin.client.post(`/v1/admin/bots/${bot.id}/update`, { name: 'x' }), 404, 'ERR_BOT_NOT_FOUND');
    const entries = (await auditOf(`code=${AuditCodes.BOT_DELETE}`)).filter((e) => e.target_bot_id === bot.id);
    expect(entries).toEqual([
      expect.objectContaining({
        actor_kind: 'user',
        actor_id: admin.user.id,
        action: 'delete',
        data: { name: 'Doomed' },
      }),
    ]);
  });
});

describeApp('POST /v1/admin/users/{user_id}/update', () => {
  it('sets the avatar source (audit 101 avatar) and refuses one the user cannot use', async () => {
    const target = await login(app, { bot: loginBot });
    const res = await admin.client.post(`/v1/admin/users/${target.user.id}/update`, { avatar_source: 'platform_a_3' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ avatar_source: 'platform_a_3' });
    expect((await target.client.get('/v1/users/me')).body.user.avatar_source).toBe('platform_a_3');
    const [entry] = await auditOf(`target_user_id=${target.user.id}&code=${AuditCodes.USER_UPDATE}`);
    expect(entry).toMatchObject({ action: 'avatar', actor_id: admin.user.id, data: { from: '', to: 'platform_a_3' } });

    // platform_b is not linked to this account.
    const bad = await admin.client.post(`/v1/admin/users/${target.user.id}/update`, {
      avatar_source: 'platform_b',
      username: 'never_applied',
    });
    expectError(bad, 400, 'ERR_VALIDATION');
    expect(bad.body.errors).toEqual([{ path: 'body/avatar_source', message: expect.any(String) }]);
    expect((await target.client.get('/v1/users/me')).body.user).toMatchObject({
      avatar_source: 'platform_a_3',
      username: target.user.username,
    });
  });

  it('checks the username before changing anything else', async () => {
    const target = await login(app, { bot: loginBot });
    const bad = await op.post(`/v1/admin/users/${target.user.id}/update`, { permission_level: 1, username: 'x' });
    expectError(bad, 400, 'ERR_VALIDATION');
    expect((await target.client.get('/v1/users/me')).body.user.permission_level).toBe(0);
    expectError(await op.post(`/v1/admin/users/${target.user.id}/update`, { state: 2 }), 400, 'ERR_VALIDATION');
  });

  it('applies every field in one transaction: a taken username leaves the level, avatar and audit untouched', async () => {
    const holder = await login(app, { bot: loginBot });
    const target = await login(app, { bot: loginBot });
    const before = (await target.client.get('/v1/users/me')).body.user;
    expect(before.avatar_source).not.toBe('platform_a_3');
    const taken = await op.post(`/v1/admin/users/${target.user.id}/update`, {
      permission_level: 1,
      avatar_source: 'platform_a_3',
      username: holder.user.username.toUpperCase(),
    });
    expectError(taken, 409, 'ERR_USERNAME_TAKEN');
    expect((await target.client.get('/v1/users/me')).body.user).toEqual(before);
    expect(await auditOf(`target_user_id=${target.user.id}`)).toEqual([]);

    const ok = await op.post(`/v1/admin/users/${target.user.id}/update`, {
      permission_level: 1,
      username: `renamed_${target.user.id}`,
    });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body).toMatchObject({ permission_level: 1, username: `renamed_${target.user.id}` });
    const actions = (await auditOf(`target_user_id=${target.user.id}`)).map((e) => e.action).sort();
    expect(actions).toEqual(['rename', 'set-permission']);
  });

  it('takes a level the user already has as no change: an Owner renames itself naming its own level, which a change still refuses', async () => {
    const self = await login(app, { bot: loginBot });
    await setLevel(app, self.user.id, 3);
    const renamed = await self.client.post(`/v1/admin/users/${self.user.id}/update`, {
      permission_level: 3,
      username: `self_${self.user.id}`,
    });
    expect(renamed.status, JSON.stringify(renamed.body)).toBe(200);
    expect(renamed.body).toMatchObject({ permission_level: 3, username: `self_${self.user.id}` });
    // Another Owner naming it too: Owners assign up to Admin, but this assigns nothing.
    const same = await owner.client.post(`/v1/admin/users/${self.user.id}/update`, { permission_level: 3 });
    expect(same.status, JSON.stringify(same.body)).toBe(200);
    const actions = (await auditOf(`target_user_id=${self.user.id}`)).map((e) => e.action);
    expect(actions).toEqual(['rename', 'set-permission']);
    const demote = await self.client.post(`/v1/admin/users/${self.user.id}/update`, {
      permission_level: 2,
      username: 'never_applied',
    });
    expectError(demote, 403, 'ERR_FORBIDDEN');
    expect((await self.client.get('/v1/users/me')).body.user).toMatchObject({
      permission_level: 3,
      username: `self_${self.user.id}`,
    });
  });
});

describeApp('an anonymous stranger as the target of an admin user action', () => {
  it('answers 404 ERR_USER_NOT_FOUND to a level change, rename, avatar change and deletion of a stranger; nothing changes', async () => {
    const peer = await member(app);
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const made = await client.post('/v1/portal/stranger', {});
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    const sid: number = made.body.user.id;
    client.apiKey = null;
    const direct = await app.services.chats.createDirect([sid, peer.user.id], ['strangeradmin']);
    if ('refused' in direct) throw new Error(`direct chat refused: ${JSON.stringify(direct.refused)}`);
    const chatId = direct.chat.id;
    expect((await join(peer, { chat_id: chatId })).ok).toBe(true);
    const { chatKey, epoch } = await keyEpoch(peer, chatId);
    const content = bundle(chatKey, chatId, epoch, 'peer message');
    const sent = await peer.client.post(`/v1/portal/chats/${chatId}/messages`, { content });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);

    // A Moderator level would let the stranger delete its peer's messages in their direct chat.
    for (const body of [
      { permission_level: 1 },
      { permission_level: 3 },
      { username: `renamed_${sid}` },
      { avatar_source: '' },
    ])
      for (const caller of [op, owner.client, admin.client])
        expectError(await caller.post(`/v1/admin/users/${sid}/update`, body), 404, 'ERR_USER_NOT_FOUND');
    for (const caller of [op, owner.client])
      expectError(await caller.post(`/v1/admin/users/${sid}/delete`), 404, 'ERR_USER_NOT_FOUND');

    expect(await auditOf(`target_user_id=${sid}`)).toEqual([]);
    expect(await countRows(app, `select count(*) as n from notifications where user_id = ${sid}`)).toBe(0);
    const unchanged = `select count(*) as n from users where id = ${sid} and permission_level = 0 and username = '${made.body.user.username}'`;
    expect(await countRows(app, unchanged)).toBe(1);
    const refused = await client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [sent.body.id] });
    expect(refused.status, JSON.stringify(refused.body)).toBe(403);
    expect((await client.get(`/v1/portal/chats/${chatId}`)).status).toBe(200);
  });
});

describeApp('a permission level change on open sockets', () => {
  it('drops a demoted Admin’s sockets; the new socket has User powers (no joining private chats)', async () => {
    const first = await keyedChat(app, 'private');
    const second = await keyedChat(app, 'private');
    const demoted = await member(app, { level: 2 });
    // An Admin may enter any private chat.
    expect((await join(demoted, { chat_id: first.chatId })).ok).toBe(true);
    const gone = disconnected(demoted.socket, 5_000);
    expect((await op.post(`/v1/admin/users/${demoted.user.id}/update`, { permission_level: 0 })).status).toBe(200);
    expect(await gone).toBe('io server disconnect');
    const again = await connectSocket(app.url, demoted.client);
    expect(await again.emitWithAck('room:join', { chat_id: second.chatId })).toMatchObject({
      ok: false,
      code: 'ERR_CANNOT_BROWSE_PRIVATE',
    });
  });

  it('drops a promoted user’s sockets too, and only on a change', async () => {
    const promoted = await member(app);
    const bystander = await member(app);
    const gone = disconnected(promoted.socket, 5_000);
    expect((await op.post(`/v1/admin/users/${promoted.user.id}/update`, { permission_level: 1 })).status).toBe(200);
    await gone;
    const again = await connectSocket(app.url, promoted.client);
    // The same level again changes nothing, and other users' sockets stay.
    expect((await op.post(`/v1/admin/users/${promoted.user.id}/update`, { permission_level: 1 })).status).toBe(200);
    expect((await again.emitWithAck('room:leave', { chat_id: 999_999 })).ok).toBe(false);
    expect([again.connected, bystander.socket.connected]).toEqual([true, true]);
  });
});

describeApp('POST /v1/admin/users/{user_id}/delete', () => {
  it('ends every session and socket at once, and the identity can sign up anew', async () => {
    const target = await login(app, { bot: loginBot });
    const second = await login(app, { bot: loginBot, platformUserId: target.platformUserId });
    const socket = await connectSocket(app.url, target.client);
    const gone = disconnected(socket);

    const res = await admin.client.post(`/v1/admin/users/${target.user.id}/delete`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({ ok: true });
    await gone;
    expectError(await target.client.get('/v1/users/me'), 401, 'ERR_UNAUTHENTICATED');
    expectError(await second.client.get('/v1/users/me'), 401, 'ERR_UNAUTHENTICATED');
    expectError(await op.get(`/v1/users/${target.user.id}`, { apiKey: app.publicApiKey }), 404, 'ERR_USER_NOT_FOUND');
    expectError(await op.post(`/v1/admin/users/${target.user.id}/delete`), 404, 'ERR_USER_NOT_FOUND');

    const lookup = await new Client(app.url, nextIp(), app.publicApiKey).post('/v1/authentication/lookup', {
      username: target.user.username,
    });
    expectError(lookup, 404, 'ERR_USER_NOT_FOUND');

    // The same platform identity logs in again: a brand-new account.
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    await client.post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: target.platformUserId,
    });
    const code = await loginBot.post('/v1/authentication/bot/login-code', {
      platform: 'platform_a',
      platform_user_id: target.platformUserId,
      platform_username: 'again',
      platform_avatar_url: 'https://cdn.example/again.png',
    });
    const verify = await client.post('/v1/authentication/verify', { code: code.body.code });
    expect(verify.status, JSON.stringify(verify.body)).toBe(200);
    expect(verify.body.new_account).toBe(true);
    expect(verify.body.user.id).not.toBe(target.user.id);
    expect(verify.body.user.linked_platforms).toEqual([
      expect.objectContaining({ platform: 'platform_a', platform_user_id: target.platformUserId }),
    ]);
  });

  it('leaves the chats: they move to a new epoch; owned chats and bots lose their owner', async () => {
    const { owner: chatOwner, chatId, epoch } = await keyedChat(app);
    const peer = await member(app);
    expect((await join(peer, { chat_id: chatId })).ok).toBe(true);
    const bot = await createBot(app, { name: 'Owned' });
    await op.post(`/v1/admin/bots/${bot.id}/update`, { owner_user_id: chatOwner.user.id });

    const removed = peer.socket.next('portal:key_removed', (p) => p.user_id === chatOwner.user.id);
    const rekey = peer.socket.next('room:rekey', (p) => p.chat_id === chatId);
    const res = await owner.client.post(`/v1/admin/users/${chatOwner.user.id}/delete`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(await removed).toEqual({ chat_id: chatId, user_id: chatOwner.user.id, session_id: null });
    expect((await rekey).epoch).toBe(epoch + 1);

    const chat = await peer.client.get(`/v1/portal/chats/${chatId}`);
    expect(chat.body.chat).toMatchObject({ owner_id: null, member_count: 1, epoch: epoch + 1 });
    expect((await bot.client.get('/v1/bot/me')).body.owner_user_id).toBeNull();

    const [entry] = await auditOf(`target_user_id=${chatOwner.user.id}&code=${AuditCodes.USER_DELETE}`);
    expect(entry).toMatchObject({
      actor_kind: 'user',
      actor_id: owner.user.id,
      action: 'delete',
      data: { username: chatOwner.user.username, permission_level: 2, released_bots: [bot.id] },
    });
  });

  it('ends the user’s active direct chats as a leave does: archived, the peer told, its slot free, its epoch kept', async () => {
    const [gone, peer] = [await member(app), await member(app)];
    const made = await app.services.chats.createDirect([gone.user.id, peer.user.id], ['deletion']);
    if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
    const chatId = made.chat.id;
    for (const m of [gone, peer]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    const { epoch } = (await peer.client.get(`/v1/portal/chats/${chatId}`)).body.chat;
    const system = peer.socket.next('message:new', (m) => m.chat_id === chatId && m.system?.kind === 'leave');
    const updated = peer.socket.next('chat:updated', (p) => p.chat.id === chatId);

    expect((await op.post(`/v1/admin/users/${gone.user.id}/delete`)).status).toBe(200);
    expect((await system).system).toEqual({ kind: 'leave', user_id: gone.user.id });
    expect((await updated).chat).toMatchObject({ archived: true, epoch });
    expect((await peer.client.get(`/v1/portal/chats/${chatId}`)).body.chat).toMatchObject({
      archived: true,
      member_count: 1,
      epoch,
    });
    // Its one free direct-chat slot is free again.
    const next = await app.services.chats.createDirect([peer.user.id, owner.user.id], ['deletion']);
    expect('refused' in next).toBe(false);
  });

  it('refuses deleting yourself, even as an Owner', async () => {
    expectError(await owner.client.post(`/v1/admin/users/${owner.user.id}/delete`), 403, 'ERR_FORBIDDEN');
    expect((await owner.client.get('/v1/users/me')).status).toBe(200);
  });
});

describeApp('admin chat routes', () => {
  it('an Owner creates an official chat: no owner, no slots used, anyone may join', async () => {
    const res = await owner.client.post('/v1/admin/chats/create', { name: '  Announcements ' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.chat).toMatchObject({ type: 'official', name: 'Announcements', owner_id: null, member_count: 0 });
    const chatId = res.body.chat.id;
    const someone = await member(app);
    const joined = await join(someone, { chat_id: chatId });
    expect(joined.ok).toBe(true);
    expect(joined.chat.type).toBe('official');
    const [entry] = await auditOf(`code=${AuditCodes.CHAT_CREATE_OFFICIAL}&limit=1`);
    expect(entry).toMatchObject({ actor_id: owner.user.id, action: 'create-official', data: { chat_id: chatId } });

    // Admins manage other chats but not official ones, on the chat settings routes too.
    expectError(await admin.client.post(`/v1/portal/chats/${chatId}/delete`), 403, 'ERR_FORBIDDEN');
    expectError(await admin.client.post('/v1/admin/chats/create', { name: 'Nope' }), 403, 'ERR_FORBIDDEN');
    expectError(await owner.client.post(`/v1/admin/chats/${chatId}/update`, { type: 'public' }), 403, 'ERR_FORBIDDEN');
    const renamed = await owner.client.post(`/v1/admin/chats/${chatId}/update`, { name: 'News' });
    expect(renamed.body.chat).toMatchObject({ name: 'News', type: 'official' });
  });

  it('an Admin renames and deletes a user’s chat: members hear chat:updated and room:left; audited', async () => {
    const { owner: chatOwner, chatId } = await keyedChat(app);
    const updated = chatOwner.socket.next('chat:updated', (p) => p.chat.id === chatId);
    const res = await admin.client.post(`/v1/admin/chats/${chatId}/update`, { name: 'Tidied', type: 'private' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.chat).toMatchObject({ id: chatId, name: 'Tidied', type: 'private' });
    expect((await updated).chat.name).toBe('Tidied');

    const left = chatOwner.socket.next('room:left', (p) => p.chat_id === chatId);
    expect((await op.post(`/v1/admin/chats/${chatId}/delete`)).body).toEqual({ ok: true });
    expect(await left).toEqual({ chat_id: chatId, reason: 'deleted' });
    expectError(await chatOwner.client.get(`/v1/portal/chats/${chatId}`), 404, 'ERR_CHAT_NOT_FOUND');
    expectError(await op.post(`/v1/admin/chats/${chatId}/delete`), 404, 'ERR_CHAT_NOT_FOUND');

    const entries = (await auditOf(`target_user_id=${chatOwner.user.id}`)).filter((e) => e.data.chat_id === chatId);
    expect(entries.map((e) => [e.code, e.action, e.actor_kind])).toEqual([
      [AuditCodes.CHAT_ADMIN_DELETE, 'delete', 'operator'],
      [AuditCodes.CHAT_ADMIN_UPDATE, 'update', 'user'],
    ]);
  });
});

describeApp('GET /v1/admin/audit', () => {
  it('lists the actions newest first with their actors, filters by code and target, and pages', async () => {
    const target = await login(app, { bot: loginBot });
    const id = target.user.id;
    await admin.client.post('/v1/admin/punishments/warn', { user_id: id, reason: 'first' });
    await op.post('/v1/admin/punishments/timeout', { user_id: id, duration: 60, reason: 'second' });
    await owner.client.post('/v1/admin/subscriptions/grant', { user_id: id, tier: 'PREMIUM', duration_days: 30 });

    const all = await admin.client.get(`/v1/admin/audit?target_user_id=${id}`);
    expect(all.status).toBe(200);
    expect(all.body).toEqual({
      entries: [
        {
          id: expect.any(Number),
          actor_kind: 'user',
          actor_id: owner.user.id,
          target_user_id: id,
          target_bot_id: null,
          code: AuditCodes.SUBSCRIPTION_GRANT,
          action: 'premium',
          reason: null,
          data: expect.objectContaining({ tier: 2 }),
          created_at: expect.any(String),
        },
        expect.objectContaining({
          actor_kind: 'operator',
          actor_id: null,
          code: AuditCodes.PUNISH_TIMEOUT,
          reason: 'second',
        }),
        expect.objectContaining({ actor_kind: 'user', actor_id: admin.user.id, code: AuditCodes.PUNISH_WARN }),
      ],
      next_before: null,
    });

    const first = await op.get(`/v1/admin/audit?target_user_id=${id}&limit=2`);
    expect(first.body.entries).toHaveLength(2);
    expect(first.body.next_before).toBe(first.body.entries[1].id);
    const rest = await op.get(`/v1/admin/audit?target_user_id=${id}&limit=2&before=${first.body.next_before}`);
    expect(rest.body).toEqual({ entries: [all.body.entries[2]], next_before: null });

    const warns = await op.get(`/v1/admin/audit?code=${AuditCodes.PUNISH_WARN}&target_user_id=${id}`);
    expect(warns.body.entries.map((e: any) => e.reason)).toEqual(['first']);
  });

  it('shows an Admin only the entries about users below its level, deleted users and no user, in full pages', async () => {
    const ok = (res: Answer) => expect(res.status, JSON.stringify(res.body)).toBe(200);
    const start = (await op.get('/v1/admin/audit?limit=1')).body.entries[0].id as number;
    const peer = await login(app, { bot: loginBot });
    const someone = await login(app, { bot: loginBot });
    const gone = await login(app, { bot: loginBot });
    await setLevel(app, peer.user.id, 2);
    await setLevel(app, gone.user.id, 3);
    ok(
      await op.post('/v1/admin/subscriptions/grant', {
        user_id: owner.user.id,
        tier: 'PREMIUM',
        duration_days: 30,
        reason: 'private arrangement',
      }),
    );
    ok(await admin.client.post('/v1/admin/punishments/warn', { user_id: someone.user.id, reason: 'spam' }));
    ok(await owner.client.post('/v1/admin/chats/create', { name: 'Audited official' }));
    ok(await op.post(`/v1/admin/users/${gone.user.id}/delete`, {}));

    // Newest first: the deleted Owner's deletion, the official chat (no target user), the warning
    // of a User, the Owner's subscription, the promotion of the since deleted Owner, the promotion
    // of another Admin. The operator and Owners read all of them.
    const summary = (entries: any[]) => entries.filter((e) => e.id > start).map((e) => [e.code, e.target_user_id]);
    const everything = [
      [AuditCodes.USER_DELETE, gone.user.id],
      [AuditCodes.CHAT_CREATE_OFFICIAL, null],
      [AuditCodes.PUNISH_WARN, someone.user.id],
      [AuditCodes.SUBSCRIPTION_GRANT, owner.user.id],
      [AuditCodes.USER_PERMISSION_CHANGE, gone.user.id],
      [AuditCodes.USER_PERMISSION_CHANGE, peer.user.id],
    ];
    expect(summary((await op.get('/v1/admin/audit?limit=10')).body.entries)).toEqual(everything);
    expect(summary((await owner.client.get('/v1/admin/audit?limit=10')).body.entries)).toEqual(everything);

    // An Admin pages one entry at a time: every page is full and names the next, the entries
    // about an Owner and an Admin that exist are left out.
    const seen: any[] = [];
    let before: number | null = null;
    for (;;) {
      const page: Answer = await admin.client.get(`/v1/admin/audit?limit=1${before ? `&before=${before}` : ''}`);
      ok(page);
      expect(page.body.entries).toHaveLength(1);
      const [entry] = page.body.entries;
      expect(page.body.next_before).toBe(entry.id);
      if (entry.id <= start) break;
      seen.push(entry);
      before = page.body.next_before;
    }
    expect(summary(seen)).toEqual([
      [AuditCodes.USER_DELETE, gone.user.id],
      [AuditCodes.CHAT_CREATE_OFFICIAL, null],
      [AuditCodes.PUNISH_WARN, someone.user.id],
      [AuditCodes.USER_PERMISSION_CHANGE, gone.user.id],
    ]);
    // Asked about the Owner by name: an empty last page, as for a user with no entries.
    const owners = await admin.client.get(`/v1/admin/audit?target_user_id=${owner.user.id}`);
    expect(owners.body).toEqual({ entries: [], next_before: null });
  });

  it('is for Admins and above and the operator; checks its query', async () => {
    const moderator = await login(app, { bot: loginBot });
    await setLevel(app, moderator.user.id, 1);
    expectError(await moderator.client.get('/v1/admin/audit'), 403, 'ERR_FORBIDDEN');
    expectError(await new Client(app.url).get('/v1/admin/audit'), 401, 'ERR_UNAUTHENTICATED');
    for (const q of ['limit=0', 'limit=101', 'code=abc', 'before=0', 'actor=1']) {
      expectError(await op.get(`/v1/admin/audit?${q}`), 400, 'ERR_VALIDATION');
    }
    const page = await op.get('/v1/admin/audit');
    expect(page.body.entries.length).toBeGreaterThan(0);
    expect(page.body.entries.length).toBeLessThanOrEqual(50);
  });
});

// PGlite runs one transaction at a time, so nothing interleaves there; on PostgreSQL the test holds
// a users row (another node's change not yet committed) and the requests wait for it.
const onPostgres = it.skipIf(MODE !== 'cluster');

/** A user's permission level as stored (-1 once the row is gone). */
const levelOf = async (userId: number) =>
  countRows(app, `select coalesce(max(permission_level), -1) as n from users where id = ${userId}`);

/**
 * Runs `requests` while the test's own transaction holds `userId`'s row (running `work` in it, a
 * change another node has not committed yet), commits once every request waits for a lock or one
 * has answered without waiting (what it does without the caller's row lock), and answers them.
 */
async function whileHolding<const T extends readonly Promise<Answer>[]>(
  userId: number,
  work: string,
  requests: () => T,
) {
  if (!sql) throw new Error('cluster only');
  const holder = hold(sql, async (tx) => {
    await tx`select id from users where id = ${userId} for update`;
    if (work) await tx.unsafe(work);
  });
  await holder.ready;
  const answers = requests();
  await lockWaitersOr(sql, answers.length, Promise.race(answers));
  await holder.end();
  return Promise.all(answers);
}

describeApp('admin actions on users decide on the caller’s level as read under its row lock (PostgreSQL)', () => {
  onPostgres('two Owners demoting each other at once: one answers 403 ERR_FORBIDDEN, an Owner remains', async () => {
    const a = await login(app, { bot: loginBot });
    const b = await login(app, { bot: loginBot });
    await setLevel(app, a.user.id, 3);
    await setLevel(app, b.user.id, 3);
    // Both requests passed the route's check (both callers were Owners); they queue on the lower id's row.
    const [ra, rb] = await whileHolding(Math.min(a.user.id, b.user.id), '', () => [
      a.client.post(`/v1/admin/users/${b.user.id}/update`, { permission_level: 0 }),
      b.client.post(`/v1/admin/users/${a.user.id}/update`, { permission_level: 0 }),
    ]);
    expect([ra.status, rb.status].sort(), JSON.stringify([ra.body, rb.body])).toEqual([200, 403]);
    const loser = ra.status === 403 ? ra : rb;
    expect(loser.body.code).toBe('ERR_FORBIDDEN');
    expect([await levelOf(a.user.id), await levelOf(b.user.id)].sort()).toEqual([0, 3]);
    // The loser wrote nothing: one level change audited, one notification.
    const changes = await countRows(
      app,
      `select count(*) as n from audit_log where code = ${AuditCodes.USER_PERMISSION_CHANGE}
       and target_user_id in (${a.user.id}, ${b.user.id}) and actor_id in (${a.user.id}, ${b.user.id})`,
    );
    expect(changes).toBe(1);
  });

  const actions = {
    demotion: (by: Client, id: number) => by.post(`/v1/admin/users/${id}/update`, { permission_level: 0 }),
    rename: (by: Client, id: number) => by.post(`/v1/admin/users/${id}/update`, { username: `never_${id}` }),
    deletion: (by: Client, id: number) => by.post(`/v1/admin/users/${id}/delete`),
  };
  const meanwhile = {
    'demoted to User': (id: number) => `update users set permission_level = 0 where id = ${id}`,
    deleted: (id: number) => `delete from users where id = ${id}`,
    // Banned or timed out by another Admin (the state only: the ban's sessions end is not needed
    // to show that the caller's state is read under its lock).
    banned: (id: number) => `update users set state = 2, state_expires_at = null where id = ${id}`,
    'timed out': (id: number) =>
      `update users set state = 1, state_expires_at = now() + interval '1 hour' where id = ${id}`,
  };
  for (const [action, send] of Object.entries(actions))
    for (const [change, work] of Object.entries(meanwhile))
      onPostgres(`an Admin ${change} while its ${action} runs gets 403 ERR_FORBIDDEN; nothing changes`, async () => {
        const caller = await login(app, { bot: loginBot });
        await setLevel(app, caller.user.id, 2);
        const target = await login(app, { bot: loginBot });
        await setLevel(app, target.user.id, 1);
        const [res] = await whileHolding(caller.user.id, work(caller.user.id), () => [
          send(caller.client, target.user.id),
        ]);
        expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'ERR_FORBIDDEN' });
        expect((await target.client.get('/v1/users/me')).body.user).toMatchObject({
          permission_level: 1,
          username: target.user.username,
        });
        expect(await auditOf(`target_user_id=${target.user.id}`)).toEqual([
          expect.objectContaining({ actor_kind: 'operator', action: 'set-permission' }),
        ]);
      });

  onPostgres(
    'an Admin’s delete of an Owner is refused before anything is locked: 403 while the Owner’s chat is held',
    async () => {
      if (!sql) throw new Error('cluster only');
      const { owner: target, chatId } = await keyedChat(app);
      await setLevel(app, target.user.id, 3);
      // Another node holds a chat row of the Owner's, which a deletion locks first of all.
      const holder = hold(sql, (tx) => tx`select id from chats where id = ${chatId} for update`);
      await holder.ready;
      let answered = false;
      const refused = admin.client.post(`/v1/admin/users/${target.user.id}/delete`).finally(() => {
        answered = true;
      });
      try {
        await lockWaitersOr(sql, 1, refused);
        expect(answered, 'the refusal waited for the chat row').toBe(true);
      } finally {
        await holder.end();
      }
      expectError(await refused, 403, 'ERR_FORBIDDEN');
      expect(await levelOf(target.user.id)).toBe(3);
      expect(await auditOf(`target_user_id=${target.user.id}&code=${AuditCodes.USER_DELETE}`)).toEqual([]);
    },
  );

  onPostgres('an Admin promoted to Owner meanwhile acts as an Owner: it may demote another Admin', async () => {
    const caller = await login(app, { bot: loginBot });
    await setLevel(app, caller.user.id, 2);
    const target = await login(app, { bot: loginBot });
    await setLevel(app, target.user.id, 1);
    // The route's check passed as an Admin on a Moderator; under the lock the caller is an Owner.
    const [res] = await whileHolding(
      caller.user.id,
      `update users set permission_level = 3 where id = ${caller.user.id}`,
      () => [caller.client.post(`/v1/admin/users/${target.user.id}/update`, { permission_level: 2 })],
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(await levelOf(target.user.id)).toBe(2);
  });
});

// An update whose change committed answers it, whatever comes after its commit. The rename stops at
// its audit entry (gated here) holding the user's row; a deletion then queues for that row, and a
// lock of the whole users table after both. Let go, the rename commits, the deletion takes the row
// and commits, and only then does the users table open again. An answer built in the update's
// transaction is ready before that; one read again after the commit waits for the table and finds
// the user gone (404), though the rename and its audit entry committed.
describeApp('an admin user update and a deletion right after its commit (PostgreSQL)', () => {
  onPostgres('the rename answers 200 with the user as it wrote it, the deletion notwithstanding', async () => {
    if (!sql) throw new Error('cluster only');
    const target = await login(app, { bot: loginBot });
    const id = target.user.id;
    const gate = await gateInserts(
      sql,
      'audit_log',
      `new.code = ${AuditCodes.USER_UPDATE} and new.target_user_id = ${id}`,
    );
    let renamed: Promise<Answer> | undefined;
    let deleted: Promise<Answer> | undefined;
    try {
      renamed = op.post(`/v1/admin/users/${id}/update`, { username: `renamed_${id}` });
      await lockWaitersOr(sql, 1, renamed);
      deleted = op.post(`/v1/admin/users/${id}/delete`);
      await lockWaitersOr(sql, 2, deleted);
      const table = hold(sql, (tx) => tx`lock table users in access exclusive mode`);
      await lockWaiters(sql, 3);
      await gate.open();
      // Granted once the deletion has committed (it held the table until then).
      await table.ready;
      await table.end();
    } finally {
      await gate.close();
    }
    const [r, d] = await Promise.all([renamed, deleted]);
    expect(d?.status, JSON.stringify(d?.body)).toBe(200);
    // The deletion came after the rename: its audit entry names the user by the new name.
    const [gone] = await auditOf(`target_user_id=${id}&code=${AuditCodes.USER_DELETE}`);
    expect(gone?.data.username).toBe(`renamed_${id}`);
    expect({ status: r?.status, code: r?.body.code }).toEqual({ status: 200, code: undefined });
    expect(r?.body).toMatchObject({ id, username: `renamed_${id}`, permission_level: 0 });
    expect(r?.body.subscription_history).toEqual([]);
  });
});
