import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { describeApp, type TestApp } from '../../server/test/support/app.js';
import {
  BotClient,
  connect,
  encryptMessage,
  generateChatKey,
  generateKeyPair,
  joinRoom,
  leaveRoom,
  ParlorClient,
  publicKeyToBase64,
  wrapChatKey,
} from '../src/index.js';
import { apiError, e2eSuite, loginUser, userClient } from './support.js';

let app: TestApp;
let bot: BotClient;
e2eSuite((started) => {
  ({ app, bot } = started);
});

describeApp('ParlorClient: login and the account', () => {
  it('logs in with request → bot login-code → verify, keeps the cookie, and logs out', async () => {
    const { client, user, platformUserId } = await loginUser(app, bot);
    expect(client.session).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect((await client.me()).user).toMatchObject({ id: user.id, username: user.username });
    const lookup = await client.lookup(user.username);
    expect(lookup.linked_platforms).toEqual([expect.objectContaining({ platform_user_id: platformUserId })]);
    const updated = await client.updateMe({ username: `sdk_${user.id}` });
    expect(updated).toMatchObject({ user: { username: `sdk_${user.id}` }, errors: null });
    const { sessions } = await client.sessions();
    expect(sessions).toEqual([expect.objectContaining({ is_current: true })]);
    expect(await client.subscription()).toMatchObject({ tier: 0, has_premium: false });
    expect(await client.logout()).toEqual({ ok: true });
    expect(client.session).toBeNull();
    const error = await apiError(() => client.me());
    expect(error).toMatchObject({ status: 401, code: 'ERR_UNAUTHENTICATED', source: 'http' });
  });

  it('throws ParlorApiError with the error body: code, message, errors', async () => {
    const client = userClient(app);
    const notFound = await apiError(() => client.lookup('nobody_here_at_all'));
    expect(notFound).toMatchObject({ status: 404, code: 'ERR_USER_NOT_FOUND' });
    expect(notFound.body.message).toBe(notFound.message);
    const invalid = await apiError(() => client.verify('ABCDEFGH'));
    expect(invalid).toMatchObject({ status: 400, code: 'ERR_INVALID_CODE' });
    const validation = await apiError(() => client.requestCode({ platform: 'platform_a', platform_user_id: '' }));
    expect(validation.code).toBe('ERR_VALIDATION');
    expect(validation.body.errors?.[0]?.path).toBe('body/platform_user_id');
    const noKey = new ParlorClient({ baseUrl: `${app.url}/` });
    expect(await apiError(() => noKey.lookup('x'))).toMatchObject({ status: 401, code: 'ERR_INVALID_API_KEY' });
  });

  it('BotClient: me, and send-code for an existing account that verifies', async () => {
    const me = await bot.me();
    expect(me).toMatchObject({ name: 'Test bot', type: expect.any(Number) });
    const { platformUserId, user } = await loginUser(app, bot);
    const sent = await bot.sendCode({ platform: 'platform_a', platform_user_id: platformUserId });
    expect(sent.code).toMatch(/^[2-9A-HJ-NP-Z]{8}$/);
    const other = userClient(app);
    expect((await other.verify(sent.code)).user.id).toBe(user.id);
    const unknown = await apiError(() => bot.sendCode({ platform: 'platform_a', platform_user_id: 'never-seen' }));
    expect(unknown).toMatchObject({ status: 404, code: 'ERR_PLATFORM_IDENTITY_NOT_FOUND' });
  });
});

describeApp('ParlorClient: chats, keys and messages', () => {
  it('creates, lists, reads, configures and deletes a chat, with invites and activity', async () => {
    const basic = await loginUser(app, bot);
    const refused = await apiError(() => basic.client.createChat({ name: 'No', type: 'public' }));
    expect(refused).toMatchObject({ status: 403, code: 'ERR_CHAT_CREATE_FORBIDDEN' });

    const { client, user } = await loginUser(app, bot, { level: 2 });
    const { chat } = await client.createChat({ name: 'SDK room', type: 'private' });
    expect(chat).toMatchObject({ name: 'SDK room', type: 'private', owner_id: user.id, epoch: 1 });
    expect((await client.listChats()).chats.map((c) => c.id)).toContain(chat.id);
    expect((await client.getChat(chat.id)).chat.id).toBe(chat.id);
    expect((await client.updateChatConfig(chat.id, { name: 'Renamed' })).chat.name).toBe('Renamed');

    const { invite } = await client.createInvite(chat.id, { max_uses: 3 });
    expect(invite).toMatchObject({ chat_id: chat.id, max_uses: 3, uses: 0 });
    expect((await client.listInvites(chat.id)).invites.map((i) => i.code)).toEqual([invite.code]);
    expect(await client.deleteInvite(chat.id, invite.code)).toEqual({ ok: true });
    expect((await client.listInvites(chat.id)).invites).toEqual([]);
    const { activity } = await client.activity(chat.id, { limit: 10 });
    expect(activity).toEqual([expect.objectContaining({ user_id: user.id, action: 'join', method: 'direct' })]);

    expect(await client.deleteChat(chat.id)).toEqual({ ok: true });
    expect(await apiError(() => client.getChat(chat.id))).toMatchObject({ status: 404, code: 'ERR_CHAT_NOT_FOUND' });
  });

  it('registers a key, keys the first epoch, sends, reads history and deletes', async () => {
    const { client, user } = await loginUser(app, bot, { level: 2 });
    const { chat } = await client.createChat({ name: 'Keys', type: 'public' });
    const pair = generateKeyPair();
    const publicKey = publicKeyToBase64(pair.publicKey);
    const registered = await client.registerKey(publicKey);
    expect(registered).toEqual({ status: 'registered', session_id: expect.any(Number) });
    const sessionId = registered.session_id;
    expect(await client.registerKey(publicKey)).toEqual({ status: 'unchanged', session_id: sessionId });

    const state = await client.chatKey(chat.id);
    expect(state).toMatchObject({ epoch: 1, envelope: null });
    expect(state.key_ring[String(user.id)]).toEqual({ [String(sessionId)]: publicKey });
    const chatKey = generateChatKey();
    const content = encryptMessage({ chatKey, chatId: chat.id, epoch: 1, plaintext: 'hello' });
    expect(await apiError(() => client.sendMessage(chat.id, content))).toMatchObject({ code: 'ERR_NO_ROOM_KEY' });

    const wrapped = wrapChatKey({
      chatKey,
      recipientPublicKey: pair.publicKey,
      chatId: chat.id,
      epoch: 1,
      recipientSessionId: sessionId,
    });
    expect(await client.shareKeys(chat.id, { epoch: 1, envelopes: [{ session_id: sessionId, wrapped }] })).toEqual({
      epoch: 1,
      stored: 1,
    });
    expect((await client.chatKey(chat.id)).envelope).toBe(wrapped);

    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await client.sendMessage(chat.id, content)).id);
    const { messages } = await client.history(chat.id, { limit: 2 });
    expect(messages.map((m) => m.id)).toEqual([ids[2], ids[1]]);
    const older = await client.history(chat.id, { before: ids[1], limit: 10 });
    expect(older.messages.map((m) => m.id)).toEqual([ids[0]]);

    expect(await client.deleteMessages(chat.id, [ids[0] as string])).toEqual({ deleted: 1, deleted_ids: [ids[0]] });
    expect((await client.deleteLast(chat.id, 1)).deleted_ids).toEqual([ids[2]]);
    expect((await client.deleteMine(chat.id)).deleted_ids).toEqual([ids[1]]);
  });
});

describeApp('connect, joinRoom and leaveRoom', () => {
  it('refuses a socket without a session with ERR_UNAUTHENTICATED', async () => {
    const error = await apiError(() => connect(userClient(app), { reconnection: false }));
    expect(error).toMatchObject({ code: 'ERR_UNAUTHENTICATED', status: 401, source: 'socket' });
  });

  it('joins and leaves a chat; refusals arrive as ParlorApiError', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const { chat } = await owner.client.createChat({ name: 'Sockets', type: 'public' });
    const member = await loginUser(app, bot);
    const socket = await connect(member.client);
    try {
      const joined = await joinRoom(socket, { chat_id: chat.id });
      expect(joined).toMatchObject({ chat: { id: chat.id, member_count: 2 }, epoch: 1 });
      expect(joined.members).toEqual([expect.objectContaining({ user_id: member.user.id })]);
      const missing = await apiError(() => joinRoom(socket, { chat_id: 2147483647 }));
      expect(missing).toMatchObject({ code: 'ERR_CHAT_NOT_FOUND', status: 404, source: 'socket' });
      const invalid = await apiError(() => joinRoom(socket, { chat_id: -1 }));
      expect(invalid.code).toBe('ERR_VALIDATION');
      await leaveRoom(socket, chat.id);
      expect(await apiError(() => leaveRoom(socket, chat.id))).toMatchObject({ code: 'ERR_NOT_CHAT_MEMBER' });
    } finally {
      socket.disconnect();
    }
  });
});

describe('redirects', () => {
  /** Listens on 127.0.0.1, port 0; answers the server and its port. */
  const listen = async (handler: http.RequestListener) => {
    const server = http.createServer(handler);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { server, port: (server.address() as AddressInfo).port };
  };

  it('refuses a redirect with an error naming its target, so no bot key reaches another origin', async () => {
    const keys: (string | string[] | undefined)[] = [];
    const elsewhere = await listen((req, res) => {
      keys.push(req.headers['x-api-key']);
      res.setHeader('content-type', 'application/json');
      res.end('{}');
    });
    // A front (a proxy, a moved service) that sends every request to another origin.
    const target = `http://localhost:${elsewhere.port}`;
    const front = await listen((req, res) => res.writeHead(307, { location: `${target}${req.url}` }).end());
    try {
      const bot = new BotClient({
        baseUrl: `http://127.0.0.1:${front.port}`,
        apiKey: 'pbk_redirected_0123456789abcdef',
      });
      expect(await apiError(() => bot.me())).toMatchObject({
        status: 307,
        code: 'ERR_HTTP_307',
        source: 'http',
        message: `GET /v1/bot/me was redirected to ${target}/v1/bot/me; redirects are not followed: set baseUrl to the final address.`,
      });
      expect(keys).toEqual([]);
    } finally {
      front.server.close();
      elsewhere.server.close();
    }
  });
});

describe('Retry-After', () => {
  it('surfaces the Retry-After header of a 503 ERR_SERVICE_UNAVAILABLE (no retry_after in its body) as retryAfter', async () => {
    // What the server answers when its database or Redis cannot be reached (docs/api.md, Errors).
    let retryAfter = '5';
    const server = http.createServer((_req, res) => {
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': retryAfter });
      res.end(JSON.stringify({ code: 'ERR_SERVICE_UNAVAILABLE', message: 'The service is temporarily unavailable.' }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const client = new ParlorClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
      expect(await apiError(() => client.me())).toMatchObject({
        status: 503,
        code: 'ERR_SERVICE_UNAVAILABLE',
        retryAfter: 5,
      });
      // Only whole seconds are read; an HTTP date is not.
      retryAfter = 'Wed, 21 Oct 2026 07:28:00 GMT';
      expect((await apiError(() => client.me())).retryAfter).toBeUndefined();
    } finally {
      server.close();
    }
  });
});
