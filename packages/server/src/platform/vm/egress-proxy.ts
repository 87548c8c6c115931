import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { checkHost, type Lookup, systemLookup } from './network-guard.js';

/** Opens a TCP connection to an address that passed the check (an IP literal, never a name). */
export type Dial = (address: string, port: number) => net.Socket;

export interface EgressProxyOptions {
  /** Resolves a host name to every address. Default: the system resolver, as the request guard. */
  lookup?: Lookup;
  /** Connects to a checked address. Default: TCP to that address. */
  dial?: Dial;
  /** Most destinations open or being reached at once (CONNECT tunnels and forwarded requests). */
  maxTunnels?: number;
  /** A tunnel, forwarded request or browser connection silent this long (ms) is closed. */
  idleMs?: number;
  /** How long (ms) resolving a name, and then connecting to one address, may take. */
  connectTimeoutMs?: number;
}

/** A destination: a host (name or literal, as a URL writes it) and a port. */
interface Target {
  host: string;
  port: number;
}

const defaultDial: Dial = (address, port) => net.connect({ host: address, port });

const DEFAULTS = { maxTunnels: 512, idleMs: 5 * 60_000, connectTimeoutMs: 10_000 };

/** Headers that describe one hop (RFC 9110 7.6.1), not the request: never forwarded either way. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade']);

/** `host:port` of a CONNECT request, the host normalised as in a URL (`2130706433` → `127.0.0.1`). */
export function parseAuthority(authority: string): Target | null {
  const m = /^(\[[0-9a-f:.]+\]|[^\s/?#@[\]:]+):(\d{1,5})$/i.exec(authority);
  if (!m?.[1] || !m[2]) return null;
  return normalise(m[1], Number(m[2]));
}

/** The destination of an absolute-form request: http:// only (the browser sends https through CONNECT). */
export function parseAbsolute(url: string | undefined): (Target & { path: string; authority: string }) | null {
  if (!url || !/^http:\/\//i.test(url)) return null;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  const target = normalise(parsed.hostname, parsed.port === '' ? 80 : Number(parsed.port));
  return target && { ...target, path: `${parsed.pathname}${parsed.search}`, authority: parsed.host };
}

function normalise(host: string, port: number): Target | null {
  if (!Number.isInteger(port) || port < 1 || port > 65_535) return null;
  try {
    const { hostname } = new URL(`http://${host}/`);
    return hostname ? { host: hostname, port } : null;
  } catch {
    return null;
  }
}

/** Raw headers minus hop-by-hop ones, those `Connection` names, every `Proxy-*`, and `drop`. */
function endToEnd(raw: string[], drop: string[] = []): string[] {
  const named = new Set<string>(drop);
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]?.toLowerCase() !== 'connection') continue;
    for (const token of (raw[i + 1] ?? '').split(',')) named.add(token.trim().toLowerCase());
  }
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = (raw[i] as string).toLowerCase();
    if (HOP_BY_HOP.has(name) || named.has(name) || name.startsWith('proxy-')) continue;
    out.push(raw[i] as string, raw[i + 1] as string);
  }
  return out;
}

/** A short plain-text answer on a socket that is no longer an HTTP exchange (after CONNECT). */
function refuseSocket(socket: net.Socket, status: number, text: string): void {
  if (socket.destroyed) return;
  const body = `${text}\n`;
  // Closed once written: a client that keeps its end open must not hold the socket.
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\nContent-Type: text/plain; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    () => socket.destroy(),
  );
}

function refuseResponse(res: http.ServerResponse, status: number, text: string): void {
  const body = `${text}\n`;
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out')), ms);
    p.then(resolve, reject).finally(() => clearTimeout(timer));
  });
}

/** A slot that is given back once both the attempt to reach the destination and the exchange are over. */
function slot(release: () => void): () => void {
  let pending = 2;
  return () => {
    pending -= 1;
    if (pending === 0) release();
  };
}

/**
 * The only way out of a room browser that has no upstream proxy (docs/security.md, "Room browsers
 * and the private network"): Chromium runs with `--proxy-server` pointing here and
 * `--proxy-bypass-list=<-loopback>`, so documents, subresources, WebSocket handshakes (which
 * Chromium tunnels through CONNECT) and HTTPS all start here. Each destination's host is resolved
 * once with the request guard's check (`checkHost`): refused (403) if any address is not public,
 * else connected to one of exactly the addresses that were checked, so a name cannot answer one
 * address to the check and another to the connection (DNS rebinding). Any port is allowed.
 *
 * It listens on 127.0.0.1 without credentials (Chromium cannot send proxy credentials without a
 * prompt): whoever else on this host uses it reaches only what the rooms may reach.
 */
export class EgressProxy {
  private readonly sockets = new Set<net.Socket>();
  private open = 0;
  private closed = false;
  private listeningPort = 0;

  private constructor(
    private readonly server: http.Server,
    private readonly opts: Required<EgressProxyOptions>,
  ) {}

  /** Starts listening on 127.0.0.1, on a port of the system's choosing. */
  static async start(options: EgressProxyOptions = {}): Promise<EgressProxy> {
    const opts = { lookup: systemLookup, dial: defaultDial, ...DEFAULTS, ...options };
    // No request timeout: an upload may be long. Idle connections are closed instead (`timeout`).
    const server = http.createServer({ requestTimeout: 0 });
    server.timeout = opts.idleMs;
    server.maxConnections = opts.maxTunnels + 128;
    const proxy = new EgressProxy(server, opts);
    server.on('connection', (socket: net.Socket) => proxy.track(socket));
    // Neither rejects, short of a bug (a dial that throws): then that one exchange ends, not the process.
    server.on('request', (req, res) => {
      proxy.forward(req, res).catch(() => res.destroy());
    });
    server.on('connect', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
      proxy.tunnel(req, socket, head).catch(() => socket.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    proxy.listeningPort = (server.address() as AddressInfo).port;
    return proxy;
  }

  /** The port it listens on (still known after close). */
  get port(): number {
    return this.listeningPort;
  }

  /** The URL for Chromium's `--proxy-server`. */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Destinations open or being reached now (at most `maxTunnels`). */
  get openTunnels(): number {
    return this.open;
  }

  /** Stops listening and ends every connection and tunnel. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeAllConnections();
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }

  private track(socket: net.Socket): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    this.sockets.add(socket);
    // Errors end the socket ('close' follows); they are not this process's failures.
    socket.on('error', () => {});
    socket.once('close', () => this.sockets.delete(socket));
  }

  private acquire(): (() => void) | null {
    if (this.open >= this.opts.maxTunnels) return null;
    this.open += 1;
    return slot(() => {
      this.open -= 1;
    });
  }

  /** `CONNECT host:port`: HTTPS, ws:// and wss:// alike. The tunnel carries bytes both ways once it is up. */
  private async tunnel(req: http.IncomingMessage, client: net.Socket, head: Buffer): Promise<void> {
    const target = parseAuthority(req.url ?? '');
    if (!target) return refuseSocket(client, 400, 'CONNECT needs host:port.');
    const done = this.acquire();
    if (!done) return refuseSocket(client, 503, 'Too many connections through this proxy; try again later.');
    client.once('close', done);
    const reached = await this.reach(target);
    done();
    if (!(reached instanceof net.Socket)) return refuseSocket(client, reached.status, reached.text);
    const upstream = reached;
    if (client.destroyed) {
      upstream.destroy();
      return;
    }
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    for (const socket of [client, upstream]) {
      socket.setTimeout(this.opts.idleMs, end);
      socket.once('close', end);
    }
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) upstream.write(head);
    upstream.pipe(client);
    client.pipe(upstream);
  }

  /** An absolute-form `http://` request: sent on its own connection to the checked address, answer piped back. */
  private async forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const target = parseAbsolute(req.url);
    if (!target) return refuseResponse(res, 400, 'This is a forward proxy: absolute http:// URLs only.');
    const done = this.acquire();
    if (!done) return refuseResponse(res, 503, 'Too many connections through this proxy; try again later.');
    res.once('close', done);
    const reached = await this.reach(target);
    done();
    if (!(reached instanceof net.Socket)) return refuseResponse(res, reached.status, reached.text);
    const socket = reached;
    if (res.destroyed) {
      socket.destroy();
      return;
    }
    socket.setTimeout(this.opts.idleMs, () => socket.destroy());
    // RFC 9112 3.2.2: the absolute URL's authority replaces whatever Host the request carried.
    const headers = ['Host', target.authority, ...endToEnd(req.rawHeaders, ['host'])];
    const upstream = http.request({ method: req.method, path: target.path, headers, createConnection: () => socket });
    upstream.on('response', (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, endToEnd(answer.rawHeaders));
      answer.pipe(res);
    });
    upstream.on('error', () => {
      if (res.headersSent) res.destroy();
      else refuseResponse(res, 502, `${target.host} closed the connection.`);
    });
    res.once('close', () => upstream.destroy());
    req.pipe(upstream);
  }

  /**
   * Resolves the host once and checks every address; then connects to the checked addresses in
   * order until one answers. The socket returned is connected to one of them; nothing is resolved
   * again after the check.
   */
  private async reach(target: Target): Promise<net.Socket | { status: number; text: string }> {
    const lookup: Lookup = (host) => withTimeout(this.opts.lookup(host), this.opts.connectTimeoutMs);
    const checked = await checkHost(target.host, lookup);
    if (checked.verdict !== 'allowed')
      return checked.verdict === 'blocked'
        ? { status: 403, text: `Refused: ${target.host} is not on the public internet.` }
        : { status: 502, text: `${target.host} could not be resolved.` };
    for (const address of checked.addresses) {
      if (this.closed) break;
      const socket = await this.connect(address, target.port);
      if (socket) return socket;
    }
    return { status: 502, text: `${target.host}:${target.port} could not be reached.` };
  }

  private connect(address: string, port: number): Promise<net.Socket | null> {
    return new Promise((resolve) => {
      const socket = this.opts.dial(address, port);
      this.track(socket);
      const settle = (ok: boolean) => {
        clearTimeout(timer);
        socket.off('connect', onConnect);
        socket.off('close', onClose);
        if (!ok) socket.destroy();
        resolve(ok && !this.closed ? socket : null);
      };
      const onConnect = () => settle(true);
      const onClose = () => settle(false);
      const timer = setTimeout(() => settle(false), this.opts.connectTimeoutMs);
      socket.once('connect', onConnect);
      socket.once('close', onClose);
    });
  }
}
