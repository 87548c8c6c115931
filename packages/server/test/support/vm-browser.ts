import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { describe, inject, it } from 'vitest';
import type { VmStartSpec } from '../../src/platform/vm/provider.js';
import { MODE, type TestApp } from './app.js';

export { testEgressNetwork } from './egress-network.js';

import type { TestSocket } from './sockets.js';

/** The browser the room VM suites drive (Debian's chromium, as in production). */
export const CHROMIUM = '/usr/bin/chromium';
export const browserAvailable = existsSync(CHROMIUM);

/** Says on stderr, where a run cannot miss it, that tests are skipped and why. */
function announceSkip(message: string): void {
  const line = '!'.repeat(78);
  process.stderr.write(`\n${line}\n!! SKIPPING ${message}\n${line}\n\n`);
}

if (!browserAvailable) {
  if (process.env.REQUIRE_BROWSER === '1') {
    throw new Error(`REQUIRE_BROWSER=1 but ${CHROMIUM} is missing: apt-get install chromium`);
  }
  announceSkip(`room VM browser suites: ${CHROMIUM} is missing (apt-get install chromium)`);
}

/** `describe` for suites that need a real browser (and, on the cluster project, PostgreSQL + Redis). */
/**
 * Suites that drive the VM provider directly: they do not depend on the storage mode, so they run
 * on the embedded project only.
 */
export const describeProvider = describe.skipIf(!browserAvailable || MODE === 'cluster');

/**
 * `it` for provider tests only a server running as root can pass (browsers under accounts of their
 * own). Not root: they are skipped, and the run says so loudly (`what` names them).
 */
export function rootOnly(what: string) {
  const root = process.getuid?.() === 0;
  if (!root && browserAvailable && MODE !== 'cluster')
    announceSkip(`${what}: they need root, and this run is uid ${process.getuid?.()}`);
  return it.skipIf(!root);
}

/** A room's start spec for provider suites: a small window on a blank page, private networks off. */
export const roomSpec = (over: Partial<VmStartSpec> = {}): VmStartSpec => ({
  browser: 'brave',
  proxy: 'none',
  startUrl: 'about:blank',
  allowPrivateNetworks: false,
  width: 640,
  height: 360,
  ...over,
});

export const describeBrowser = describe.skipIf(
  !browserAvailable || (MODE === 'cluster' && !inject('servicesAvailable')),
);

const PAGES: Record<string, string> = {
  '/button': `<!doctype html><html><head><title>button</title><style>
    body { margin: 0; background: #ffffff; font: 24px sans-serif; }
    #go { position: absolute; left: 100px; top: 100px; width: 300px; height: 200px; font-size: 32px; }
    #field { position: absolute; left: 500px; top: 100px; width: 300px; height: 40px; font-size: 24px; }
    body.clicked { background: #1040c0; }
  </style></head><body>
    <button id="go" onclick="document.body.classList.add('clicked'); document.body.dataset.clicked = 'yes'">Go</button>
    <input id="field">
  </body></html>`,
  '/anim': `<!doctype html><html><head><title>anim</title></head><body style="margin:0">
    <div id="box" style="width:1280px;height:720px"></div>
    <script>let n = 0; const box = document.getElementById('box');
      (function tick() { n++; box.style.background = 'hsl(' + (n * 7 % 360) + ',80%,50%)'; box.textContent = n;
        requestAnimationFrame(tick); })();</script>
  </body></html>`,
  '/page2': '<!doctype html><html><head><title>page2</title></head><body style="background:#c04010">two</body></html>',
  '/secret': '<!doctype html><html><body>internal secret</body></html>',
  '/popup': `<!doctype html><html><body style="margin:0">
    <a id="out" href="/page2" target="_blank" style="position:absolute;left:0;top:0;width:300px;height:100px;display:block">open</a>
  </body></html>`,
};

/** A tiny site on 127.0.0.1 for the room browser: pages by path, redirects, and the paths it served. */
export async function startTestSite() {
  const hits: string[] = [];
  const server = http.createServer((req, res) => {
    const url = req.url ?? '/';
    hits.push(url);
    if (url.startsWith('/redirect?to=')) {
      res.writeHead(302, { location: decodeURIComponent(url.slice('/redirect?to='.length)) });
      res.end();
      return;
    }
    const page = PAGES[url];
    res.writeHead(page ? 200 : 404, { 'content-type': 'text/html; charset=utf-8' });
    res.end(page ?? 'not found');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    url: (path: string) => `http://127.0.0.1:${port}${path}`,
    hits,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * A WebSocket endpoint on 127.0.0.1 that completes every handshake (and then stays silent).
 * `connections` counts TCP connections, whatever came of them; `upgrades` lists handshake paths.
 */
export async function startWebSocketServer() {
  const upgrades: string[] = [];
  const sockets = new Set<Duplex>();
  let connections = 0;
  const server = http.createServer((_req, res) => res.writeHead(426).end());
  server.on('connection', () => {
    connections += 1;
  });
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex) => {
    upgrades.push(req.url ?? '');
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('close', () => sockets.delete(socket));
    const accept = createHash('sha1')
      .update(`${req.headers['sec-websocket-key'] ?? ''}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
      .digest('base64');
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    upgrades,
    connections: () => connections,
    close: () => {
      for (const s of sockets) s.destroy();
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Width and height of a baseline or progressive JPEG, read from its SOF marker. */
export function jpegSize(data: Uint8Array): { width: number; height: number } | null {
  const b = Buffer.from(data);
  if (b[0] !== 0xff || b[1] !== 0xd8) return null;
  let i = 2;
  while (i + 9 < b.length) {
    if (b[i] !== 0xff) return null;
    const marker = b[i + 1] as number;
    const length = b.readUInt16BE(i + 2);
    if (marker >= 0xc0 && marker <= 0xc3) return { height: b.readUInt16BE(i + 5), width: b.readUInt16BE(i + 7) };
    i += 2 + length;
  }
  return null;
}

export interface Watcher {
  /** Frames received for the chat, in order. */
  frames: { seq: number; data: Buffer }[];
  latest(): { seq: number; data: Buffer } | undefined;
  stop(): void;
}

/**
 * Receives a chat's frames on a socket and acknowledges each at once (a fast viewer), without an
 * ack callback, as the SDK does (the tests that check an ack's answer send theirs with one).
 */
export function autoAck(socket: TestSocket, chatId: number): Watcher {
  const frames: Watcher['frames'] = [];
  const onFrame = (p: { chat_id: number; seq: number; data: Uint8Array }) => {
    if (p.chat_id !== chatId) return;
    frames.push({ seq: p.seq, data: Buffer.from(p.data) });
    socket.emit('vm:frame:ack', { chat_id: chatId, seq: p.seq });
  };
  socket.on('vm:frame', onFrame);
  return { frames, latest: () => frames.at(-1), stop: () => socket.off('vm:frame', onFrame) };
}

/** Polls `check` until it returns a truthy value, or fails after `ms`. */
/**
 * The budget of a wait on a real browser. Generous on purpose: CI runs the suites in parallel on 2
 * cores next to Chromium, where a start, a repaint or a frame can stall for seconds. A wait that
 * is met returns at once, so this costs nothing when things work; it only bounds a failure.
 */
export const WAIT_MS = 20_000;

/** Per-test timeout of the browser suites: several waits in one test must fit. */
export const BROWSER_TEST_TIMEOUT_MS = 120_000;

export async function eventually<T>(check: () => Promise<T> | T, ms = 8000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what} not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Whether a process exists. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Processes of the session `pid` leads (a room browser and its children: Chromium starts detached)
 * that still run; zombies are not counted (a reparented child may wait for a reaper that never
 * comes in a container).
 */
export function livingInSession(pid: number): number {
  try {
    return execFileSync('ps', ['-o', 'stat=', '-s', String(pid)])
      .toString()
      .split('\n')
      .filter((stat) => stat.trim() !== '' && !stat.trim().startsWith('Z')).length;
  } catch {
    return 0;
  }
}

/** Replaces a node's browsers with records: a room runs as soon as it is launched. */
export function withoutBrowsers(node: TestApp) {
  const launched: string[] = [];
  node.vmProvider.start = async (roomId, spec) => {
    launched.push(roomId);
    return { roomId, state: 'running', width: spec.width, height: spec.height, startedAt: new Date(), restarts: 0 };
  };
  node.vmProvider.stop = async () => {};
  return { launched };
}
