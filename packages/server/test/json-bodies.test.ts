import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { type Answer, Client, nextIp } from './support/client.js';
import { login } from './support/flows.js';

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(async () => app?.close());

/** What an answer says, without what differs between two calls (times, ids). */
const gist = (res: Answer) => ({ status: res.status, code: res.body?.code ?? null });

/** A POST with no body at all and one with `content-type: application/json` and zero bytes. */
async function bothWays(client: Client, path: string) {
  const bare = await client.request('POST', path);
  const typed = await client.request('POST', path, { raw: '', contentType: 'application/json' });
  return { bare, typed };
}

describeApp('POST with content-type: application/json and an empty body', () => {
  it('answers a route without a body as a request without the header (session route)', async () => {
    const { client } = await login(app);
    const { bare, typed } = await bothWays(client, '/v1/portal/match/dequeue');
    expect(bare.status).toBe(200);
    expect(typed.status).toBe(200);
    expect(typed.body).toEqual(bare.body);
    const readAll = await client.request('POST', '/v1/notifications/read-all', {
      raw: '',
      contentType: 'application/json; charset=utf-8',
    });
    expect(readAll.status).toBe(200);
  });

  it('answers a route without a body as a request without the header (public-key route)', async () => {
    const { bare, typed } = await bothWays(new Client(app.url, nextIp(), app.publicApiKey), '/v1/portal/stranger');
    expect(gist(typed)).toEqual({ status: 200, code: null });
    expect(gist(typed)).toEqual(gist(bare));
  });

  it('answers a route with a required body 400 ERR_VALIDATION, not ERR_INVALID_JSON, as without the header', async () => {
    const { bare, typed } = await bothWays(
      new Client(app.url, nextIp(), app.publicApiKey),
      '/v1/authentication/lookup',
    );
    expect(gist(typed)).toEqual({ status: 400, code: 'ERR_VALIDATION' });
    expect(typed.body).toEqual(bare.body);
  });

  it('still answers a body of only whitespace 400 ERR_INVALID_JSON', async () => {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const res = await client.request('POST', '/v1/portal/stranger', { raw: ' \n', contentType: 'application/json' });
    expect(gist(res)).toEqual({ status: 400, code: 'ERR_INVALID_JSON' });
  });

  it('still refuses prototype poisoning in a JSON body', async () => {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const res = await client.request('POST', '/v1/authentication/lookup', {
      raw: '{"username":"someone","__proto__":{"x":1}}',
      contentType: 'application/json',
    });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('ERR_INVALID_JSON');
  });
});
