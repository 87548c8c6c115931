import { Limits } from '@parlor/protocol';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { Client } from './support/client.js';
import { nextIdentity } from './support/flows.js';

let app: TestApp;
/** The app's clock: pending codes expire on it in both stores (Redis's sets are given its time). */
const clock = new FakeClock(Date.now());
beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => {
  await app?.close();
});

const site = () => new Client(app.url, undefined, app.publicApiKey);
const request = (c: Client, id: string) =>
  c.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });

describeApp('POST /v1/authentication/request: pending codes per address', () => {
  it("answers a refused request for another address's code with the wait until the address's own oldest code expires", async () => {
    // Another address asks for this identity's code first: it expires a minute after the address's own codes are made.
    const theirs = nextIdentity();
    expect((await request(site(), theirs)).status).toBe(200);
    clock.advance(Limits.LOGIN_CODE_TTL_MS - 60_000);
    const client = site();
    for (let i = 0; i < Limits.PENDING_WEB_CODES_PER_IP; i++)
      expect((await request(client, nextIdentity())).status).toBe(200);
    const refused = await request(client, theirs);
    expect(refused.status).toBe(429);
    const wait = Limits.LOGIN_CODE_TTL_MS / 1000;
    expect(refused.body).toEqual({ code: 'ERR_RATE_LIMITED', message: expect.any(String), retry_after: wait });
    expect(refused.headers.get('retry-after')).toBe(String(wait));
    // The other code expiring frees nothing; the address's own expiring, at retry_after, frees its slots.
    clock.advance(61_000);
    expect((await request(client, nextIdentity())).status).toBe(429);
    clock.advance(wait * 1000 - 61_000);
    expect((await request(client, nextIdentity())).status).toBe(200);
  });
});
