import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Limits } from '@parlor/protocol';
import { eq } from 'drizzle-orm';
import { io } from 'socket.io-client';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { CONTROL_REQUEST_REPEAT_MS } from '../src/modules/vm/vm.host.js';
import { makeViewerTokens, viewerTokenKey } from '../src/modules/vm/vm.tokens.js';
import { FakeClock } from '../src/platform/clock.js';
import { schema } from '../src/platform/db/index.js';
import { removeStaleProfiles } from '../src/platform/vm/chromium-profile.js';
import { describeApp, type Nodes, startApp, startNodes, type TestApp } from './support/app.js';
import { join, type Member, member } from './support/chat-flows.js';
import { Client } from './support/client.js';
import { createBot, operator } from './support/flows.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';
import { stalledBrowser } from './support/stalled-browser.js';
import {
  alive,
  autoAck,
  BROWSER_TEST_TIMEOUT_MS,
  CHROMIUM,
  describeBrowser,
  eventually,
  livingInSession,
  startTestSite,
  WAIT_MS,
  withoutBrowsers,
} from './support/vm-browser.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/**
 * Room VM lifecycle gaps: a deleted chat stops its room, a banned member's stream ends at once,
 * profile directories go with their browser (stop, crash, killed server) and a killed server
 * leaves no browser behind; the owner of a guild runs the room of the guild's public chat; a start
 * racing its chat's removal, and a recovered connection, on one node or across two.
 */
let app: TestApp;
let site: Awaited<ReturnType<typeof startTestSite>>;
let owner: Member;
let carol: Member;

const ack = (m: Member, event: string, payload: object): Promise<any> => (m.socket as any).emitWithAck(event, payload);
const createChat = async (m: Member, name: string) => {
  const res = await m.client.post('/v1/portal/chats/create', { name, type: 'public' });
  expect(res.status).toBe(200);
  return res.body.chat.id as number;
};
/** Starts a chat's room as its owner and has `m` watch it (auto-acknowledging frames). */
const startAndWatch = async (by: Member, m: Member, chatId: number) => {
  expect((await by.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
  const token = (await ack(m, 'vm:credentials', { chat_id: chatId })).credentials.token;
  const watcher = autoAck(m.socket, chatId);
  expect((await ack(m, 'vm:watch', { chat_id: chatId, token })).ok).toBe(true);
  await eventually(() => watcher.frames.length > 0, WAIT_MS, 'a first frame');
  return watcher;
};

/** A matched direct chat of two new members of `node` (both their sockets are in its room). */
const directChat = async (node: TestApp = app) => {
  const [a, b] = await Promise.all([member(node), member(node)]);
  const made = await node.services.chats.createDirect([a.user.id, b.user.id], ['rooms']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  return { a, b, chatId: made.chat.id };
};
const statsOf = async (node: TestApp) =>
  (await new Client(node.url, undefined, node.publicApiKey).get('/v1/statistics/chats')).body;

/** A gate a held call waits at: `atGate` settles when one arrives, `open` lets it (and any later one) through. */
function gate() {
  let open = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  let reached = () => {};
  const atGate = new Promise<void>((resolve) => {
    reached = resolve;
  });
  return {
    atGate,
    open,
    wait: async () => {
      reached();
      await opened;
    },
  };
}

/**
 * Holds the node's next start of the chat's room at its first look at the room map, right after
 * its checks of the chat, as a slow store round trip would; `release` lets it go on.
 */
function holdStart(node: TestApp, chatId: number) {
  const state = node.state;
  const get = state.get;
  const g = gate();
  let held = false;
  state.get = async (key: string) => {
    if (key === `vm:room:${chatId}` && !held) {
      held = true;
      await g.wait();
    }
    return get.call(state, key);
  };
  return {
    atGate: g.atGate,
    release: () => {
      state.get = get;
      g.open();
    },
  };
}

/**
 * Holds the node's write marking the chat's room running (its launch, once the browser is up):
 * the room stays between its browser launch and its running mark until `release`.
 */
function holdRunningMark(node: TestApp, chatId: number) {
  const state = node.state;
  const replaceIf = state.replaceIf;
  const g = gate();
  state.replaceIf = async (key: string, expected: string, value: string, ttl: number) => {
    if (key === `vm:room:${chatId}` && JSON.parse(value).state === 'running') await g.wait();
    return replaceIf.call(state, key, expected, value, ttl);
  };
  return {
    atGate: g.atGate,
    release: () => {
      state.replaceIf = replaceIf;
      g.open();
    },
  };
}

/**
 * Holds the first `n` reads of the chat's room map entry, on any of the nodes, until all `n` have
 * arrived: `n` starts asked at once each read the room as running nowhere before any claims it.
 * `restore` puts the stores' reads back.
 */
function readTogether(nodes: TestApp[], chatId: number, n: number) {
  let arrived = 0;
  let open = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  const restores = [...new Set(nodes.map((node) => node.state))].map((state) => {
    const get = state.get;
    state.get = async (key: string) => {
      if (key === `vm:room:${chatId}` && arrived < n) {
        arrived += 1;
        if (arrived === n) open();
        await opened;
      }
      return get.call(state, key);
    };
    return () => {
      state.get = get;
    };
  });
  return {
    restore: () => {
      for (const r of restores) r();
    },
  };
}

beforeAll(async () => {
  site = await startTestSite();
  app = await startApp({ config: { vmAllowPrivateNetworks: true, vmMaxPerNode: 3, vmIdleTimeoutSeconds: 60 } });
  [owner, carol] = await Promise.all([member(app, { level: 2 }), member(app)]);
});

afterAll(async () => {
  closeAllSockets();
  await app?.close();
  await site?.close();
});

describeApp('room VM of an archived direct chat', () => {
  it('refuses to start it: 403 ERR_CHAT_READ_ONLY for either member, and launches nothing', async () => {
    const { a, b, chatId } = await directChat();
    expect((await a.client.post('/v1/portal/match/leave', { chat_id: chatId })).body).toEqual({
      ok: true,
      chat_id: chatId,
    });
    for (const m of [a, b]) {
      const res = await m.client.post(`/v1/portal/chats/${chatId}/start`, {});
      expect(res.status).toBe(403);
      expect(res.body).toMatchObject({ code: 'ERR_CHAT_READ_ONLY', message: expect.any(String) });
    }
    expect(app.services.vm.isRunning(chatId)).toBe(false);
    expect(app.vmProvider.status(String(chatId))).toBeNull();
    // A stranger to the chat is refused as before: not the chat's to start.
    const res = await carol.client.post(`/v1/portal/chats/${chatId}/start`, {});
    expect(res.body.code).toBe('ERR_FORBIDDEN');
  });
});

describeApp('a room VM still starting', () => {
  it('is not running: a member joining gets no room:started nor credentials, no active browser is counted; a stop calls the start off at once', async () => {
    // A browser that never becomes ready: the room stays starting until the stop.
    const browser = stalledBrowser();
    const stalled = await startApp({ config: { chromiumPath: browser.path, vmAllowPrivateNetworks: true } });
    let members: Member[] = [];
    try {
      members = await Promise.all([member(stalled, { level: 2 }), member(stalled)]);
      const [a, b] = members as [Member, Member];
      const created = await a.client.post('/v1/portal/chats/create', { name: 'Starting', type: 'public' });
      const chatId = created.body.chat.id as number;
      expect((await join(a, { chat_id: chatId })).ok).toBe(true);
      const start = a.client.post(`/v1/portal/chats/${chatId}/start`, {});
      const pid = (await eventually(() => browser.pid(), WAIT_MS, 'the browser to start')) as number;

      expect((await join(b, { chat_id: chatId })).ok).toBe(true);
      expect(await ack(b, 'vm:credentials', { chat_id: chatId })).toMatchObject({
        ok: false,
        code: 'ERR_ROOM_NOT_RUNNING',
      });
      expect(stalled.services.vm.isRunning(chatId)).toBe(false);
      // Its browser process is up, but the room does not run (docs/api.md, Statistics).
      expect(await statsOf(stalled)).toEqual({ active_browsers: 0, viewers: 0, controllers: 0 });

      expect((await a.client.post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(200);
      const res = await start;
      expect(res.status).toBe(503);
      expect(res.body).toEqual({
        code: 'ERR_ROOM_START_FAILED',
        message: 'The room start was called off: the room was stopped or this node is shutting down.',
      });
      expect(alive(pid)).toBe(false);
      expect(await stalled.state.get(`vm:room:${chatId}`)).toBeNull();
      // A round trip on each socket: whatever the server sent them arrived before its answer. The
      // room never ran, so nobody was told it started (nor, then, that it stopped).
      for (const m of [a, b]) {
        expect((await ack(m, 'vm:credentials', { chat_id: chatId })).code).toBe('ERR_ROOM_NOT_RUNNING');
        expect(m.socket.received.filter((r) => r.event.startsWith('room:s'))).toEqual([]);
      }
    } finally {
      for (const m of members) m.socket.close();
      await stalled.close();
      browser.remove();
    }
  });
});

describeApp('a room VM started while its stop is finishing', () => {
  it('runs the new start after the stop: members hear room:stopped, then room:started, and the room stays placed', async () => {
    // A provider without browsers, whose first stop finishes when the test says (a browser slow to exit).
    const provider = app.vmProvider;
    const original = { start: provider.start, stop: provider.stop };
    let exit = () => {};
    const exited = new Promise<void>((r) => {
      exit = r;
    });
    let stops = 0;
    provider.start = async (roomId, spec) => ({
      roomId,
      state: 'running',
      width: spec.width,
      height: spec.height,
      startedAt: new Date(),
      restarts: 0,
    });
    provider.stop = async () => {
      stops += 1;
      if (stops === 1) await exited;
    };
    const chatId = await createChat(owner, 'Stop then start');
    try {
      for (const m of [owner, carol]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
      await carol.socket.next('room:started', (p) => p.chat_id === chatId);

      const stop = owner.client.post(`/v1/portal/chats/${chatId}/stop`, {});
      await eventually(() => stops === 1, WAIT_MS, 'the stop under way');
      const start = owner.client.post(`/v1/portal/chats/${chatId}/start`, {});
      // The start waits for the stop (it does not answer while the old browser exits); give it
      // the time to get there before the old browser is let go.
      await Promise.race([start, new Promise((r) => setTimeout(r, 2000))]);
      exit();
      expect((await stop).status).toBe(200);
      expect((await start).status).toBe(200);

      const heard = () =>
        carol.socket.received
          .filter((r) => ['room:started', 'room:stopped'].includes(r.event) && r.payload.chat_id === chatId)
          .map((r) => r.event);
      await eventually(() => heard().length >= 3, WAIT_MS, 'room:stopped and room:started');
      expect(heard()).toEqual(['room:started', 'room:stopped', 'room:started']);
      expect(app.services.vm.isRunning(chatId)).toBe(true);
      expect(JSON.parse((await app.state.get(`vm:room:${chatId}`)) as string)).toMatchObject({ state: 'running' });
      expect((await ack(carol, 'vm:credentials', { chat_id: chatId })).ok).toBe(true);
    } finally {
      exit();
      await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {});
      Object.assign(provider, original);
    }
  });
});

describeApp('room VMs on two nodes (one in embedded mode), without browsers', () => {
  let nodes: Nodes;
  let launchedOn: { a: string[]; b: string[] };

  beforeAll(async () => {
    nodes = await startNodes();
    launchedOn = { a: withoutBrowsers(nodes.a).launched, b: withoutBrowsers(nodes.b).launched };
  });
  afterAll(async () => {
    await nodes?.close();
  });

  /** Nothing was launched for the chat on either node, and its room runs and is placed nowhere. */
  const nothingRuns = async (chatId: number) => {
    expect([...launchedOn.a, ...launchedOn.b]).not.toContain(String(chatId));
    for (const node of [nodes.a, nodes.b]) expect(node.services.vm.isRunning(chatId)).toBe(false);
    expect(await nodes.a.state.get(`vm:room:${chatId}`)).toBeNull();
  };

  it('answers 404 ERR_CHAT_NOT_FOUND to a start whose chat is deleted (on another node) before it holds the room, and launches nothing', async () => {
    const { a, b } = nodes;
    const owner = await member(a, { level: 2 });
    try {
      const created = await owner.client.post('/v1/portal/chats/create', {
        name: 'Deleted while starting',
        type: 'public',
      });
      const chatId = created.body.chat.id as number;
      const hold = holdStart(a, chatId);
      const start = owner.client.post(`/v1/portal/chats/${chatId}/start`, {});
      await hold.atGate;
      // The deletion's own stop of the room finds nothing: the start has not claimed it yet.
      const deleted = await owner.client.on(b).post(`/v1/portal/chats/${chatId}/delete`, {});
      expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
      hold.release();
      const res = await start;
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 404, code: 'ERR_CHAT_NOT_FOUND' });
      await nothingRuns(chatId);
    } finally {
      owner.socket.close();
    }
  });

  it('answers 403 ERR_CHAT_READ_ONLY to a start whose direct chat is archived (on another node) before it holds the room, and launches nothing', async () => {
    const { a: x, b: y, chatId } = await directChat(nodes.a);
    try {
      // Both sockets are in the chat's room (in the cluster their joins come through Redis), and
      // the room map reads of those joins are made: the next read is the start's.
      const inRoom = () => nodes.a.services.realtime.io.of('/').adapter.rooms.get(`chat:${chatId}`)?.size;
      await eventually(() => inRoom() === 2, WAIT_MS, 'both members in the chat’s room');
      const hold = holdStart(nodes.a, chatId);
      const start = x.client.post(`/v1/portal/chats/${chatId}/start`, {});
      await hold.atGate;
      const left = await y.client.on(nodes.b).post('/v1/portal/match/leave', { chat_id: chatId });
      expect(left.body).toEqual({ ok: true, chat_id: chatId });
      hold.release();
      const res = await start;
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'ERR_CHAT_READ_ONLY' });
      await nothingRuns(chatId);
      expect(x.socket.received.filter((r) => r.event === 'room:started')).toEqual([]);
    } finally {
      for (const m of [x, y]) m.socket.close();
    }
  });

  it('two starts of a stopped room at once (one on each node) launch it once and spend one start: the other gives its start back', async () => {
    const { a, b } = nodes;
    const owner = await member(a, { level: 2 });
    const start = (node: TestApp = a) => owner.client.on(node).post(`/v1/portal/chats/${chatId}/start`, {});
    const stop = () => owner.client.post(`/v1/portal/chats/${chatId}/stop`, {});
    const chatId = await createChat(owner, 'Started twice at once');
    try {
      const reads = readTogether([a, b], chatId, 2);
      const both = await Promise.all([start(a), start(b)]);
      reads.restore();
      expect(both.map((r) => r.status)).toEqual([200, 200]);
      expect([...launchedOn.a, ...launchedOn.b].filter((id) => id === String(chatId))).toHaveLength(1);
      // One browser launched, one start spent: the user has all the others left, and no more.
      for (let i = 2; i <= Limits.ROOM_STARTS_PER_USER; i++) {
        expect((await stop()).status).toBe(200);
        expect((await start()).status, `start ${i} of ${Limits.ROOM_STARTS_PER_USER}`).toBe(200);
      }
      expect((await stop()).status).toBe(200);
      expect((await start()).body.code).toBe('ERR_RATE_LIMITED');
    } finally {
      await stop();
      owner.socket.close();
    }
  });

  it('pushes room:started to a recovered connection (onto the other node) for each chat it is still in whose VM runs', async () => {
    const { a, b } = nodes;
    const owner = await member(a, { level: 2 });
    const m = await member(a);
    m.socket.close(); // member() connects a socket of its own; this test watches only `socket`.
    const names = ['Runs', 'Kicked while away', 'Kicked during the handshake', 'Not started'];
    const [runs, keptAway, kickedDuring, idle] = (await Promise.all(
      names.map(
        async (name) =>
          (
            await owner.client.post('/v1/portal/chats/create', { name, type: 'public' })
          ).body.chat.id as number,
      ),
    )) as [number, number, number, number];
    const socket = io(a.url, {
      transports: ['websocket'],
      extraHeaders: { cookie: `psession=${m.client.cookie}` },
      reconnection: false,
      forceNew: true,
    });
    const started: { chat_id: number; credentials: { token: string } }[] = [];
    socket.on('room:started', (p) => started.push(p));
    const startedIn = (chatId: number) => started.filter((p) => p.chat_id === chatId).length;
    /** Armed: the recovered socket's handshake waits while its kick from `kickedDuring` commits (after the recovery check). */
    let kickInHandshake = false;
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', () => resolve());
        socket.once('connect_error', reject);
      });
      for (const chatId of [runs, keptAway, kickedDuring, idle])
        expect((await socket.emitWithAck('room:join', { chat_id: chatId })).ok).toBe(true);
      for (const chatId of [runs, keptAway, kickedDuring])
        expect((await owner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
      // Each push also gives the client its recovery offset.
      await eventually(() => started.length === 3, WAIT_MS, 'room:started of the three rooms');
      expect(await statsOf(a)).toEqual({ active_browsers: 3, viewers: 0, controllers: 0 });

      // The transport drops (not a clean disconnect): the session is kept for recovery.
      const down = new Promise<void>((resolve) => socket.once('disconnect', () => resolve()));
      socket.io.engine.close();
      await down;
      const kick = (chatId: number) => owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: m.user.id });
      expect((await kick(keptAway)).status).toBe(200);
      kickInHandshake = true;
      b.services.realtime.io.use((s, next) => {
        if (!kickInHandshake || !s.recovered || s.data.userId !== m.user.id) return next();
        kickInHandshake = false;
        kick(kickedDuring).then((res) => next(res.status === 200 ? undefined : new Error(`kick: ${res.status}`)), next);
      });
      // The load balancer sends the client to the other node (in embedded mode, the same one).
      (socket.io as unknown as { uri: string }).uri = b.url;
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', () => resolve());
        socket.once('connect_error', reject);
        socket.connect();
      });
      expect(socket.recovered).toBe(true);
      expect(kickInHandshake).toBe(false);

      await eventually(() => startedIn(runs) === 2, WAIT_MS, 'room:started on the recovered connection');
      // A round trip on the socket, and a moment: any other push would have arrived with that one.
      expect((await socket.emitWithAck('vm:credentials', { chat_id: runs })).ok).toBe(true);
      await new Promise((r) => setTimeout(r, 300));
      expect({
        runs: startedIn(runs),
        keptAway: startedIn(keptAway),
        kickedDuring: startedIn(kickedDuring),
        idle: startedIn(idle),
      }).toEqual({ runs: 2, keptAway: 1, kickedDuring: 1, idle: 0 });
      // Its own user's credentials for the chat.
      expect(started.at(-1)?.credentials.token.startsWith(`${runs}.${m.user.id}.`)).toBe(true);
    } finally {
      kickInHandshake = false;
      socket.close();
      for (const chatId of [runs, keptAway, kickedDuring])
        await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {});
      owner.socket.close();
    }
  });

  it('a room whose browser is up but whose running mark is not written is still starting: credentials and watch refused on either node, no browser counted; a stop calls it off and nobody hears of it', async () => {
    const { a, b } = nodes;
    const [owner, carol, dave] = await Promise.all([member(a, { level: 2 }), member(a), member(b)]);
    const stopsAsked: string[] = [];
    const stopBrowser = a.vmProvider.stop;
    a.vmProvider.stop = async (roomId) => {
      stopsAsked.push(roomId);
      return stopBrowser.call(a.vmProvider, roomId);
    };
    try {
      const chatId = await createChat(owner, 'Launched, not yet running');
      for (const m of [owner, carol, dave]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
      const held = holdRunningMark(a, chatId);
      const start = owner.client.post(`/v1/portal/chats/${chatId}/start`, {});
      await held.atGate;
      // Its browser is up (in embedded mode both arrays are the one node's).
      expect([...launchedOn.a, ...launchedOn.b]).toContain(String(chatId));
      // A valid token (as one handed out earlier would be): the watch is refused on the room, not the token.
      const token = makeViewerTokens(viewerTokenKey(a.config.operatorToken as string)).issue({
        chatId,
        userId: carol.user.id,
        expiresAt: new Date(Date.now() + 60_000),
      });
      const notRunning = { ok: false, code: 'ERR_ROOM_NOT_RUNNING' };
      for (const m of [carol, dave])
        expect(await ack(m, 'vm:credentials', { chat_id: chatId })).toMatchObject(notRunning);
      expect(await ack(carol, 'vm:watch', { chat_id: chatId, token })).toMatchObject(notRunning);
      for (const node of [a, b]) {
        expect(node.services.vm.isRunning(chatId)).toBe(false);
        expect(await statsOf(node)).toEqual({ active_browsers: 0, viewers: 0, controllers: 0 });
      }

      // The owner stops the room; once the stop has reached its browser, the running mark is let go.
      const stop = owner.client.post(`/v1/portal/chats/${chatId}/stop`, {});
      await eventually(() => stopsAsked.includes(String(chatId)), WAIT_MS, 'the stop at the browser');
      held.release();
      const res = await start;
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 503, code: 'ERR_ROOM_START_FAILED' });
      expect((await stop).status).toBe(200);
      for (const node of [a, b]) expect(node.services.vm.isRunning(chatId)).toBe(false);
      expect(await a.state.get(`vm:room:${chatId}`)).toBeNull();
      // A round trip on each socket: whatever the server sent them arrived before its answer. The
      // room never ran, so nobody was told it started, nor then that it stopped.
      for (const m of [owner, carol, dave]) {
        expect((await ack(m, 'vm:credentials', { chat_id: chatId })).code).toBe('ERR_ROOM_NOT_RUNNING');
        expect(m.socket.received.filter((r) => r.event.startsWith('room:s'))).toEqual([]);
      }
    } finally {
      a.vmProvider.stop = stopBrowser;
      for (const m of [owner, carol, dave]) m.socket.close();
    }
  });
});

describeApp('control requests of a room VM on two nodes (one in embedded mode), without browsers', () => {
  /** The nodes' clock: real time, or while set, this instant (moved by hand to a request window's end). */
  let frozenAt: number | null = null;
  let nodes: Nodes;

  beforeAll(async () => {
    nodes = await startNodes({ clock: { now: () => new Date(frozenAt ?? Date.now()) } });
    withoutBrowsers(nodes.a);
    withoutBrowsers(nodes.b);
  });
  afterAll(async () => {
    await nodes?.close();
  });

  it('announces a member’s request to the chat once while it is pending: repeats from any node answer alike and reach nobody; at the window’s end or after a hand-over it goes out again', async () => {
    const { a, b } = nodes;
    const [owner, holder, asker, bystander] = await Promise.all([
      member(a, { level: 2 }),
      member(a),
      member(b),
      member(b),
    ]);
    const second = await connectSocket(a.url, asker.client);
    try {
      const chatId = await createChat(owner, 'Raised hands');
      for (const m of [owner, holder, asker, bystander]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
      expect(((await second.emitWithAck('room:join', { chat_id: chatId } as never)) as { ok: boolean }).ok).toBe(true);
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
      expect(await ack(holder, 'vm:control:request', { chat_id: chatId })).toMatchObject({ granted: true });

      const ask = () => ack(asker, 'vm:control:request', { chat_id: chatId });
      const askOnA = () => second.emitWithAck('vm:control:request', { chat_id: chatId } as never) as Promise<any>;
      const pending = (controller: number) => ({ ok: true, granted: false, controller_user_id: controller });
      const audience = [owner, holder, bystander];
      const count = (m: Member, event: string, match: (p: any) => boolean) =>
        m.socket.received.filter((r) => r.event === event && match(r.payload)).length;
      /** How many of the asker's requests reached each member of the chat (on both nodes). */
      const heard = () => audience.map((m) => count(m, 'vm:control:request', (p) => p.user_id === asker.user.id));
      const heardBy = (n: number) => eventually(() => heard().every((c) => c >= n), WAIT_MS, `${n} announcements`);
      /**
       * Runs a hand-over and waits until every member has heard its vm:control: each socket hears
       * the chat's events in the order the room's node emits them, so every announcement made
       * before the hand-over has arrived by then.
       */
      const handOver = async (act: () => Promise<any>) => {
        const changes = (m: Member) => count(m, 'vm:control', (p) => p.chat_id === chatId);
        const before = audience.map(changes);
        expect((await act()).ok).toBe(true);
        await eventually(() => audience.every((m, i) => changes(m) > (before[i] ?? 0)), WAIT_MS, 'vm:control');
      };

      frozenAt = Date.now();
      expect(await ask()).toEqual(pending(holder.user.id));
      await heardBy(1);
      // Repeats on both nodes, at once and up to the window's last millisecond: each is answered.
      const repeats = await Promise.all([...Array.from({ length: 20 }, ask), ...Array.from({ length: 20 }, askOnA)]);
      for (const r of repeats) expect(r).toEqual(pending(holder.user.id));
      frozenAt += CONTROL_REQUEST_REPEAT_MS - 1;
      expect(await askOnA()).toEqual(pending(holder.user.id));
      // At the window's end the request goes out again.
      frozenAt += 1;
      expect(await ask()).toEqual(pending(holder.user.id));
      await heardBy(2);
      await handOver(() => ack(owner, 'vm:control:grant', { chat_id: chatId, user_id: bystander.user.id }));
      expect(heard()).toEqual([2, 2, 2]);

      // The grant answered the pending request: the next one is announced at once, once.
      expect(await askOnA()).toEqual(pending(bystander.user.id));
      expect(await ask()).toEqual(pending(bystander.user.id));
      await handOver(() => ack(bystander, 'vm:control:release', { chat_id: chatId }));
      expect(heard()).toEqual([3, 3, 3]);

      // So does a release: nobody holds control, and the request takes it.
      expect(await ask()).toEqual({ ok: true, granted: true, controller_user_id: asker.user.id });
      await handOver(() => ack(asker, 'vm:control:release', { chat_id: chatId }));
      await handOver(() => ack(holder, 'vm:control:request', { chat_id: chatId }));
      expect(await ask()).toEqual(pending(holder.user.id));
      await handOver(() => ack(owner, 'vm:control:grant', { chat_id: chatId, user_id: owner.user.id }));
      expect(heard()).toEqual([4, 4, 4]);
      await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {});
    } finally {
      frozenAt = null;
      second.close();
      for (const m of [owner, holder, asker, bystander]) m.socket.close();
    }
  });

  it('two members asking for a free room at once: one takes control, the other’s request is announced once and stays pending (its repeat reaches nobody)', async () => {
    const { a, b } = nodes;
    const [owner, x, y, bystander] = await Promise.all([member(a, { level: 2 }), member(a), member(b), member(b)]);
    // The room's node checks memberships slowly: both requests are being checked at once.
    const chats = a.services.chats;
    const assertMember = chats.assertMember;
    try {
      const chatId = await createChat(owner, 'Two hands at once');
      for (const m of [owner, x, y, bystander]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
      chats.assertMember = async (...args) => {
        await new Promise((r) => setTimeout(r, 150));
        return assertMember.apply(chats, args);
      };
      const [rx, ry] = await Promise.all([
        ack(x, 'vm:control:request', { chat_id: chatId }),
        ack(y, 'vm:control:request', { chat_id: chatId }),
      ]);
      chats.assertMember = assertMember;
      const [winner, loser] = rx.granted ? [x, y] : [y, x];
      expect([rx, ry]).toEqual(
        [x, y].map((m) =>
          m === winner
            ? { ok: true, granted: true, controller_user_id: winner.user.id }
            : { ok: true, granted: false, controller_user_id: winner.user.id },
        ),
      );
      const heard = () =>
        bystander.socket.received.filter(
          (r) =>
            r.event === 'vm:control:request' && r.payload.chat_id === chatId && r.payload.user_id === loser.user.id,
        ).length;
      await eventually(() => heard() === 1, WAIT_MS, 'the loser’s request announced');
      // At once, well within the window: the same answer, and no second announcement.
      expect(await ack(loser, 'vm:control:request', { chat_id: chatId })).toEqual({
        ok: true,
        granted: false,
        controller_user_id: winner.user.id,
      });
      // A round trip on the bystander's socket: an announcement sent before its answer has arrived.
      expect((await ack(bystander, 'vm:credentials', { chat_id: chatId })).ok).toBe(true);
      expect(heard()).toBe(1);
      expect(
        bystander.socket.received.filter(
          (r) => r.event === 'vm:control:request' && r.payload.user_id === winner.user.id,
        ),
      ).toEqual([]);
      await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {});
    } finally {
      chats.assertMember = assertMember;
      for (const m of [owner, x, y, bystander]) m.socket.close();
    }
  });
});

describeApp('room VM rights decided on the caller’s level as stored, without browsers', () => {
  // The app's clock stands still: no cached session reaches its TTL, so only the stored level can refuse.
  let node: TestApp;
  let launched: string[];
  beforeAll(async () => {
    node = await startApp({ clock: new FakeClock(Date.now()) });
    ({ launched } = withoutBrowsers(node));
  });
  afterAll(async () => {
    await node?.close();
  });

  const storeLevel = (m: Member, level: number) =>
    node.database.db.execute(`update users set permission_level = ${level} where id = ${m.user.id}` as never);
  /** A member at `level` as its session and socket read it, moved to `stored` behind the node's session cache. */
  const demoted = async (level: number, stored: number): Promise<Member> => {
    const m = await member(node, { level });
    expect((await m.client.get('/v1/users/me')).body.user.permission_level).toBe(level);
    await storeLevel(m, stored);
    // The session still reads the old level: the cache has not heard of the write.
    expect((await m.client.get('/v1/users/me')).body.user.permission_level).toBe(level);
    return m;
  };
  /** A public chat of a new member (an Admin, who creates it, then a User as stored), its room running on records. */
  const runningRoom = async () => {
    const chatOwner = await member(node, { level: 2 });
    const chatId = await createChat(chatOwner, 'Stored levels');
    await storeLevel(chatOwner, 0);
    expect((await join(chatOwner, { chat_id: chatId })).ok).toBe(true);
    expect((await chatOwner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
    return { chatOwner, chatId };
  };
  const refused = (res: { status: number; body: any }) => [res.status, res.body.code];

  it('an Admin demoted to User is refused POST …/stop of a chat it neither owns nor is in', async () => {
    const { chatId } = await runningRoom();
    const actor = await demoted(2, 0);
    expect(refused(await actor.client.post(`/v1/portal/chats/${chatId}/stop`, {}))).toEqual([403, 'ERR_FORBIDDEN']);
    expect(node.services.vm.isRunning(chatId)).toBe(true);
    actor.socket.close();
  });

  it('an Owner demoted to Admin is refused POST …/start of a chat it does not own; nothing launches', async () => {
    const chatOwner = await member(node, { level: 2 });
    const chatId = await createChat(chatOwner, 'Not started');
    const actor = await demoted(3, 2);
    expect(refused(await actor.client.post(`/v1/portal/chats/${chatId}/start`, {}))).toEqual([403, 'ERR_FORBIDDEN']);
    expect(launched).not.toContain(String(chatId));
    expect(node.services.vm.isRunning(chatId)).toBe(false);
    for (const m of [chatOwner, actor]) m.socket.close();
  });

  it('a Moderator demoted to User hands no control over and takes none back (vm:control:grant, vm:control:release)', async () => {
    const { chatOwner, chatId } = await runningRoom();
    const [holder, other] = await Promise.all([member(node), member(node)]);
    const actor = await demoted(1, 0);
    for (const m of [holder, other, actor]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    expect(await ack(holder, 'vm:control:request', { chat_id: chatId })).toMatchObject({ granted: true });
    expect(await ack(actor, 'vm:control:grant', { chat_id: chatId, user_id: other.user.id })).toMatchObject({
      ok: false,
      code: 'ERR_FORBIDDEN',
    });
    expect(await ack(actor, 'vm:control:release', { chat_id: chatId })).toMatchObject({
      ok: false,
      code: 'ERR_FORBIDDEN',
    });
    // Control stayed with the holder: the demoted Moderator's request is only announced.
    expect(await ack(actor, 'vm:control:request', { chat_id: chatId })).toMatchObject({
      granted: false,
      controller_user_id: holder.user.id,
    });
    // The chat's owner (a User as stored) hands it over: its level is not what decides.
    expect((await ack(chatOwner, 'vm:control:grant', { chat_id: chatId, user_id: other.user.id })).ok).toBe(true);
    for (const m of [chatOwner, holder, other, actor]) m.socket.close();
  });
});

describeBrowser('room VM lifecycle (real Chromium)', () => {
  it('archiving a direct chat stops its room: on a leave and in the expiry sweep (room:stopped, reason stopped)', async () => {
    for (const archive of ['leave', 'sweep'] as const) {
      const { a, b, chatId } = await directChat();
      await startAndWatch(a, b, chatId);
      const pid = app.vmProvider.pidOf(String(chatId)) as number;
      if (archive === 'leave') expect((await b.client.post('/v1/portal/match/leave', {})).status).toBe(200);
      else {
        const c = schema.chats;
        await app.database.db
          .update(c)
          .set({ expiresAt: new Date(Date.now() - 1000) })
          .where(eq(c.id, chatId));
        await app.services.chats.sweepDirect();
      }
      expect((await a.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(true);
      for (const m of [a, b])
        expect(await m.socket.next('room:stopped', (p) => p.chat_id === chatId), archive).toEqual({
          chat_id: chatId,
          reason: 'stopped',
        });
      expect(app.services.vm.isRunning(chatId)).toBe(false);
      expect(app.vmProvider.status(String(chatId))).toBeNull();
      await eventually(() => !alive(pid), WAIT_MS, 'the browser gone');
      expect((await a.client.post(`/v1/portal/chats/${chatId}/start`, {})).body.code).toBe('ERR_CHAT_READ_ONLY');
    }
  });

  it('deleting a chat stops its room: viewers get room:stopped (deleted), the browser and its profile are gone', async () => {
    const chatId = await createChat(owner, 'Deleted with its room');
    for (const m of [owner, carol]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    await startAndWatch(owner, carol, chatId);
    const pid = app.vmProvider.pidOf(String(chatId)) as number;
    const profile = app.vmProvider.profileOf(String(chatId)) as string;
    expect(existsSync(profile)).toBe(true);

    expect((await owner.client.post(`/v1/portal/chats/${chatId}/delete`, {})).status).toBe(200);
    expect(await carol.socket.next('room:stopped', (p) => p.chat_id === chatId)).toEqual({
      chat_id: chatId,
      reason: 'deleted',
    });
    // The viewers hear it at once; the room's stop runs after (in the cluster it first marks the
    // room map entry stopping, a round trip to Redis, before it kills the browser).
    await eventually(
      () => !app.services.vm.isRunning(chatId) && app.vmProvider.status(String(chatId)) === null,
      WAIT_MS,
      'the room stopped',
    );
    await eventually(() => !alive(pid) && !existsSync(profile), WAIT_MS, 'browser and profile gone');
    const again = await owner.client.post(`/v1/portal/chats/${chatId}/start`, {});
    expect(again.body.code).toBe('ERR_CHAT_NOT_FOUND');
  });

  it('ends a banned member’s stream at once, drops their control, and refuses them credentials', async () => {
    const chatId = await createChat(owner, 'Ban ends the stream');
    for (const m of [owner, carol]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    const carolWatch = await startAndWatch(owner, carol, chatId);
    const ownerWatch = await startAndWatch(owner, owner, chatId);
    expect((await ack(carol, 'vm:control:request', { chat_id: chatId })).granted).toBe(true);

    const banned = await owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: carol.user.id });
    expect(banned.status, JSON.stringify(banned.body)).toBe(200);
    await carol.socket.next('room:left', (p) => p.chat_id === chatId && p.reason === 'banned');
    await owner.socket.next('vm:control', (p) => p.chat_id === chatId && p.controller_user_id === null);
    const carolFrames = carolWatch.frames.length;
    const ownerFrames = ownerWatch.frames.length;
    // The page changes: the owner sees it, carol gets nothing more.
    expect((await ack(owner, 'vm:control:request', { chat_id: chatId })).granted).toBe(true);
    expect((await ack(owner, 'vm:input', { chat_id: chatId, kind: 'navigate', url: site.url('/page2') })).ok).toBe(
      true,
    );
    await eventually(() => ownerWatch.frames.length > ownerFrames, WAIT_MS, 'the owner’s next frame');
    await new Promise((r) => setTimeout(r, 300));
    expect(carolWatch.frames.length).toBe(carolFrames);
    expect(await ack(carol, 'vm:credentials', { chat_id: chatId })).toMatchObject({ code: 'ERR_NOT_CHAT_MEMBER' });
    expect(await ack(carol, 'vm:input', { chat_id: chatId, kind: 'text', text: 'x' })).toMatchObject({ ok: false });
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(200);
  });

  it('removes the profile of a crashed browser, and of the restarted one when the room stops', async () => {
    const chatId = await createChat(owner, 'Crash profile');
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
    const first = {
      pid: app.vmProvider.pidOf(String(chatId)) as number,
      dir: app.vmProvider.profileOf(String(chatId)),
    };
    expect(first.dir && existsSync(first.dir)).toBe(true);
    process.kill(first.pid, 'SIGKILL');
    const second = await eventually(() => {
      const dir = app.vmProvider.profileOf(String(chatId));
      return app.vmProvider.status(String(chatId))?.state === 'running' && dir !== first.dir ? dir : undefined;
    });
    await eventually(() => !existsSync(first.dir as string), WAIT_MS, 'the crashed browser’s profile removed');
    expect(existsSync(second as string)).toBe(true);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(200);
    expect(existsSync(second as string)).toBe(false);
  });

  it('the owner of a guild runs the room of the guild’s public chat; other members do not', async () => {
    const bot = (await createBot(app)).client;
    const guildId = `${Date.now()}${Math.floor(Math.random() * 1000)}`;
    const ownerIdentity = `${Date.now() + 1}`;
    const up = await bot.post(`/v1/bot/guilds/${guildId}`, {
      name: 'Room guild',
      member_count: 3,
      owner_chatplatform_id: ownerIdentity,
    });
    expect(up.status, JSON.stringify(up.body)).toBe(200);
    expect((await operator(app).post(`/v1/admin/guilds/${guildId}/premium`, { days: 30 })).status).toBe(200);
    const guildOwner = await member(app, { platformUserId: ownerIdentity });
    const set = await guildOwner.client.request('PUT', `/v1/guilds/${guildId}/vanity`, {
      body: { vanity_invite: `room-${Date.now().toString(36)}` },
    });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    const chatId = set.body.chat_id as number;
    for (const m of [guildOwner, carol]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);

    const refused = await carol.client.post(`/v1/portal/chats/${chatId}/start`, {});
    expect(refused.status).toBe(403);
    expect((await guildOwner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
    await carol.socket.next('room:started', (p) => p.chat_id === chatId);
    // As the chat's owner, the guild owner hands control over and stops the room.
    expect((await ack(guildOwner, 'vm:control:grant', { chat_id: chatId, user_id: carol.user.id })).ok).toBe(true);
    expect((await carol.client.post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(403);
    expect((await guildOwner.client.post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(200);
    // Banned from the guild's chat, the guild owner no longer runs its room.
    const banned = await owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: guildOwner.user.id });
    expect(banned.status, JSON.stringify(banned.body)).toBe(200);
    for (const action of ['start', 'stop']) {
      const res = await guildOwner.client.post(`/v1/portal/chats/${chatId}/${action}`, {});
      expect(res.status, action).toBe(403);
      expect(res.body.code).toBe('ERR_FORBIDDEN');
    }
    expect(app.vmProvider.status(String(chatId))?.state ?? 'stopped').toBe('stopped');
  });

  it('a killed server leaves no browser behind, and the next one removes the profile it left', async () => {
    const fixture = path.resolve(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/vm-orphan.mjs');
    // Its own temporary folder: the other suites' servers, starting meanwhile, sweep the shared one.
    // Open to all like /tmp: run as root, the provider starts the browser as an unprivileged user.
    const tmp = mkdtempSync(path.join(tmpdir(), 'parlor-orphan-'));
    chmodSync(tmp, 0o1777);
    const child = spawn(process.execPath, [fixture, CHROMIUM], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, TMPDIR: tmp },
    });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    const line = await eventually(() => out.split('\n')[0]?.trim() || undefined, 30_000, 'the fixture’s browser');
    const { pid, profile } = JSON.parse(line as string) as { pid: number; profile: string };
    expect(alive(pid)).toBe(true);
    expect(profile).toContain(`parlor-vm-${child.pid}-`);
    const reaped = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGKILL'); // no shutdown path runs: only the closed DevTools pipe tells the browser
    await eventually(() => livingInSession(pid) === 0, WAIT_MS, 'the browser and its children gone');
    // Until this process has reaped it, the killed server is a zombie whose pid still answers a
    // signal check: its profile would look owned by a live server.
    await reaped;
    // The next server's provider sweeps profiles whose server is gone, and only those.
    expect(path.dirname(profile)).toBe(tmp);
    const mine = path.join(tmp, `parlor-vm-${process.pid}-keep`);
    mkdirSync(mine, { recursive: true });
    expect(await removeStaleProfiles(tmp)).toBe(1);
    expect(existsSync(profile)).toBe(false);
    expect(existsSync(mine)).toBe(true);
    execFileSync('rm', ['-rf', tmp]);
  });
});
