import { Limits } from '@parlor/protocol';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { createBot, login, nextIdentity, operator } from './support/flows.js';

let app: TestApp;
let bot: Client;

beforeAll(async () => {
  app = await startApp();
  bot = (await createBot(app)).client;
});
afterAll(async () => app?.close());

const site = () => new Client(app.url, nextIp(), app.publicApiKey);
const botCode = async (platformUserId: string, platform = 'platform_a') =>
  bot.post('/v1/authentication/bot/login-code', {
    platform,
    platform_user_id: platformUserId,
    platform_username: 'Someone',
    platform_avatar_url: 'https://cdn.example/a.png',
  });

describeApp('POST /v1/authentication/request', () => {
  it('answers 401 ERR_INVALID_API_KEY without the public key', async () => {
    const res = await new Client(app.url).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: '1',
    });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ code: 'ERR_INVALID_API_KEY', message: expect.any(String) });
  });

  it('answers expires_at ten minutes away and never the code', async () => {
    const before = Date.now();
    const res = await site().post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['expires_at']);
    const ttl = Date.parse(res.body.expires_at) - before;
    expect(ttl).toBeGreaterThan(Limits.LOGIN_CODE_TTL_MS - 5000);
    expect(ttl).toBeLessThanOrEqual(Limits.LOGIN_CODE_TTL_MS + 1000);
  });

  it('returns the same code to a repeated request from the same address', async () => {
    const client = site();
    const id = nextIdentity();
    const first = await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const codeA = (await botCode(id)).body.code;
    const second = await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const codeB = (await botCode(id)).body.code;
    expect(codeA).toMatch(/^[23456789ABCDEFGHJKLMNPQRSTUVWXYZ]{8}$/);
    expect(codeB).toBe(codeA);
    expect(second.body.expires_at).toBe(first.body.expires_at);
  });

  it('refuses an unsupported platform with 400 ERR_UNSUPPORTED_PLATFORM', async () => {
    const res = await site().post('/v1/authentication/request', { platform: 'elsewhere', platform_user_id: '1' });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('ERR_UNSUPPORTED_PLATFORM');
  });

  it(`accepts ${Limits.PENDING_WEB_CODES_PER_IP} pending codes from one address and answers 429 to the next`, async () => {
    const client = site();
    for (let i = 0; i < Limits.PENDING_WEB_CODES_PER_IP; i++) {
      const ok = await client.post('/v1/authentication/request', {
        platform: 'platform_a',
        platform_user_id: nextIdentity(),
      });
      expect(ok.status).toBe(200);
    }
    const refused = await client.post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('ERR_RATE_LIMITED');
    expect(refused.body.retry_after).toBeGreaterThan(0);
    expect(refused.headers.get('retry-after')).toBe(String(refused.body.retry_after));
    // Another address is not affected.
    const other = await site().post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(other.status).toBe(200);
  });

  it('frees a pending slot once a code is used', async () => {
    const client = site();
    const ids = Array.from({ length: Limits.PENDING_WEB_CODES_PER_IP }, () => nextIdentity());
    for (const id of ids)
      await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(ids[0] as string)).body.code;
    expect((await client.post('/v1/authentication/verify', { code })).status).toBe(200);
    const again = await client.post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(again.status).toBe(200);
  });
});

describeApp('POST /v1/authentication/verify', () => {
  it('creates an account user_<random> with the platform details the bot supplied, and sets psession', async () => {
    const client = site();
    const id = nextIdentity();
    await client.post('/v1/authentication/request', { platform: 'platform_b', platform_user_id: id });
    const code = (await botCode(id, 'platform_b')).body.code;
    const res = await client.post('/v1/authentication/verify', { code });
    expect(res.status).toBe(200);
    expect(res.body.new_account).toBe(true);
    expect(res.body.user.username).toMatch(/^user_[a-z0-9]{10}$/);
    expect(res.body.user.linked_platforms).toEqual([
      expect.objectContaining({
        platform: 'platform_b',
        platform_user_id: id,
        platform_username: 'Someone',
        platform_avatar_url: 'https://cdn.example/a.png',
      }),
    ]);
    const cookie = res.headers.getSetCookie().find((c) => c.startsWith('psession=')) ?? '';
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/Secure/i);
    expect(cookie).toMatch(/SameSite=None/i);
    expect(client.cookie).toHaveLength(43);
    const me = await client.get('/v1/users/me');
    expect(me.status).toBe(200);
    expect(me.body.user.id).toBe(res.body.user.id);
  });

  it('logs a returning user into the same account (new_account false)', async () => {
    const first = await login(app, { bot });
    const again = await login(app, { bot, platformUserId: first.platformUserId });
    expect(again.user.id).toBe(first.user.id);
  });

  it('accepts a code only once', async () => {
    const client = site();
    const id = nextIdentity();
    await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(id)).body.code;
    expect((await client.post('/v1/authentication/verify', { code })).status).toBe(200);
    const reuse = await client.post('/v1/authentication/verify', { code });
    expect(reuse.status).toBe(400);
    expect(reuse.body.code).toBe('ERR_INVALID_CODE');
  });

  it('accepts the code in lower case', async () => {
    const client = site();
    const id = nextIdentity();
    await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code: string = (await botCode(id)).body.code;
    expect((await client.post('/v1/authentication/verify', { code: code.toLowerCase() })).status).toBe(200);
  });

  it('refuses a web code from another address with ERR_INVALID_CODE', async () => {
    const id = nextIdentity();
    await site().post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(id)).body.code;
    const res = await site().post('/v1/authentication/verify', { code });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('ERR_INVALID_CODE');
  });

  it('rejects codes that are not 8 characters with 400 ERR_VALIDATION', async () => {
    for (const code of ['ABCDEFG', 'ABCDEFGHJ']) {
      const res = await site().post('/v1/authentication/verify', { code });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('ERR_VALIDATION');
    }
  });

  it(`allows ${Limits.VERIFY_FAILURES_PER_IP} failed attempts per address, then answers 429 even to a right code`, async () => {
    const client = site();
    const id = nextIdentity();
    await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(id)).body.code;
    for (let i = 0; i < Limits.VERIFY_FAILURES_PER_IP; i++) {
      const wrong = await client.post('/v1/authentication/verify', { code: 'ZZZZZZZZ' });
      expect(wrong.status).toBe(400);
    }
    const blocked = await client.post('/v1/authentication/verify', { code });
    expect(blocked.status).toBe(429);
    expect(blocked.body.code).toBe('ERR_RATE_LIMITED');
    expect(blocked.body.retry_after).toBeGreaterThan(0);
  });
});

describeApp('POST /v1/authentication/lookup', () => {
  it('lists the linked platforms of a username, case-insensitively', async () => {
    const { user, platformUserId } = await login(app, { bot });
    const res = await site().post('/v1/authentication/lookup', { username: user.username.toUpperCase() });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      username: user.username,
      linked_platforms: [
        {
          platform: 'platform_a',
          platform_user_id: platformUserId,
          platform_username: `name${platformUserId}`,
          platform_avatar_url: `https://cdn.example/${platformUserId}.png`,
        },
      ],
    });
  });

  it('answers 404 ERR_USER_NOT_FOUND for an unknown username', async () => {
    const res = await site().post('/v1/authentication/lookup', { username: 'nobody_here' });
    expect(res.status).toBe(404);
    expect(res.body.code).toBe('ERR_USER_NOT_FOUND');
  });
});

describeApp('POST /v1/authentication/bot/login-code', () => {
  it('answers code null and expires_at null when no web login is pending', async () => {
    const res = await botCode(nextIdentity());
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ code: null, expires_at: null });
  });

  it('needs a bot key: the public key is refused', async () => {
    const res = await site().post('/v1/authentication/bot/login-code', {
      platform: 'platform_a',
      platform_user_id: '1',
      platform_username: 'x',
      platform_avatar_url: '',
    });
    expect(res.status).toBe(401);
  });
});

describeApp('POST /v1/authentication/bot/send-code', () => {
  it('answers 404 ERR_PLATFORM_IDENTITY_NOT_FOUND for an unknown identity', async () => {
    const res = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(res.status).toBe(404);
    expect(res.body.code).toBe('ERR_PLATFORM_IDENTITY_NOT_FOUND');
  });

  it('gives an existing user a code that logs in from any address; the same code while it is pending', async () => {
    const { user, platformUserId } = await login(app, { bot });
    const a = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    const b = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(a.status).toBe(200);
    expect(a.body.code).toMatch(/^[23456789A-HJ-NP-Z]{8}$/);
    expect(b.body).toEqual(a.body);
    const res = await site().post('/v1/authentication/verify', { code: a.body.code });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ new_account: false, user: { id: user.id } });
  });

  it(`allows ${Limits.BOT_LOGIN_WEB_REQUIRED_EVERY} bot logins in a row; the next answers 403 ERR_WEB_LOGIN_REQUIRED until a web login`, async () => {
    const { platformUserId } = await login(app, { bot });
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    for (let i = 0; i < Limits.BOT_LOGIN_WEB_REQUIRED_EVERY; i++) {
      const sent = await bot.post('/v1/authentication/bot/send-code', body);
      expect(sent.status).toBe(200);
      expect((await site().post('/v1/authentication/verify', { code: sent.body.code })).status).toBe(200);
    }
    const refused = await bot.post('/v1/authentication/bot/send-code', body);
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('ERR_WEB_LOGIN_REQUIRED');
    await login(app, { bot, platformUserId });
    expect((await bot.post('/v1/authentication/bot/send-code', body)).status).toBe(200);
  });
});

describeApp('POST /v1/authentication/logout', () => {
  it('ends the session: the cookie stops working', async () => {
    const { client } = await login(app, { bot });
    const cookie = client.cookie;
    const res = await client.post('/v1/authentication/logout');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true });
    client.cookie = cookie;
    const me = await client.get('/v1/users/me');
    expect(me.status).toBe(401);
    expect(me.body.code).toBe('ERR_UNAUTHENTICATED');
  });

  it('refuses a cookie-authenticated mutation from a foreign Origin', async () => {
    const { client } = await login(app, { bot });
    const res = await client.post('/v1/authentication/logout', undefined, {
      headers: { origin: 'https://evil.example' },
    });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('ERR_ORIGIN_NOT_ALLOWED');
  });
});

describeApp('banned users', () => {
  it('cannot request, receive or verify a login code (403 ERR_BANNED)', async () => {
    const { user, platformUserId, client } = await login(app, { bot });
    await app.database.db.execute(`update users set state = 2 where id = ${user.id}` as never);
    const req = await site().post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(req.status).toBe(403);
    expect(req.body.code).toBe('ERR_BANNED');
    const send = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(send.body.code).toBe('ERR_BANNED');
    const me = await client.get('/v1/users/me');
    expect(me.status).toBe(403);
    expect(me.body.code).toBe('ERR_BANNED');
    expect((await operator(app).get('/v1/health')).status).toBe(200);
  });
});
