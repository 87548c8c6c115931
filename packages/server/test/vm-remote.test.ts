import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Server } from 'socket.io';
import { io as ioClient } from 'socket.io-client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type BrowserHost, createBrowserHost } from '../src/platform/vm/browser-host.js';
import { LocalChromiumProvider } from '../src/platform/vm/local-provider.js';
import type { VmFrame, VmProvider } from '../src/platform/vm/provider.js';
import { RemoteBrowserProvider } from '../src/platform/vm/remote-provider.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { join, member } from './support/chat-flows.js';
import { captureLog } from './support/logs.js';
import {
  BROWSER_TEST_TIMEOUT_MS,
  CHROMIUM,
  describeProvider,
  eventually,
  jpegSize,
  startTestSite,
  WAIT_MS,
} from './support/vm-browser.js';
import { providerContract, rejectsWith, spec } from './support/vm-contract.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/**
 * Room VMs on browser hosts (VM_HOSTS): the remote provider passes the provider contract against
 * a real host process's code on a real port, and a node configured with VM_HOSTS serves rooms with
 * the chat code unchanged. Storage does not matter to the browser suites: embedded project only.
 * What users and the log see of a failing host needs no browser and runs on both projects.
 */
const TOKEN = 'vht_test_token_0123456789abcdef0123456789';

/** A provider that runs no browser: `start` as given, the rest does nothing. */
function browserless(over: Pick<VmProvider, 'start'> & Partial<VmProvider>): VmProvider {
  return {
    stop: async () => {},
    status: () => null,
    list: () => [],
    subscribe: () => () => {},
    input: async () => {},
    releaseInput: async () => {},
    navigate: async () => {},
    onStopped: () => () => {},
    close: async () => {},
    ...over,
  };
}

let site: Awaited<ReturnType<typeof startTestSite>>;
const hosts: { host: BrowserHost; provider: LocalChromiumProvider }[] = [];
const remotes: RemoteBrowserProvider[] = [];

/** A browser host on a free port; the test site is on loopback, so it allows private networks. */
async function startHost(maxRooms: number) {
  const provider = new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms });
  const server = createServer();
  const host = createBrowserHost(server, { provider, token: TOKEN, allowPrivateNetworks: true });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  hosts.push({ host, provider });
  return { host, provider, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

function remote(urls: string[], token = TOKEN) {
  const r = new RemoteBrowserProvider({ hosts: urls, token, connectWaitMs: 3_000 });
  remotes.push(r);
  return r;
}

beforeAll(async () => {
  site = await startTestSite();
});
afterAll(async () => {
  for (const r of remotes) await r.close();
  for (const h of hosts) await h.host.close();
  await site?.close();
});

describeProvider('remote provider over browser hosts', () => {
  providerContract(
    'remote (browser host)',
    () => site,
    async (maxRooms) => remote([(await startHost(maxRooms)).url]),
  );

  it('refuses a node without the host’s token: starts answer ERR_ROOM_START_FAILED', async () => {
    const { url, provider } = await startHost(1);
    const stranger = remote([url], 'vht_not_the_token_0123456789abcdef0123');
    await rejectsWith(stranger.start('x', spec()), 'ERR_ROOM_START_FAILED', /No browser host is reachable/);
    expect(provider.list()).toEqual([]);
  });

  it('places each room on the host with the fewest, the next when one is full', async () => {
    const a = await startHost(1);
    const b = await startHost(1);
    const node = remote([a.url, b.url]);
    await node.start('p1', spec({ startUrl: site.url('/button') }));
    await node.start('p2', spec({ startUrl: site.url('/button') }));
    expect([a.host.rooms(), b.host.rooms()]).toEqual([1, 1]);
    await rejectsWith(node.start('p3', spec()), 'ERR_ROOM_START_FAILED', /every browser host is at capacity/i);
    expect(
      node
        .list()
        .map((i) => i.roomId)
        .sort(),
    ).toEqual(['p1', 'p2']);
    await node.close();
    await eventually(() => a.provider.list().length + b.provider.list().length === 0, WAIT_MS, 'rooms stopped');
  });

  it('refuses node payloads that fail their schema with ERR_VALIDATION, starting nothing', async () => {
    const { url, host } = await startHost(2);
    const socket = ioClient(url, { path: '/browser-host', transports: ['websocket'], auth: { token: TOKEN } });
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', resolve);
        socket.once('connect_error', reject);
      });
      const ask = (event: string, payload: unknown) =>
        socket.timeout(5_000).emitWithAck(event, payload) as Promise<{ ok: boolean; code?: string }>;
      const good = spec({ startUrl: site.url('/') });
      const refused = [
        ['host:start', { roomId: 'r', spec: { ...good, startUrl: 'file:///etc/passwd' } }],
        ['host:start', { roomId: 'r', spec: { ...good, startUrl: 'javascript:alert(1)' } }],
        ['host:start', { roomId: 'r', spec: { ...good, width: 100_000 } }],
        ['host:start', { roomId: 'r', spec: { ...good, browser: 'firefox' } }],
        ['host:start', { roomId: 'r', spec: { ...good, extra: true } }],
        ['host:start', { roomId: '', spec: good }],
        ['host:start', { roomId: 'x'.repeat(65), spec: good }],
        ['host:start', null],
        ['host:input', { roomId: 'r', input: { kind: 'text', text: 'x'.repeat(4097) } }],
        ['host:input', { roomId: 'r', input: { kind: 'mouse', type: 'down', x: -1, y: 0 } }],
        ['host:navigate', { roomId: 'r', nav: { url: 'chrome://settings' } }],
        ['host:navigate', { roomId: 'r', nav: { action: 'close' } }],
        ['host:subscribe', { roomId: 7 }],
        ['host:release', { roomId: 'r', input: { kind: 'text', text: 'x' } }],
        ['host:stop', 'r'],
      ] as const;
      for (const [event, payload] of refused) {
        expect({ event, payload, answer: await ask(event, payload) }).toMatchObject({
          answer: { ok: false, code: 'ERR_VALIDATION' },
        });
      }
      expect(host.rooms()).toBe(0);
      // Valid payloads pass the check (the room is not this connection's: not running).
      expect(await ask('host:input', { roomId: 'r', input: { kind: 'text', text: 'x'.repeat(4096) } })).toMatchObject({
        ok: false,
        code: 'ERR_ROOM_NOT_RUNNING',
      });
      expect(await ask('host:rooms', {})).toEqual({ ok: true, rooms: [] });
    } finally {
      socket.close();
    }
  });

  it('keeps a room to the node that started it, and shares one host stream among its subscribers', async () => {
    const { url, host } = await startHost(2);
    const node = remote([url]);
    const other = remote([url]);
    await node.start('mine', spec({ startUrl: site.url('/anim') }));
    await rejectsWith(other.start('mine', spec()), 'ERR_ROOM_START_FAILED', /Another node/);
    expect(host.rooms()).toBe(1);
    const first: VmFrame[] = [];
    const second: VmFrame[] = [];
    const offFirst = node.subscribe('mine', (f) => first.push(f));
    await eventually(() => first.length > 0, WAIT_MS, 'a first frame');
    const offSecond = node.subscribe('mine', (f) => second.push(f));
    // The second subscriber gets the latest frame at once, then the same frames as the first.
    expect(second[0]?.seq).toBe(first.at(-1)?.seq);
    await eventually(() => second.length > 3, WAIT_MS, 'more frames');
    expect(jpegSize(second.at(-1)?.data as Buffer)).toEqual({ width: 640, height: 360 });
    const shared = second.at(-1)?.seq as number;
    expect(first.some((f) => f.seq === shared)).toBe(true);
    offFirst();
    offSecond();
    await node.stop('mine');
    expect(host.rooms()).toBe(0);
    // Two nodes starting the same room at once: one gets it, the other is refused.
    const both = await Promise.allSettled([node.start('race', spec()), other.start('race', spec())]);
    expect(both.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    expect(host.rooms()).toBe(1);
    await node.stop('race');
    await other.stop('race');
    expect(host.rooms()).toBe(0);
  });

  it('asks a host that answered a start too late to stop that room', async () => {
    // A provider whose starts take 300 ms, and a node that waits 100 ms for them.
    const stops: string[] = [];
    const slow = browserless({
      start: async (roomId, s) => {
        await new Promise((r) => setTimeout(r, 300));
        return { roomId, state: 'running', width: s.width, height: s.height, startedAt: new Date(), restarts: 0 };
      },
      stop: async (roomId) => {
        stops.push(roomId);
      },
    });
    const server = createServer();
    const host = createBrowserHost(server, { provider: slow, token: TOKEN });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const node = new RemoteBrowserProvider({
        hosts: [`http://127.0.0.1:${(server.address() as AddressInfo).port}`],
        token: TOKEN,
        startTimeoutMs: 100,
      });
      remotes.push(node);
      await rejectsWith(node.start('late', spec()), 'ERR_ROOM_START_FAILED', /did not answer in time/);
      expect(node.status('late')).toBeNull();
      await eventually(() => stops.includes('late'), WAIT_MS, 'the late room stopped on the host');
      // The host forgets it once its start has settled (the stop killed the browser being launched).
      await eventually(() => host.rooms() === 0, WAIT_MS, 'the host forgetting the room');
    } finally {
      await host.close();
    }
  });

  it('calls off a start stopped while its host launches the browser: the host kills it at once, the start fails', async () => {
    const { host, provider, url } = await startHost(1);
    const node = remote([url]);
    const starting = node.start('early', spec({ startUrl: site.url('/button') }));
    await eventually(() => provider.status('early')?.state === 'starting', WAIT_MS, 'the host launching the browser');
    await node.stop('early');
    await rejectsWith(starting, 'ERR_ROOM_START_FAILED', /called off/);
    expect(node.status('early')).toBeNull();
    expect(provider.list()).toEqual([]);
    expect(host.rooms()).toBe(0);
    // The room starts again afterwards.
    await node.start('early', spec({ startUrl: site.url('/button') }));
    expect(host.rooms()).toBe(1);
    await node.stop('early');
  });

  it('calls off on close a start its host answers meanwhile: the node keeps no room, the host stops it', async () => {
    // A host whose start of `late` answers only once the stop of `first` (close stopping it) is under way.
    let answer = () => {};
    const answered = new Promise<void>((resolve) => {
      answer = resolve;
    });
    const stops: string[] = [];
    const info = (roomId: string, s: { width: number; height: number }) => ({
      roomId,
      state: 'running' as const,
      width: s.width,
      height: s.height,
      startedAt: new Date(),
      restarts: 0,
    });
    const hostProvider = browserless({
      start: async (roomId, s) => {
        if (roomId === 'late') await answered;
        return info(roomId, s);
      },
      stop: async (roomId) => {
        stops.push(roomId);
        if (roomId !== 'first') return;
        answer();
        await new Promise((r) => setTimeout(r, 200));
      },
    });
    const server = createServer();
    const host = createBrowserHost(server, { provider: hostProvider, token: TOKEN });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const node = remote([`http://127.0.0.1:${(server.address() as AddressInfo).port}`]);
      await node.start('first', spec());
      const late = node.start('late', spec());
      await eventually(() => host.rooms() === 2, WAIT_MS, 'the host starting the second room');
      const lateFails = rejectsWith(late, 'ERR_ROOM_START_FAILED', /called off/);
      await node.close();
      await lateFails;
      expect(node.list()).toEqual([]);
      expect(stops).toContain('late');
      await eventually(() => host.rooms() === 0, WAIT_MS, 'the host forgetting the node’s rooms');
    } finally {
      await host.close();
    }
  });

  it('ends the rooms of a node whose connection drops, on both sides (no browser left behind)', async () => {
    const { host, provider, url } = await startHost(1);
    const node = remote([url]);
    await node.start('dropped', spec({ startUrl: site.url('/button') }));
    const stopped: [string, string][] = [];
    node.onStopped((roomId, reason) => stopped.push([roomId, reason]));
    const pid = provider.pidOf('dropped') as number;
    host.io.disconnectSockets(true);
    await eventually(() => stopped.length > 0, WAIT_MS, 'the node hearing of it');
    expect(stopped).toEqual([['dropped', 'crashed']]);
    expect(node.status('dropped')).toBeNull();
    await eventually(() => provider.list().length === 0, WAIT_MS, 'the host stopping the room');
    await eventually(
      () => {
        try {
          process.kill(pid, 0);
          return false;
        } catch {
          return true;
        }
      },
      WAIT_MS,
      'the browser process gone',
    );
    // The node reconnects by itself and can start rooms again.
    await node.start('again', spec({ startUrl: site.url('/button') }));
    expect(host.rooms()).toBe(1);
    await node.stop('again');
  });
});

describe('a browser host’s network policy', () => {
  it('lets a room reach private networks only when both the host and the node allow it', async () => {
    const seen: boolean[] = [];
    const recording = browserless({
      start: async (roomId, s) => {
        seen.push(s.allowPrivateNetworks);
        return { roomId, state: 'running', width: s.width, height: s.height, startedAt: new Date(), restarts: 0 };
      },
    });
    const served: BrowserHost[] = [];
    const hostWith = async (allowPrivateNetworks: boolean | undefined) => {
      const server = createServer();
      served.push(createBrowserHost(server, { provider: recording, token: TOKEN, allowPrivateNetworks }));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return remote([`http://127.0.0.1:${(server.address() as AddressInfo).port}`]);
    };
    try {
      const [unset, off, on] = [await hostWith(undefined), await hostWith(false), await hostWith(true)];
      await unset.start('a', spec({ allowPrivateNetworks: true }));
      await off.start('b', spec({ allowPrivateNetworks: true }));
      await on.start('c', spec({ allowPrivateNetworks: false }));
      await on.start('d', spec({ allowPrivateNetworks: true }));
      expect(seen).toEqual([false, false, false, true]);
    } finally {
      for (const h of served) await h.close();
    }
  });
});

describe('a browser host that answers a start it does not describe', () => {
  it('fails the start 503 ERR_ROOM_START_FAILED and tells the host to stop the room it may run', async () => {
    // A host (buggy, older or lying) whose host:start acks say ok without a valid `info`.
    const started = (over: object) => ({
      ok: true,
      info: { state: 'running', width: 640, height: 360, startedAt: new Date().toISOString(), restarts: 0, ...over },
    });
    const answers: Record<string, object> = {
      none: { ok: true },
      null: { ok: true, info: null },
      other: started({ roomId: 'elsewhere' }),
      width: started({ roomId: 'width', width: '640' }),
      date: started({ roomId: 'date', startedAt: 'yesterday' }),
    };
    const seen: string[] = [];
    const server = createServer();
    const io = new Server(server, { path: '/browser-host', transports: ['websocket'] });
    io.on('connection', (socket) => {
      socket.on('host:start', (p: { roomId: string }, ack: (a: object) => void) => {
        seen.push(`start ${p.roomId}`);
        ack(answers[p.roomId] ?? { ok: false, code: 'ERR_INTERNAL', message: 'unknown room' });
      });
      socket.on('host:stop', (p: { roomId: string }, ack: (a: object) => void) => {
        seen.push(`stop ${p.roomId}`);
        ack({ ok: true });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const node = remote([`http://127.0.0.1:${(server.address() as AddressInfo).port}`]);
      for (const roomId of Object.keys(answers)) {
        await rejectsWith(node.start(roomId, spec()), 'ERR_ROOM_START_FAILED', /answered an invalid start/);
        // The start fails once the host has answered the stop.
        expect(seen.slice(-2)).toEqual([`start ${roomId}`, `stop ${roomId}`]);
        expect(node.status(roomId)).toBeNull();
      }
      expect(node.list()).toEqual([]);
    } finally {
      await new Promise<void>((resolve) => io.close(() => resolve()));
    }
  });
});

describeProvider('a node whose rooms run on a browser host (VM_HOSTS)', () => {
  let app: TestApp;
  let hostProvider: LocalChromiumProvider;

  beforeAll(async () => {
    const host = await startHost(1);
    hostProvider = host.provider;
    app = await startApp({ config: { vmHosts: [host.url], vmHostToken: TOKEN, vmAllowPrivateNetworks: true } });
  });
  afterAll(async () => {
    await app?.close();
  });

  it('starts, streams and stops a chat’s room through the host, with the chat code unchanged', async () => {
    const owner = await member(app, { level: 2 });
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'Hosted room', type: 'public' });
    expect(created.status).toBe(200);
    const chatId = created.body.chat.id as number;
    expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
    const started = await owner.client.post(`/v1/portal/chats/${chatId}/start`, {});
    expect(started.status, JSON.stringify(started.body)).toBe(200);
    expect(hostProvider.list().map((i) => i.roomId)).toEqual([String(chatId)]);

    const socket = owner.socket as unknown as { emitWithAck(e: string, p: object): Promise<any> };
    const { credentials } = await socket.emitWithAck('vm:credentials', { chat_id: chatId });
    expect(await socket.emitWithAck('vm:watch', { chat_id: chatId, token: credentials.token })).toMatchObject({
      ok: true,
    });
    const frame = await owner.socket.next('vm:frame', (p) => p.chat_id === chatId, WAIT_MS);
    expect(frame.mime).toBe('image/jpeg');
    const stats = await owner.client.get('/v1/statistics/chats');
    expect(stats.body).toMatchObject({ active_browsers: 1, viewers: 1 });

    const stopped = await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {});
    expect(stopped.status).toBe(200);
    await eventually(() => hostProvider.list().length === 0, WAIT_MS, 'the host’s browser stopped');
  });

  it('lets go of what the previous controller held when control changes hands, on the host', async () => {
    const [owner, alice, bob] = await Promise.all([member(app, { level: 2 }), member(app), member(app)]);
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'Hosted hand-over', type: 'public' });
    const chatId = created.body.chat.id as number;
    app.services.vm.useSettings(async (id) => (id === chatId ? { start_url: site.url('/button') } : null));
    for (const m of [owner, alice, bob]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
    const ack = (m: typeof owner, event: string, payload: object): Promise<any> =>
      (m.socket as unknown as { emitWithAck(e: string, p: object): Promise<any> }).emitWithAck(event, {
        chat_id: chatId,
        ...payload,
      });
    const page = (expression: string) => hostProvider.evaluate(String(chatId), expression);
    try {
      await eventually(async () => (await page('document.readyState')) === 'complete', WAIT_MS, 'the page');
      expect(await ack(alice, 'vm:control:request', {})).toMatchObject({ ok: true, granted: true });
      expect(
        (await ack(alice, 'vm:input', { kind: 'key', type: 'down', key: 'Control', code: 'ControlLeft' })).ok,
      ).toBe(true);
      expect((await ack(owner, 'vm:control:grant', { user_id: bob.user.id })).ok).toBe(true);
      for (const type of ['down', 'up'])
        expect((await ack(bob, 'vm:input', { kind: 'mouse', type, x: 650, y: 120, button: 'left' })).ok).toBe(true);
      for (const type of ['down', 'up'])
        expect(await ack(bob, 'vm:input', { kind: 'key', type, key: 'w', code: 'KeyW' })).toEqual({ ok: true });
      await eventually(async () => (await page('document.activeElement?.value')) === 'w', WAIT_MS, 'typing');
    } finally {
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(200);
      await eventually(() => hostProvider.list().length === 0, WAIT_MS, 'the host’s browser stopped');
    }
  });

  it('calls off a start stopped while the host launches its browser: the start answers 503, nobody hears room:started', async () => {
    const owner = await member(app, { level: 2 });
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'Stopped early', type: 'public' });
    const chatId = created.body.chat.id as number;
    expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
    const starting = owner.client.post(`/v1/portal/chats/${chatId}/start`, {});
    await eventually(() => hostProvider.status(String(chatId))?.state === 'starting', WAIT_MS, 'the host launching');
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(200);
    const started = await starting;
    expect({ status: started.status, code: started.body.code }).toEqual({ status: 503, code: 'ERR_ROOM_START_FAILED' });
    expect(started.body.message).toMatch(/called off/);
    await new Promise((r) => setTimeout(r, 300));
    expect(owner.socket.received.map((r) => r.event)).not.toContain('room:started');
    expect(hostProvider.list()).toEqual([]);
    expect(app.services.vm.isRunning(chatId)).toBe(false);
  });
});

describeApp('a node whose browser hosts fail (VM_HOSTS)', () => {
  const PASSWORD = 'hunter2-browser-host';
  let hanging: BrowserHost | undefined;
  let app: TestApp | undefined;
  afterAll(async () => {
    await app?.close();
    await hanging?.close();
  });

  it('answers a start its host leaves unanswered 503 naming no host, and logs hosts by origin, without credentials', async () => {
    // A host whose browsers never finish starting, and one that refuses connections (port 1).
    const never = browserless({ start: () => new Promise(() => {}) });
    const server = createServer();
    hanging = createBrowserHost(server, { provider: never, token: TOKEN });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    // Config refuses a user name or password in VM_HOSTS; whatever the provider is given, it names
    // hosts by their origin alone.
    const logs = captureLog('info');
    app = await startApp({
      logger: logs.log,
      config: {
        vmHosts: [`http://parlor:${PASSWORD}@127.0.0.1:${port}`, `http://parlor:${PASSWORD}@127.0.0.1:1`],
        vmHostToken: TOKEN,
        // VM_HOST_START_TIMEOUT_MS at its least: the host never answers the start.
        vmHostStartTimeoutMs: 1_000,
      },
    });
    const owner = await member(app, { level: 2 });
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'Hanging host', type: 'public' });
    const chatId = created.body.chat.id as number;
    expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
    const started = await owner.client.post(`/v1/portal/chats/${chatId}/start`, {});
    expect({ status: started.status, body: started.body }).toEqual({
      status: 503,
      body: { code: 'ERR_ROOM_START_FAILED', message: 'A browser host did not answer in time.' },
    });
    const refused = logs.lines().filter((l) => l.msg.startsWith('browser host http://127.0.0.1:1: '));
    expect(refused.length).toBeGreaterThan(0);
    expect(logs.text()).not.toContain(PASSWORD);
  }, 60_000);
});

const HOST_MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../dist/browser-host-main.js');

describeProvider('the browser host process (npm run browser-host)', () => {
  it('starts, keeps its token in DATA_DIR, serves a node, and stops cleanly on SIGTERM (the node hears its rooms ended)', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-host-'));
    const child = spawn(process.execPath, [HOST_MAIN], {
      env: { PATH: process.env.PATH ?? '', DATA_DIR: dataDir, BROWSER_HOST_PORT: '0', VM_MAX_PER_NODE: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      const port = await eventually(() => /serving 127\.0\.0\.1:(\d+)/.exec(out)?.[1], WAIT_MS, 'the banner');
      const tokenFile = path.join(dataDir, 'vm-host-token');
      expect(out).toContain(`token: ${tokenFile}`);
      expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
      const node = remote([`http://127.0.0.1:${port}`], readFileSync(tokenFile, 'utf8').trim());
      await node.start('proc', spec({ startUrl: site.url('/button') }));
      const frames: VmFrame[] = [];
      node.subscribe('proc', (f) => frames.push(f));
      await eventually(() => frames.length > 0, WAIT_MS, 'a frame from the host process');
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      await eventually(() => node.status('proc') === null, WAIT_MS, 'the node hearing the host went away');
    } finally {
      child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
