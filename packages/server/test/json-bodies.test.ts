import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { bundle, keyedChat } from './support/chat-flows.js';
import { type Answer, Client, nextIp } from './support/client.js';
import { login } from './support/flows.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

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

  it('answers a body that is not UTF-8 400 ERR_INVALID_JSON (not read with U+FFFD in its place); UTF-8 text passes', async () => {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const lookup = (bytes: Buffer) =>
      client.request('POST', '/v1/authentication/lookup', {
        raw: bytes as unknown as string,
        contentType: 'application/json',
      });
    const json = (name: Buffer) => Buffer.concat([Buffer.from('{"username":"'), name, Buffer.from('"}')]);
    expect(gist(await lookup(json(Buffer.from([0x61, 0x62, 0xff, 0x63]))))).toEqual({
      status: 400,
      code: 'ERR_INVALID_JSON',
    });
    // An overlong encoding of '/' and a lone continuation byte are not UTF-8 either.
    for (const bad of [
      [0x61, 0xc0, 0xaf],
      [0x61, 0x80],
    ])
      expect(gist(await lookup(json(Buffer.from(bad)))).code).toBe('ERR_INVALID_JSON');
    // Well-formed UTF-8 (two, three and four bytes) is read as sent: an unknown name, not a refusal.
    expect(gist(await lookup(json(Buffer.from('zoé€😀', 'utf8'))))).toEqual({
      status: 404,
      code: 'ERR_USER_NOT_FOUND',
    });
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

describeApp('POST with a JSON null body (only a zero-length body is empty)', () => {
  const nullBody = { raw: 'null', contentType: 'application/json' };

  it('answers a route without input 400 ERR_VALIDATION, as a route with a body answers it, and does nothing', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const sent = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch, 'kept'),
    });
    expect(sent.status).toBe(200);
    const refused = await owner.client.request('POST', `/v1/portal/chats/${chatId}/messages/delete-mine`, nullBody);
    const withBody = await new Client(app.url, nextIp(), app.publicApiKey).request(
      'POST',
      '/v1/authentication/lookup',
      nullBody,
    );
    expect([refused.status, refused.body]).toEqual([400, withBody.body]);
    expect(refused.body).toMatchObject({
      code: 'ERR_VALIDATION',
      errors: [{ path: 'body', message: 'must be object' }],
    });
    const page = await owner.client.get(`/v1/portal/chats/${chatId}/messages`);
    expect(page.body.messages.map((m: { id: string }) => m.id)).toContain(sent.body.id);
    for (const path of ['/v1/notifications/read-all', '/v1/portal/match/dequeue', '/v1/portal/match/leave'])
      expect([path, gist(await owner.client.request('POST', path, nullBody))]).toEqual([
        path,
        { status: 400, code: 'ERR_VALIDATION' },
      ]);
  });
});

describeApp('routes without input in the OpenAPI document', () => {
  it('documents their request body as not required, as they accept a request without one', async () => {
    const doc = await new Client(app.url).get('/openapi.json');
    const body = doc.body.paths['/v1/notifications/read-all'].post.requestBody;
    expect(body.content['application/json'].schema['x-empty-body']).toBe(true);
    expect(body.required).toBe(false);
    expect(doc.body.paths['/v1/authentication/lookup'].post.requestBody.required).toBe(true);
  });
});

describeApp('a wrong path or method, whatever the body', () => {
  const client = () => new Client(app.url, nextIp(), app.publicApiKey);

  it('answers an unknown path 404 ERR_NOT_FOUND, not the 400 of its malformed JSON body', async () => {
    const res = await client().request('POST', '/v1/no-such-path', { raw: '{bad' });
    expect(gist(res)).toEqual({ status: 404, code: 'ERR_NOT_FOUND' });
  });

  it('answers a GET-only path 405 ERR_METHOD_NOT_ALLOWED with Allow, not the 400 of its malformed JSON body', async () => {
    const res = await client().request('POST', '/v1/health', { raw: '{bad' });
    expect(gist(res)).toEqual({ status: 405, code: 'ERR_METHOD_NOT_ALLOWED' });
    expect(res.headers.get('allow')).toBe('GET, HEAD');
  });

  it('answers a GET-only path 405, not the 413 of a body over 64 KiB or the 415 of a text body', async () => {
    const big = await client().request('POST', '/v1/users/me', { body: { x: 'a'.repeat(70_000) } });
    expect(gist(big)).toEqual({ status: 405, code: 'ERR_METHOD_NOT_ALLOWED' });
    const text = await client().request('POST', '/v1/users/me', { raw: 'hello', contentType: 'text/plain' });
    expect(gist(text)).toEqual({ status: 405, code: 'ERR_METHOD_NOT_ALLOWED' });
  });

  it('answers 405 with Allow on a path whose parameter is over 100 characters, as on a short one', async () => {
    // The 404/405 router matches paths as the app's does (method-not-allowed.ts ROUTER_OPTIONS):
    // with find-my-way's default limit of 100 characters it missed these and answered 404.
    for (const id of ['1', '9'.repeat(101), '9'.repeat(8_000)]) {
      const del = await client().request('DELETE', `/v1/portal/chats/${id}`);
      expect({ ...gist(del), allow: del.headers.get('allow') }, `${id.length}`).toEqual({
        status: 405,
        code: 'ERR_METHOD_NOT_ALLOWED',
        allow: 'GET, HEAD',
      });
      const get = await client().request('GET', `/v1/portal/chats/${id}/delete`);
      expect({ ...gist(get), allow: get.headers.get('allow') }, `${id.length}`).toEqual({
        status: 405,
        code: 'ERR_METHOD_NOT_ALLOWED',
        allow: 'POST',
      });
    }
  });
});
