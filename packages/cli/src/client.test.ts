import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { send, UnreachableError } from './client.js';

/** A stand-in server that records what it received and answers by path. */
const seen: { method?: string; url?: string; authorization?: string; body: string }[] = [];
const server = http.createServer((req, res) => {
  let body = '';
  req.on('data', (chunk: Buffer) => {
    body += chunk.toString();
  });
  req.on('end', () => {
    seen.push({ method: req.method, url: req.url, authorization: req.headers.authorization, body });
    if (req.url?.endsWith('/redirect')) res.writeHead(301, { location: 'https://elsewhere.example/' }).end();
    else if (req.url?.endsWith('/html')) res.writeHead(502, { 'content-type': 'text/html' }).end('<h1>Bad</h1>');
    else if (req.url?.endsWith('/silent'))
      return; // never answers
    else if (req.url?.endsWith('/cut')) {
      // Begins a 200 answer, then the connection ends before the promised 100 bytes (a proxy
      // restarting, the node killed while writing). Closed once the bytes are out, so the client
      // always sees the headers first.
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
      res.write('{"id":', () => res.socket?.destroy());
    } else if (req.url?.endsWith('/drop'))
      req.socket.destroy(); // read the whole request, then closes without a word
    else res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
});
let base: URL;

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/prefix/`);
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('send', () => {
  it('posts JSON under the base path with the Bearer token', async () => {
    const answer = await send({ baseUrl: base, token: 'pop_t' }, { method: 'POST', path: 'v1/x', body: { a: 1 } });
    expect(answer).toMatchObject({ status: 200, ok: true, body: { ok: true } });
    expect(seen.at(-1)).toEqual({
      method: 'POST',
      url: '/prefix/v1/x',
      authorization: 'Bearer pop_t',
      body: '{"a":1}',
    });
  });

  it('reports a redirect instead of following it', async () => {
    const answer = await send({ baseUrl: base, token: 't' }, { method: 'POST', path: 'redirect' });
    expect(answer).toMatchObject({ status: 301, ok: false, location: 'https://elsewhere.example/' });
  });

  it('keeps a non-JSON body as text', async () => {
    const answer = await send({ baseUrl: base, token: 't' }, { method: 'GET', path: 'html' });
    expect(answer).toMatchObject({ status: 502, ok: false, body: undefined, text: '<h1>Bad</h1>' });
  });

  it('gives up after the timeout with UnreachableError, the request counted as sent', async () => {
    const pending = send({ baseUrl: base, token: 't' }, { method: 'GET', path: 'silent' }, undefined, 200);
    await expect(pending).rejects.toThrow(UnreachableError);
    await expect(pending).rejects.toThrow(/no answer within 0.2 s/);
    await expect(pending).rejects.toMatchObject({ sent: true });
  });
});

describe('send when the exchange fails', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('fails as soon as an answer breaks off, counts the request as sent and leaves no deadline running', async () => {
    // Only the transport's own deadline is faked (node:http's timers are internal): it never fires
    // here, so a rejection at all shows the failure did not wait for it, and the count shows it was
    // cleared (a timer left behind kept the CLI alive for the rest of the 30 s).
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const pending = send({ baseUrl: base, token: 't' }, { method: 'POST', path: 'cut', body: {} });
    await expect(pending).rejects.toThrow(UnreachableError);
    await expect(pending).rejects.toMatchObject({ sent: true, message: 'connection reset (ECONNRESET)' });
    expect(vi.getTimerCount()).toBe(0);
  });

  it('counts a request the server read and then hung up on as sent', async () => {
    const pending = send({ baseUrl: base, token: 't' }, { method: 'POST', path: 'drop', body: {} });
    await expect(pending).rejects.toMatchObject({ sent: true });
  });

  it('counts a refused connection as not sent', async () => {
    // Nothing listens on port 1.
    const pending = send({ baseUrl: new URL('http://127.0.0.1:1/'), token: 't' }, { method: 'POST', path: 'x' });
    await expect(pending).rejects.toMatchObject({ sent: false, message: 'connection refused (ECONNREFUSED)' });
  });
});
