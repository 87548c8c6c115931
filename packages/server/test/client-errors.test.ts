import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
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
