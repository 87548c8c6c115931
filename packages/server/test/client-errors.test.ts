import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { rawExchange } from './support/raw-http.js';

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(async () => app?.close());

/** Writes `text` on a new connection to the app and reads everything until the server ends it. */
async function exchange(text: string): Promise<{ status: string; head: string; body: unknown }> {
  const received = await rawExchange(Number(new URL(app.url).port), text);
  const [head = '', body = ''] = received.split('\r\n\r\n');
  return { status: head.split('\r\n')[0] ?? '', head, body: JSON.parse(body) };
}

describeApp('requests Node’s HTTP parser refuses before a route sees them', () => {
  it('answers a malformed request line with 400 ERR_VALIDATION in the API error body, Connection: close', async () => {
    const res = await exchange('GET /v1/health HTTP/1.1 trailing\r\nHost: a\r\n\r\n');
    expect(res.status).toBe('HTTP/1.1 400 Bad Request');
    expect(res.head).toMatch(/\r\nConnection: close\r\n/i);
    expect(res.body).toEqual({ code: 'ERR_VALIDATION', message: 'The request is not valid HTTP.' });
  });

  it('answers headers over 16 KiB with 431 ERR_HEADERS_TOO_LARGE, Connection: close', async () => {
    const res = await exchange(`GET /v1/health HTTP/1.1\r\nHost: a\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`);
    expect(res.status).toBe('HTTP/1.1 431 Request Header Fields Too Large');
    expect(res.head).toMatch(/\r\nConnection: close\r\n/i);
    expect(res.body).toEqual({ code: 'ERR_HEADERS_TOO_LARGE', message: 'The request headers are too large.' });
  });

  it('keeps serving the next connection', async () => {
    expect((await fetch(`${app.url}/v1/health`)).status).toBe(200);
  });
});

describeApp('requests the router refuses before a hook or a route sees them', () => {
  it('answers a malformed %-escape in a /v1 path with 400 ERR_VALIDATION naming the url, with the API security headers', async () => {
    const res = await new Client(app.url, nextIp(), app.publicApiKey).get('/v1/users/%ZZ');
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      code: 'ERR_VALIDATION',
      message: 'The request is not valid.',
      errors: [{ path: 'url', message: 'holds a malformed %-escape' }],
    });
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('content-security-policy')).toBe("default-src 'none'; frame-ancestors 'none'");
  });

  it('answers an over-long path parameter 401 without credentials, and its schema’s 400 with them', async () => {
    const path = `/v1/bots/${'9'.repeat(150)}`;
    const anonymous = await new Client(app.url).get(path);
    expect({ status: anonymous.status, code: anonymous.body.code }).toEqual({
      status: 401,
      code: 'ERR_INVALID_API_KEY',
    });
    const keyed = await new Client(app.url, nextIp(), app.publicApiKey).get(path);
    expect(keyed.status).toBe(400);
    expect(keyed.body.errors).toEqual([expect.objectContaining({ path: 'params/id' })]);
  });
});

describeApp('an HTTP/1.1 request without a Host header', () => {
  const hostless = (method: string, target: string) =>
    exchange(`${method} ${target} HTTP/1.1\r\nConnection: close\r\n\r\n`);

  it('answers 400 ERR_VALIDATION naming headers/host in the API error body, with the API security headers', async () => {
    const res = await hostless('GET', '/v1/users/me');
    expect(res.status).toBe('HTTP/1.1 400 Bad Request');
    expect(res.body).toEqual({
      code: 'ERR_VALIDATION',
      message: 'The request is not valid.',
      errors: [{ path: 'headers/host', message: 'is required' }],
    });
    expect(res.head).toMatch(/\r\nx-content-type-options: nosniff\r\n/i);
    expect(res.head).toMatch(/\r\ncontent-security-policy: default-src 'none'; frame-ancestors 'none'\r\n/i);
  });

  it('answers it so on every path: before a 404 or 405, on pages and on Engine.IO’s path', async () => {
    for (const [method, target] of [
      ['GET', '/v1/no-such-path'],
      ['DELETE', '/v1/health'],
      ['POST', '/v1/authentication/logout'],
      ['GET', '/'],
      ['GET', '/socket.io/?EIO=4&transport=polling'],
    ] as const) {
      const res = await hostless(method, target);
      expect({ status: res.status, body: res.body }, `${method} ${target}`).toEqual({
        status: 'HTTP/1.1 400 Bad Request',
        body: expect.objectContaining({
          code: 'ERR_VALIDATION',
          errors: [{ path: 'headers/host', message: 'is required' }],
        }),
      });
      expect(res.head, `${method} ${target}`).toMatch(/\r\nx-content-type-options: nosniff\r\n/i);
    }
    // With a Host header, Engine.IO still answers its own path (a polling handshake).
    const port = Number(new URL(app.url).port);
    const handshake = await rawExchange(
      port,
      'GET /socket.io/?EIO=4&transport=polling HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n',
    );
    expect(handshake.split('\r\n')[0]).toBe('HTTP/1.1 200 OK');
    expect(handshake).toContain('"sid":');
  });

  it('serves an HTTP/1.0 request without Host, which may omit it', async () => {
    const res = await exchange('GET /v1/health HTTP/1.0\r\n\r\n');
    expect(res.status).toBe('HTTP/1.1 200 OK');
  });
});

describeApp('the docs page’s static files', () => {
  it('answers an unknown file 404 ERR_NOT_FOUND without an Allow header, to GET and HEAD', async () => {
    const client = new Client(app.url);
    const get = await client.get('/docs/static/no-such-file.js');
    expect({ status: get.status, code: get.body.code, allow: get.headers.get('allow') }).toEqual({
      status: 404,
      code: 'ERR_NOT_FOUND',
      allow: null,
    });
    const head = await client.request('HEAD', '/docs/static/no-such-file.js');
    expect({ status: head.status, allow: head.headers.get('allow') }).toEqual({ status: 404, allow: null });
  });

  it('answers a Range outside the file 416 ERR_RANGE_NOT_SATISFIABLE with its size in Content-Range', async () => {
    const res = await new Client(app.url).get('/docs/static/index.css', { headers: { range: 'bytes=99999999-' } });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 416, code: 'ERR_RANGE_NOT_SATISFIABLE' });
    expect(res.headers.get('content-range')).toMatch(/^bytes \*\/\d+$/);
  });

  it('answers a failed If-Unmodified-Since 412 ERR_PRECONDITION_FAILED', async () => {
    const res = await new Client(app.url).get('/docs/static/index.css', {
      headers: { 'if-unmodified-since': 'Thu, 01 Jan 1970 00:00:00 GMT' },
    });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 412, code: 'ERR_PRECONDITION_FAILED' });
  });
});

describeApp('query parameters a route does not declare', () => {
  it('answers them 400 ERR_VALIDATION naming the parameter on the API, and lets pages ignore them', async () => {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    for (const path of ['/v1/health?foo=1', '/statistics/users?limit=5']) {
      const res = await client.get(path);
      expect({ path, status: res.status, code: res.body.code }).toEqual({ path, status: 400, code: 'ERR_VALIDATION' });
      expect(res.body.errors).toEqual([
        { path: `querystring/${path.includes('foo') ? 'foo' : 'limit'}`, message: 'is not a known field' },
      ]);
    }
    expect((await client.get('/v1/health')).status).toBe(200);
    expect((await client.get('/?utm_source=link')).status).toBe(200);
    expect((await client.get('/docs/static/index.css?v=2')).status).toBe(200);
  });
});
