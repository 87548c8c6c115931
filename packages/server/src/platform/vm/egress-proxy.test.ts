import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { testEgressNetwork } from '../../../test/support/egress-network.js';
import { EgressProxy, type EgressProxyOptions, parseAbsolute, parseAuthority } from './egress-proxy.js';

/**
 * The room egress proxy with real sockets on 127.0.0.1 and no browser. The block list is the real
 * one; what stands in is the network behind it: names resolve from a table (nothing asks real
 * DNS), and every address the proxy dials is reached on 127.0.0.1 at the same port (test/support/egress-network.ts), so servers
 * here can play public hosts (`93.184.216.34`). `dials` records the addresses the proxy chose.
 */

const PUBLIC = '93.184.216.34';

/** A TCP server that echoes what it receives, counting the connections it accepted. */
async function startEcho() {
  const sockets = new Set<net.Socket>();
  let connections = 0;
  const server = net.createServer((socket) => {
    connections += 1;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    socket.on('data', (d) => socket.write(`echo:${d.toString()}`));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    connections: () => connections,
    open: () => sockets.size,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** An HTTP server answering each request with what it received (method, URL, headers, body). */
async function startWeb() {
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => {
      body += d;
    });
    req.on('end', () => {
      res.setHeader('set-cookie', ['a=1', 'b=2']);
      res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Sends `CONNECT authority` to the proxy: on 200, the open tunnel; otherwise the whole answer. */
function connectVia(proxy: EgressProxy, authority: string) {
  return new Promise<{ status: number; body: string; socket: net.Socket }>((resolve, reject) => {
    const socket = net.connect(proxy.port, '127.0.0.1');
    socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
    let buf = '';
    const answer = () => ({ status: Number(buf.slice(9, 12)), body: buf.slice(buf.indexOf('\r\n\r\n') + 4), socket });
    const onData = (d: Buffer) => {
      buf += d.toString();
      if (buf.includes('\r\n\r\n') && answer().status === 200) {
        socket.off('data', onData);
        resolve(answer());
      }
    };
    socket.on('data', onData);
    socket.once('close', () => resolve(answer()));
    socket.once('error', reject);
  });
}

/** Sends one request through the proxy (absolute-form `url`). */
function requestVia(proxy: EgressProxy, url: string, opts: { method?: string; headers?: Record<string, string> } = {}) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: proxy.port, path: url, agent: false, ...opts }, (res) => {
      let body = '';
      res.on('data', (d) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(opts.method === 'POST' ? 'hello body' : undefined);
  });
}

/** Bytes written into a tunnel come back from the echo server behind it. */
function roundTrip(socket: net.Socket, text: string) {
  return new Promise<string>((resolve) => {
    socket.once('data', (d) => resolve(d.toString()));
    socket.write(text);
  });
}

async function eventually(check: () => boolean, ms = 15_000) {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('parseAuthority and parseAbsolute', () => {
  it('normalises hosts as URLs do and refuses what is not host:port or an http:// URL', () => {
    expect(parseAuthority('example.com:443')).toEqual({ host: 'example.com', port: 443 });
    expect(parseAuthority('[::1]:8080')).toEqual({ host: '[::1]', port: 8080 });
    expect(parseAuthority('2130706433:80')).toEqual({ host: '127.0.0.1', port: 80 });
    for (const bad of ['example.com', 'example.com:0', 'example.com:65536', 'a/b:80', 'user@host:80', ':80', ''])
      expect(parseAuthority(bad), bad).toBeNull();
    expect(parseAbsolute('http://Example.com/a?b=1')).toEqual({
      host: 'example.com',
      port: 80,
      path: '/a?b=1',
      authority: 'example.com',
    });
    for (const bad of ['/relative', 'https://example.com/', 'ws://example.com/', 'http://:80/', undefined])
      expect(parseAbsolute(bad), String(bad)).toBeNull();
  });
});

describe('EgressProxy', () => {
  let echo: Awaited<ReturnType<typeof startEcho>>;
  let inside: Awaited<ReturnType<typeof startEcho>>;
  let web: Awaited<ReturnType<typeof startWeb>>;
  const proxies: EgressProxy[] = [];
  beforeAll(async () => {
    [echo, inside, web] = await Promise.all([startEcho(), startEcho(), startWeb()]);
  });
  afterAll(async () => {
    await Promise.all([echo?.close(), inside?.close(), web?.close()]);
  });
  afterEach(async () => {
    await Promise.all(proxies.splice(0).map((p) => p.close()));
  });
  const start = async (opts: EgressProxyOptions) => {
    const proxy = await EgressProxy.start(opts);
    proxies.push(proxy);
    return proxy;
  };

  it('forwards an absolute http:// request to a public host, without hop-by-hop or Proxy-* headers', async () => {
    const egress = testEgressNetwork({ 'public.test': [PUBLIC] });
    const proxy = await start(egress.network);
    expect(proxy.url).toBe(`http://127.0.0.1:${proxy.port}`);
    const answer = await requestVia(proxy, `http://public.test:${web.port}/hello?x=1`, {
      method: 'POST',
      headers: {
        'proxy-authorization': 'Basic eDp5',
        'proxy-connection': 'keep-alive',
        connection: 'x-hop',
        'x-hop': 'drop me',
        'x-custom': 'kept',
      },
    });
    expect(answer.status).toBe(200);
    expect(answer.headers['set-cookie']).toEqual(['a=1', 'b=2']);
    const seen = JSON.parse(answer.body) as {
      method: string;
      url: string;
      headers: Record<string, string>;
      body: string;
    };
    expect(seen).toMatchObject({ method: 'POST', url: '/hello?x=1', body: 'hello body' });
    // The client sent `Host: 127.0.0.1:<proxy port>`: the absolute URL's authority replaces it.
    expect(seen.headers).toMatchObject({ host: `public.test:${web.port}`, 'x-custom': 'kept' });
    expect(Object.keys(seen.headers).filter((h) => /^proxy-|^x-hop$/.test(h))).toEqual([]);
    expect(egress.dials).toEqual([`${PUBLIC}:${web.port}`]);
  });

  it('tunnels CONNECT to a public host, bytes going both ways', async () => {
    const egress = testEgressNetwork({ 'public.test': [PUBLIC] });
    const proxy = await start(egress.network);
    const before = echo.connections();
    const { status, socket } = await connectVia(proxy, `public.test:${echo.port}`);
    expect(status).toBe(200);
    expect(await roundTrip(socket, 'ping')).toBe('echo:ping');
    expect(echo.connections()).toBe(before + 1);
    expect(egress.dials).toEqual([`${PUBLIC}:${echo.port}`]);
    socket.destroy();
  });

  it('answers 403 for private destinations, by literal and by name, without connecting to them', async () => {
    const egress = testEgressNetwork({ 'inside.test': ['127.0.0.1'], 'mixed.test': [PUBLIC, '10.0.0.5'] });
    const proxy = await start(egress.network);
    const port = inside.port;
    for (const authority of [
      `127.0.0.1:${port}`,
      `[::1]:${port}`,
      `2130706433:${port}`,
      `[::ffff:127.0.0.1]:${port}`,
      `localhost:${port}`,
      `inside.test:${port}`,
      `mixed.test:${port}`,
    ]) {
      const answer = await connectVia(proxy, authority);
      expect(answer.status, authority).toBe(403);
      expect(answer.body, authority).toMatch(/^Refused: .* is not on the public internet/);
    }
    for (const url of [`http://127.0.0.1:${port}/`, `http://inside.test:${port}/`, `http://localhost:${port}/`]) {
      const answer = await requestVia(proxy, url);
      expect(answer.status, url).toBe(403);
      expect(answer.body, url).toMatch(/^Refused/);
    }
    expect(inside.connections()).toBe(0);
    expect(egress.dials).toEqual([]);
    expect(egress.lookups).not.toContain('localhost');
  });

  it('refuses loopback with its defaults too (system resolver, plain TCP): the block list is never swapped', async () => {
    const proxy = await start({});
    for (const authority of [`127.0.0.1:${inside.port}`, `localhost:${inside.port}`])
      expect((await connectVia(proxy, authority)).status, authority).toBe(403);
    expect(inside.connections()).toBe(0);
  });

  it('resolves each destination once and connects to the address it checked, whatever DNS answers next (rebinding)', async () => {
    // Public the first time, loopback every time after: a rebinding name.
    const rebinding = () => {
      let calls = 0;
      return () => (calls++ === 0 ? [PUBLIC] : ['127.0.0.1']);
    };
    const egress = testEgressNetwork({ 'rebind.test': rebinding(), 'rebind-web.test': rebinding() });
    const proxy = await start(egress.network);
    const { status, socket } = await connectVia(proxy, `rebind.test:${echo.port}`);
    expect(status).toBe(200);
    expect(await roundTrip(socket, 'still public')).toBe('echo:still public');
    socket.destroy();
    expect((await requestVia(proxy, `http://rebind-web.test:${web.port}/`)).status).toBe(200);
    expect(egress.lookups).toEqual(['rebind.test', 'rebind-web.test']);
    expect(egress.dials).toEqual([`${PUBLIC}:${echo.port}`, `${PUBLIC}:${web.port}`]);
  });

  it('answers 400 to malformed requests', async () => {
    const egress = testEgressNetwork({ 'public.test': [PUBLIC] });
    const proxy = await start(egress.network);
    for (const authority of ['public.test', 'public.test:0', 'public.test:70000', 'user@public.test:80'])
      expect((await connectVia(proxy, authority)).status, authority).toBe(400);
    for (const url of ['/relative', `https://public.test:${web.port}/`])
      expect((await requestVia(proxy, url)).status, url).toBe(400);
    expect(egress.dials).toEqual([]);
  });

  it('answers 502 when a name does not resolve or nothing answers at the address', async () => {
    const closed = await startEcho();
    await closed.close();
    const egress = testEgressNetwork({ 'public.test': [PUBLIC] });
    const proxy = await start(egress.network);
    expect((await connectVia(proxy, 'nowhere.test:443')).status).toBe(502);
    expect((await connectVia(proxy, `public.test:${closed.port}`)).status).toBe(502);
    expect((await requestVia(proxy, `http://public.test:${closed.port}/`)).status).toBe(502);
  });

  it('accepts maxTunnels tunnels, refuses the next with 503, and takes one again once a tunnel closes', async () => {
    const proxy = await start({ ...testEgressNetwork({ 'public.test': [PUBLIC] }).network, maxTunnels: 3 });
    const open = await Promise.all([1, 2, 3].map(() => connectVia(proxy, `public.test:${echo.port}`)));
    expect(open.map((t) => t.status)).toEqual([200, 200, 200]);
    expect(proxy.openTunnels).toBe(3);
    const refused = await connectVia(proxy, `public.test:${echo.port}`);
    expect(refused.status).toBe(503);
    expect((await requestVia(proxy, `http://public.test:${web.port}/`)).status).toBe(503);
    open[0]?.socket.destroy();
    await eventually(() => proxy.openTunnels === 2);
    const again = await connectVia(proxy, `public.test:${echo.port}`);
    expect(again.status).toBe(200);
    for (const t of [...open, again]) t.socket.destroy();
  });

  it('closes a tunnel that stays idle for idleMs', async () => {
    const proxy = await start({ ...testEgressNetwork({ 'public.test': [PUBLIC] }).network, idleMs: 300 });
    const { status, socket } = await connectVia(proxy, `public.test:${echo.port}`);
    expect(status).toBe(200);
    await eventually(() => socket.destroyed || socket.readableEnded, 5000);
    await eventually(() => proxy.openTunnels === 0);
  });

  it('ends open tunnels on close() and stops listening', async () => {
    const proxy = await EgressProxy.start(testEgressNetwork({ 'public.test': [PUBLIC] }).network);
    const { status, socket } = await connectVia(proxy, `public.test:${echo.port}`);
    expect(status).toBe(200);
    expect(await roundTrip(socket, 'before close')).toBe('echo:before close');
    await eventually(() => echo.open() > 0);
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    await proxy.close();
    await ended;
    await eventually(() => echo.open() === 0);
    const refused = await new Promise<string>((resolve) => {
      const probe = net.connect(proxy.port, '127.0.0.1');
      probe.once('connect', () => resolve('connected'));
      probe.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
    });
    expect(refused).toBe('ECONNREFUSED');
  });
});
