import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyedChat, member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { createBot, createLoginBot, login, nextIdentity, operator } from './support/flows.js';
import { type CapturedLog, captureLog, LEVEL } from './support/logs.js';

describeApp('request logging', () => {
  let app: TestApp;
  let logs: CapturedLog;
  beforeAll(async () => {
    logs = captureLog('debug');
    app = await startApp({ logger: logs.log });
  });
  afterAll(() => app.close());

  /** The levels of the request lines (incoming, completed) logged for `url`. */
  const requestLevels = (url: string) => {
    const ids = new Set(
      logs
        .lines()
        .filter((l) => (l.req as { url?: string } | undefined)?.url === url)
        .map((l) => l.reqId),
    );
    return logs
      .lines()
      .filter((l) => ids.has(l.reqId) && (l.msg === 'incoming request' || l.msg === 'request completed'))
      .map((l) => l.level);
  };

  it('logs the health probe’s requests at debug, and other requests at info', async () => {
    expect((await fetch(`${app.url}/v1/health`)).status).toBe(200);
    expect((await fetch(`${app.url}/openapi.json`)).status).toBe(200);
    expect(requestLevels('/v1/health')).toEqual([LEVEL.debug, LEVEL.debug]);
    expect(requestLevels('/openapi.json')).toEqual([LEVEL.info, LEVEL.info]);
  });
});

describeApp('the log holds no secrets, at any level', () => {
  let app: TestApp;
  let logs: CapturedLog;
  /** Each secret a flow handled, by what it is. */
  const secrets = new Map<string, string>();
  beforeAll(async () => {
    logs = captureLog('trace');
    app = await startApp({ logger: logs.log });
    secrets.set('operator token', app.operatorToken);
    secrets.set('public API key', app.publicApiKey);
  });
  afterAll(() => app.close());

  /** The first log line holding `value`, if any. */
  const lineWith = (value: string) =>
    logs
      .text()
      .split('\n')
      .find((l) => l.includes(value));
  /** The secrets found in the log, each with the first line holding it. */
  const leaks = () => [...secrets].filter(([, v]) => lineWith(v) !== undefined).map(([k, v]) => [k, lineWith(v)]);

  it('logs no key, session token, login code or ciphertext along logins, bots and messages, nor on their refusals', async () => {
    const loginBot = await createLoginBot(app);
    secrets.set('login bot key', loginBot.apiKey as string);
    secrets.set('bot key', (await createBot(app, { name: 'community' })).apiKey);
    // A web login: the code as the bot fetches it, then verify.
    const platformUserId = nextIdentity();
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: platformUserId });
    const fetched = await loginBot.post('/v1/authentication/bot/login-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
      platform_username: 'who',
      platform_avatar_url: 'https://cdn.example/a.png',
    });
    secrets.set('web code', fetched.body.code);
    expect((await client.post('/v1/authentication/verify', { code: fetched.body.code })).status).toBe(200);
    secrets.set('session token', client.cookie as string);
    // A bot code (send-code), verified elsewhere; a made-up code refused.
    const sent = await loginBot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(sent.status).toBe(200);
    secrets.set('bot code', sent.body.code);
    const other = new Client(app.url, nextIp(), app.publicApiKey);
    expect((await other.post('/v1/authentication/verify', { code: sent.body.code })).status).toBe(200);
    secrets.set('second session token', other.cookie as string);
    await new Client(app.url, nextIp(), app.publicApiKey).post('/v1/authentication/verify', { code: 'ABCDEFGH' });
    // Wrong credentials of every kind, and a malformed body carrying a code.
    const wrongKey = 'pbk_wrong_bot_key_0123456789abcdefghijklmnop';
    const wrongToken = 'pop_wrong_operator_token_0123456789';
    const wrongSession = 'not-a-session-token-0123456789abcdef0123456';
    secrets.set('wrong bot key', wrongKey).set('wrong operator token', wrongToken).set('wrong session', wrongSession);
    expect((await new Client(app.url, nextIp(), wrongKey).get('/v1/bot/me')).status).toBe(401);
    const bearer = { authorization: `Bearer ${wrongToken}` };
    expect((await new Client(app.url, nextIp(), null, bearer).get('/v1/admin/audit')).status).toBe(401);
    const stale = new Client(app.url, nextIp(), null);
    stale.cookie = wrongSession;
    expect((await stale.get('/v1/users/me')).status).toBe(401);
    secrets.set('malformed code', 'SECRETCODE');
    const malformed = await new Client(app.url, nextIp(), app.publicApiKey).request(
      'POST',
      '/v1/authentication/verify',
      { raw: '{"code": "SECRETCODE' },
    );
    expect(malformed.status).toBe(400);
    // A message: its ciphertext.
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const content = bundle(chatKey, chatId, epoch, 'hello');
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content })).status).toBe(200);
    secrets.set('ciphertext', JSON.parse(content).ct);
    // An operator request.
    const who = await login(app);
    expect((await operator(app).post(`/v1/admin/users/${who.user.id}/update`, { permission_level: 1 })).status).toBe(
      200,
    );
    // Every request's lines are written: its completion is logged once the answer is sent, which
    // may be after the client has read it.
    const unfinished = () => {
      const lines = logs.lines();
      const done = new Set(lines.filter((l) => l.msg === 'request completed').map((l) => l.reqId));
      return lines.filter((l) => l.msg === 'incoming request' && !done.has(l.reqId)).map((l) => l.req);
    };
    await expect.poll(unfinished).toEqual([]);
    expect(leaks()).toEqual([]);
  });

  it('cuts a live invite code out of request lines (a refused delete leaves it live), keeping the rest of the url', async () => {
    const owner = await member(app, { level: 2 });
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'Private', type: 'private' });
    const chatId = created.body.chat.id as number;
    const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
    expect(invite.status, JSON.stringify(invite.body)).toBe(200);
    const code = invite.body.invite.code as string;
    const guest = await member(app);
    expect((await join(guest, { invite: code })).ok).toBe(true);
    // A member who may not delete it tries: 403, and the invite stays live.
    expect((await guest.client.post(`/v1/portal/chats/${chatId}/invites/${code}/delete`, {})).status).toBe(403);
    expect(lineWith(code)).toBeUndefined();
    const urls = logs.lines().map((l) => (l.req as { url?: string } | undefined)?.url);
    expect(urls).toContain(`/v1/portal/chats/${chatId}/invites/[redacted]/delete`);
    expect(urls).toContain(`/v1/portal/chats/${chatId}/invites/create`);
  });

  it('cuts the code also from a path that spells "invites" with a %-escape, which the router takes for the same route', async () => {
    const owner = await member(app, { level: 2 });
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'Escaped', type: 'private' });
    const chatId = created.body.chat.id as number;
    const code = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {})).body.invite.code as string;
    const stranger = await member(app);
    // The router decodes `%69` to `i` before matching: the delete handler is reached, and refuses.
    const refused = await stranger.client.post(`/v1/portal/chats/${chatId}/%69nvites/${code}/delete`, {});
    expect([refused.status, refused.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect(lineWith(code)).toBeUndefined();
    const urls = logs.lines().map((l) => (l.req as { url?: string } | undefined)?.url);
    expect(urls).toContain(`/v1/portal/chats/${chatId}/%69nvites/[redacted]/delete`);
  });
});
