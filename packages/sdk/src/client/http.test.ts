import { describe, expect, it } from 'vitest';
import { ParlorClient } from './api.js';
import { isApiError, ParlorApiError } from './errors.js';
import { parseSetCookie } from './http.js';

/** A fetch that records requests and answers from a list. */
function stubFetch(answers: { status: number; body: unknown; setCookie?: string[] }[]) {
  const calls: { url: string; init: RequestInit }[] = [];
  const fetchStub = async (input: string | URL | Request, init?: RequestInit) => {
    calls.push({ url: String(input), init: init ?? {} });
    const answer = answers.shift();
    if (!answer) throw new Error('no more answers');
    const headers = new Headers({ 'content-type': 'application/json' });
    for (const line of answer.setCookie ?? []) headers.append('set-cookie', line);
    return new Response(answer.body === undefined ? '' : JSON.stringify(answer.body), {
      status: answer.status,
      headers,
    });
  };
  return { calls, fetch: fetchStub as typeof fetch };
}

describe('parseSetCookie', () => {
  it('reads the value and treats cleared or expired cookies as null', () => {
    expect(parseSetCookie('psession=abc_DEF-1; Path=/; HttpOnly; Secure; SameSite=None')).toEqual({
      name: 'psession',
      value: 'abc_DEF-1',
    });
    expect(parseSetCookie('psession=; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/')).toEqual({
      name: 'psession',
      value: null,
    });
    expect(parseSetCookie('psession=x; Max-Age=0')?.value).toBeNull();
    expect(parseSetCookie('garbage')).toBeNull();
  });
});

describe('ParlorClient over HTTP', () => {
  it('keeps the session cookie from Set-Cookie, sends it back, and forgets it on logout', async () => {
    const stub = stubFetch([
      { status: 200, body: { user: { id: 1 }, new_account: true }, setCookie: ['psession=tok123; Path=/; HttpOnly'] },
      { status: 200, body: { user: { id: 1 } } },
      { status: 200, body: { ok: true }, setCookie: ['psession=; Expires=Thu, 01 Jan 1970 00:00:00 GMT'] },
    ]);
    const client = new ParlorClient({
      baseUrl: 'http://api.test/',
      apiKey: 'ppk',
      headers: { 'x-a': '1' },
      fetch: stub.fetch,
    });
    await client.verify('ABCDEFGH');
    expect(client.session).toBe('tok123');
    await client.me();
    const headers = stub.calls[1]?.init.headers as Record<string, string>;
    expect(headers).toMatchObject({ cookie: 'psession=tok123', 'x-api-key': 'ppk', 'x-a': '1' });
    expect(stub.calls[1]?.url).toBe('http://api.test/v1/users/me');
    await client.logout();
    expect(client.session).toBeNull();
    expect(stub.calls[2]?.init.body).toBe('{}');
  });

  it('forgets the session on logout when the server answers 401 ERR_UNAUTHENTICATED (it had already ended)', async () => {
    const stub = stubFetch([
      { status: 401, body: { code: 'ERR_UNAUTHENTICATED', message: 'Log in first.' } },
      { status: 401, body: { code: 'ERR_UNAUTHENTICATED', message: 'Log in first.' } },
    ]);
    const client = new ParlorClient({ baseUrl: 'http://api.test', session: 'ended', fetch: stub.fetch });
    await expect(client.logout()).rejects.toMatchObject({ status: 401, code: 'ERR_UNAUTHENTICATED' });
    expect(client.session).toBeNull();
    // The next request goes out without the forgotten cookie (the stub answers it 401 again).
    await expect(client.me()).rejects.toMatchObject({ status: 401, code: 'ERR_UNAUTHENTICATED' });
    expect(stub.calls).toHaveLength(2);
    expect(stub.calls[1]?.url).toBe('http://api.test/v1/users/me');
    const headers = stub.calls[1]?.init.headers as Record<string, string>;
    expect(headers).toMatchObject({ accept: 'application/json' });
    expect(headers).not.toHaveProperty('cookie');
  });

  it('builds query strings without undefined values', async () => {
    const stub = stubFetch([{ status: 200, body: { messages: [] } }]);
    const client = new ParlorClient({ baseUrl: 'http://api.test', fetch: stub.fetch });
    await client.history(7, { limit: 5 });
    expect(stub.calls[0]?.url).toBe('http://api.test/v1/portal/chats/7/messages?limit=5');
  });

  it('throws ParlorApiError with status, code, message and the whole body', async () => {
    const stub = stubFetch([
      { status: 429, body: { code: 'ERR_RATE_LIMITED', message: 'Too many.', retry_after: 7 } },
      { status: 502, body: undefined },
    ]);
    const client = new ParlorClient({ baseUrl: 'http://api.test', fetch: stub.fetch });
    const error = await client.sendMessage(1, 'x').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ParlorApiError);
    expect(error).toMatchObject({ status: 429, code: 'ERR_RATE_LIMITED', message: 'Too many.', retryAfter: 7 });
    expect(isApiError(error, 'ERR_RATE_LIMITED')).toBe(true);
    expect(isApiError(error, 'ERR_NOT_FOUND')).toBe(false);
    const bare = await client.me().catch((e: unknown) => e);
    expect(bare).toMatchObject({ status: 502, code: 'ERR_HTTP_502' });
  });
});

describe('ParlorApiError.fromAck', () => {
  it('takes the status of the code from the catalogue', () => {
    expect(ParlorApiError.fromAck({ ok: false, code: 'ERR_CHAT_NOT_FOUND', message: 'No such chat.' })).toMatchObject({
      status: 404,
      code: 'ERR_CHAT_NOT_FOUND',
      source: 'socket',
    });
    expect(ParlorApiError.fromAck(undefined)).toMatchObject({ status: 500, code: 'ERR_INTERNAL' });
    expect(ParlorApiError.fromAck({ code: 'ERR_SOMETHING_NEW' }).status).toBe(0);
  });
});

describe('HttpClient transport failures', () => {
  it('reports a failed request as ParlorApiError ERR_NETWORK with its cause', async () => {
    const cause = new TypeError('fetch failed');
    const client = new ParlorClient({
      baseUrl: 'http://127.0.0.1:1',
      fetch: (async () => {
        throw cause;
      }) as typeof fetch,
    });
    const error = await client.me().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ParlorApiError);
    expect(error).toMatchObject({ status: 0, code: 'ERR_NETWORK', source: 'http', cause });
  });

  it('reports a request without an answer in time as ERR_HTTP_TIMEOUT', async () => {
    const client = new ParlorClient({
      baseUrl: 'http://127.0.0.1:1',
      timeoutMs: 20,
      // Never answers; gives up when the request's signal aborts, as fetch does.
      fetch: ((_input: unknown, init?: RequestInit) =>
        new Promise((_resolve, reject) => {
          init?.signal?.addEventListener('abort', () => reject(init.signal?.reason));
        })) as typeof fetch,
    });
    const error = await client.me().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ParlorApiError);
    expect(error).toMatchObject({ status: 0, code: 'ERR_HTTP_TIMEOUT', source: 'http' });
    expect((error as ParlorApiError).cause).toMatchObject({ name: 'TimeoutError' });
  });
});
