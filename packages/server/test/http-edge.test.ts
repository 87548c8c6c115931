import type { IncomingMessage } from 'node:http';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { PENDING_CONNECTIONS_PER_ADDRESS_MAX } from '../src/platform/socket-admission.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { login } from './support/flows.js';
import { rawExchange } from './support/raw-http.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

/** The API's header set (docs/security.md, "Response headers"), as a raw answer's head writes it. */
const API_SET = [
  ['content-security-policy', "default-src 'none'; frame-ancestors 'none'"],
  ['x-frame-options', 'DENY'],
  ['x-content-type-options', 'nosniff'],
  ['referrer-policy', 'no-referrer'],
  ['cache-control', 'no-store'],
] as const;

let app: TestApp;
let port: number;
beforeAll(async () => {
  app = await startApp();
  port = Number(new URL(app.url).port);
});
afterAll(async () => app?.close());

/** The status line and the header lines (lower-cased names) of a raw exchange's answer. */
async function rawHead(text: string): Promise<{ status: string; headers: Map<string, string> }> {
  const [head = ''] = (await rawExchange(port, text)).split('\r\n\r\n');
  const [status = '', ...lines] = head.split('\r\n');
  const headers = new Map<string, string>();
  for (const line of lines) {
    const at = line.indexOf(':');
    headers.set(line.slice(0, at).toLowerCase(), line.slice(at + 1).trim());
  }
  return { status, headers };
}

describeApp('answers written before Fastify sees a request', () => {
  it('gives the 400 of a request that is not HTTP and the 431 of oversized headers the API security headers', async () => {
    for (const [request, status] of [
      ['GET /v1/health HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n', 'HTTP/1.1 400 Bad Request'],
      [
        `GET /v1/health HTTP/1.1\r\nHost: a\r\nX-Big: ${'b'.repeat(17 * 1024)}\r\n\r\n`,
        'HTTP/1.1 431 Request Header Fields Too Large',
      ],
    ] as const) {
      const res = await rawHead(request);
      expect(res.status).toBe(status);
      for (const [name, value] of API_SET) expect([status, name, res.headers.get(name)]).toEqual([status, name, value]);
    }
  });
});

describeApp('the security header set of a path as the router reads it', () => {
  const anon = () => new Client(app.url, nextIp(), app.publicApiKey);

  it('gives the API set to a /v1 route reached through a %-escaped segment', async () => {
    const res = await anon().get('/%761/users/me');
    expect([res.status, res.body.code]).toEqual([401, 'ERR_UNAUTHENTICATED']);
    for (const [name, value] of API_SET) expect([name, res.headers.get(name)]).toEqual([name, value]);
  });

  it('gives the API set to an absolute-form request line naming a /v1 route', async () => {
    const res = await rawHead('GET http://parlor.example/v1/health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n');
    expect(res.status).toBe('HTTP/1.1 200 OK');
    for (const [name, value] of API_SET) expect([name, res.headers.get(name)]).toEqual([name, value]);
  });

  it('gives the API set to the JSON routes served without the /v1 prefix (statistics, bots)', async () => {
    for (const path of ['/statistics/users', '/bots', '/bots/search?q=x', '/st%61tistics/app']) {
      const res = await anon().get(path);
      expect([path, res.status]).toEqual([path, 200]);
      for (const [name, value] of API_SET) expect([path, name, res.headers.get(name)]).toEqual([path, name, value]);
    }
  });

  it('keeps the pages’ set and their own caching on pages, the docs and the default avatars', async () => {
    for (const path of ['/', '/docs/static/index.css', '/avatars/platform_a_0.svg', '/v1x', '/statisticsx']) {
      const res = await anon().get(path);
      expect([path, res.headers.get('x-frame-options')]).toEqual([path, 'SAMEORIGIN']);
      expect([path, res.headers.get('cache-control')]).not.toEqual([path, 'no-store']);
    }
    const avatar = await anon().get('/avatars/platform_a_0.svg');
    expect(avatar.headers.get('cache-control')).toBe('public, max-age=86400');
  });
});

describeApp('caching of JSON API answers', () => {
  it('answers private JSON (own profile, sessions with addresses) and errors with Cache-Control: no-store', async () => {
    const u = await login(app);
    for (const path of ['/v1/users/me', '/v1/users/me/sessions', '/v1/no-such-path']) {
      const res = await u.client.get(path);
      expect([path, res.headers.get('cache-control')]).toEqual([path, 'no-store']);
    }
  });
});

describeApp('CORS for ALLOWED_ORIGINS', () => {
  const allowed = 'https://app.parlor.example';
  /** Near misses of the allowed origin: each is another origin, or none. */
  const others = ['https://evil.example', `${allowed}/`, 'https://APP.parlor.example', `${allowed}:443`, 'null'];
  let cors: TestApp;
  beforeAll(async () => {
    cors = await startApp({ config: { allowedOrigins: [allowed] } });
  });
  afterAll(async () => cors?.close());

  const accessHeaders = (headers: Headers) =>
    Object.fromEntries([...headers.entries()].filter(([name]) => name.startsWith('access-control-')));
  const preflight = (origin: string, path = '/v1/notifications/read-all') =>
    new Client(cors.url).request('OPTIONS', path, {
      headers: {
        origin,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'content-type, x-api-key',
      },
    });

  it('answers a preflight from an allowed origin 204 with the methods, headers and max age it may use', async () => {
    const res = await preflight(allowed);
    expect(res.status).toBe(204);
    expect(accessHeaders(res.headers)).toEqual({
      'access-control-allow-origin': allowed,
      'access-control-allow-credentials': 'true',
      'access-control-allow-methods': 'GET, HEAD, POST, PUT',
      'access-control-allow-headers': 'content-type, authorization, x-api-key',
      'access-control-max-age': '600',
    });
    expect(res.headers.get('vary')).toBe('Origin');
  });

  it('allows in a preflight every method the API documents (a guild PUT from another allowed site)', async () => {
    const doc = await new Client(cors.url).get('/openapi.json');
    const documented = new Set(
      Object.values(doc.body.paths as Record<string, Record<string, unknown>>).flatMap((ops) =>
        Object.keys(ops).map((m) => m.toUpperCase()),
      ),
    );
    expect(documented.has('PUT')).toBe(true);
    const res = await new Client(cors.url).request('OPTIONS', '/v1/guilds/123/vanity', {
      headers: {
        origin: allowed,
        'access-control-request-method': 'PUT',
        'access-control-request-headers': 'content-type',
      },
    });
    expect(res.status).toBe(204);
    const methods = (res.headers.get('access-control-allow-methods') ?? '').split(', ');
    for (const method of documented) expect([method, methods.includes(method)]).toEqual([method, true]);
  });

  it('lets a page on an allowed origin read a cookie-authenticated answer, Retry-After included', async () => {
    const u = await login(cors);
    const res = await u.client.post('/v1/notifications/read-all', undefined, { headers: { origin: allowed } });
    expect(res.status).toBe(200);
    expect(accessHeaders(res.headers)).toEqual({
      'access-control-allow-origin': allowed,
      'access-control-allow-credentials': 'true',
      'access-control-expose-headers': 'Retry-After',
    });
    expect(res.headers.get('vary')).toBe('Origin');
  });

  it('answers a preflight from any other origin 403 ERR_ORIGIN_NOT_ALLOWED, and its requests, with no CORS header', async () => {
    for (const origin of others) {
      const pre = await preflight(origin);
      expect([origin, pre.status, pre.body.code]).toEqual([origin, 403, 'ERR_ORIGIN_NOT_ALLOWED']);
      expect([origin, accessHeaders(pre.headers)]).toEqual([origin, {}]);
      const get = await new Client(cors.url, nextIp(), cors.publicApiKey).get('/v1/health', { headers: { origin } });
      expect([origin, get.status, accessHeaders(get.headers)]).toEqual([origin, 200, {}]);
      expect(get.headers.get('vary')).toBe('Origin');
    }
  });

  it('leaves a page’s preflight, and an OPTIONS that is no preflight, to the 405 they had', async () => {
    const page = await new Client(cors.url).request('OPTIONS', '/', {
      headers: { origin: allowed, 'access-control-request-method': 'GET' },
    });
    expect([page.status, accessHeaders(page.headers)]).toEqual([405, {}]);
    const plain = await new Client(cors.url).request('OPTIONS', '/v1/notifications/read-all', {
      headers: { origin: allowed },
    });
    expect([plain.status, plain.body.code, plain.headers.get('allow')]).toEqual([
      405,
      'ERR_METHOD_NOT_ALLOWED',
      'POST',
    ]);
  });

  it('lets a page on an allowed origin read Socket.IO’s polling answers with credentials', async () => {
    const res = await fetch(`${cors.url}/socket.io/?EIO=4&transport=polling`, { headers: { origin: allowed } });
    expect(res.status).toBe(200);
    expect(res.headers.get('access-control-allow-origin')).toBe(allowed);
    expect(res.headers.get('access-control-allow-credentials')).toBe('true');
    const refused = await fetch(`${cors.url}/socket.io/?EIO=4&transport=polling`, {
      headers: { origin: others[0] ?? '' },
    });
    expect(refused.status).toBe(403);
    expect(refused.headers.get('access-control-allow-origin')).toBeNull();
  });
});

describeApp('transport connections that are not yet authenticated sockets', () => {
  let sio: TestApp;
  const open: WebSocket[] = [];
  beforeAll(async () => {
    sio = await startApp();
  });
  afterAll(async () => {
    for (const w of open) w.terminate();
    closeAllSockets();
    await sio?.close();
  });

  /** A cookie-less WebSocket transport: its Engine.IO open packet, or the refusal's status and body. */
  const transport = () =>
    new Promise<{ opened: true } | { status: number | undefined; body: string }>((resolve, reject) => {
      const w = new WebSocket(`${sio.url.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`);
      open.push(w);
      w.once('message', () => resolve({ opened: true }));
      w.once('unexpected-response', (_req, res: IncomingMessage) => {
        let body = '';
        res.on('data', (d: Buffer) => {
          body += d.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode, body }));
      });
      w.once('error', reject);
    });
  const engine = () => sio.services.realtime.io.engine as unknown as { clientsCount: number };

  it(`holds ${PENDING_CONNECTIONS_PER_ADDRESS_MAX} from one address, refuses the next, and takes one again once one closed`, async () => {
    // An authenticated socket from the same address is not counted.
    const u = await login(sio);
    await connectSocket(sio.url, u.client);
    const held = await Promise.all(Array.from({ length: PENDING_CONNECTIONS_PER_ADDRESS_MAX }, transport));
    expect(held.every((r) => 'opened' in r)).toBe(true);
    expect(await transport()).toEqual({ status: 400, body: 'too many connections from this address' });
    const polling = await fetch(`${sio.url}/socket.io/?EIO=4&transport=polling`);
    expect([polling.status, await polling.json()]).toEqual([
      403,
      { code: 4, message: 'too many connections from this address' },
    ]);
    open[0]?.terminate();
    await vi.waitFor(() => expect(engine().clientsCount).toBe(PENDING_CONNECTIONS_PER_ADDRESS_MAX));
    expect(await transport()).toEqual({ opened: true });
  });

  it('closes a transport connection that never sends the Socket.IO CONNECT (within the test timeout, not 45 s)', async () => {
    for (const w of open.splice(0)) w.terminate();
    const w = new WebSocket(`${sio.url.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`);
    open.push(w);
    const closed = new Promise<void>((resolve) => w.once('close', () => resolve()));
    w.on('message', (data: Buffer) => {
      // Answer the server's pings, as a live client would: only the missing CONNECT ends it.
      if (data.toString() === '2') w.send('3');
    });
    await closed;
  });
});
