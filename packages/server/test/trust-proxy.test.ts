/**
 * TRUST_PROXY as an operator sets it, read by loadConfig and given to a real app on a port. Test
 * clients reach it from 127.0.0.1 (the proxy's place) and send X-Forwarded-For as written here,
 * the client's own entries on the left and the proxy's on the right.
 */
import { Limits } from '@parlor/protocol';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { loadConfig } from '../src/platform/config.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { Client } from './support/client.js';
import { createLoginBot, nextIdentity } from './support/flows.js';

/**
 * Starts an app behind `trustProxy` before the tests of the enclosing describe and closes it after
 * them (in a hook: starting an embedded app can take a while on a busy machine). Answers a getter.
 */
function behind(trustProxy: string): () => TestApp {
  let app: TestApp | undefined;
  beforeAll(async () => {
    const config = loadConfig({ TRUST_PROXY: trustProxy, SOURCE_HASH: 'test-hash' });
    app = await startApp({ config: { trustProxy: config.trustProxy } });
  });
  afterAll(async () => app?.close());
  return () => {
    if (!app) throw new Error('the app did not start');
    return app;
  };
}

/** A web login request with this X-Forwarded-For header, for a fresh identity unless one is given. */
function request(a: TestApp, forwardedFor: string, platformUserId = nextIdentity()) {
  return new Client(a.url, forwardedFor, a.publicApiKey).post('/v1/authentication/request', {
    platform: 'platform_a',
    platform_user_id: platformUserId,
  });
}

/** Sends PENDING_WEB_CODES_PER_IP requests, one per header, all expected to pass; then one more. */
async function fillPendingCodes(a: TestApp, headers: (i: number) => string) {
  for (let i = 1; i <= Limits.PENDING_WEB_CODES_PER_IP; i++) expect((await request(a, headers(i))).status).toBe(200);
  return request(a, headers(Limits.PENDING_WEB_CODES_PER_IP + 1));
}

describeApp('TRUST_PROXY=1 (one proxy in front)', () => {
  const app = behind('1');

  it('counts a request under the address the proxy added, not one the client wrote', async () => {
    const sixth = await fillPendingCodes(app(), (i) => `198.51.100.${i}, 203.0.113.50`);
    expect(sixth.status).toBe(429);
    expect(sixth.body.code).toBe('ERR_RATE_LIMITED');
    // The same spoofed entry behind another proxy-added address is another client.
    expect((await request(app(), '198.51.100.1, 203.0.113.51')).status).toBe(200);
  });

  it('binds a web code and records the session under the address the proxy added', async () => {
    const a = app();
    const bot = await createLoginBot(a);
    const id = nextIdentity();
    expect((await request(a, '10.9.9.9, 203.0.113.60', id)).status).toBe(200);
    const fetched = await bot.post('/v1/authentication/bot/login-code', {
      platform: 'platform_a',
      platform_user_id: id,
      platform_username: 'someone',
      platform_avatar_url: '',
    });
    const code = fetched.body.code;
    // The spoofed entry alone is not the client that asked: the code is not its own.
    const spoofer = new Client(a.url, '10.9.9.9', a.publicApiKey);
    expect((await spoofer.post('/v1/authentication/verify', { code })).body.code).toBe('ERR_INVALID_CODE');
    const user = new Client(a.url, '192.0.2.1, 203.0.113.60', a.publicApiKey);
    expect((await user.post('/v1/authentication/verify', { code })).status).toBe(200);
    const sessions = await user.get('/v1/users/me/sessions');
    expect(sessions.body.sessions.map((s: { client_ip: string }) => s.client_ip)).toEqual(['203.0.113.60']);
  });
});

describeApp('TRUST_PROXY=127.0.0.1, 10.20.0.0/16 (a list of proxies)', () => {
  const app = behind('127.0.0.1, 10.20.0.0/16');

  it('takes the rightmost address that is not one of them', async () => {
    const sixth = await fillPendingCodes(app(), (i) => `198.51.100.${i}, 203.0.113.80, 10.20.1.${i}`);
    expect(sixth.status).toBe(429);
    expect((await request(app(), '198.51.100.1, 203.0.113.81, 10.20.1.1')).status).toBe(200);
    expect((await request(app(), '203.0.113.80, 203.0.113.82')).status).toBe(200);
  });
});

describeApp('TRUST_PROXY=10.20.0.0/16 (a list that does not name the peer)', () => {
  const app = behind('10.20.0.0/16');

  it('ignores X-Forwarded-For: every request is the peer', async () => {
    const sixth = await fillPendingCodes(app(), (i) => `203.0.113.${90 + i}`);
    expect(sixth.status).toBe(429);
  });
});
