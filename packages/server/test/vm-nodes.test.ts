import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { buildApp } from '../src/app.js';
import { PLACE_TTL_MS } from '../src/modules/vm/vm.cluster.js';
import type { Caller } from '../src/modules/vm/vm.service.js';
import { type Backing, createBacking, MODE, type Nodes, startApp, startNodes, type TestApp } from './support/app.js';
import { join, type Member, member } from './support/chat-flows.js';
import { Client } from './support/client.js';
import { captureLog, LEVEL } from './support/logs.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';
import {
  autoAck,
  BROWSER_TEST_TIMEOUT_MS,
  browserAvailable,
  describeBrowser,
  eventually,
  startTestSite,
  WAIT_MS,
  withoutBrowsers,
} from './support/vm-browser.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/**
 * A room VM used from two nodes over one PostgreSQL + Redis: it runs on the node that started it
 * (A); members connected to B get credentials, watch (frames relayed once per frame through
 * Redis), take control and click, and stop it; kick, stop, crash and idle clean the room map.
 */
const run = MODE === 'cluster' && browserAvailable;
let backing: Backing;
let a: TestApp;
let b: TestApp;
/** What A logs (a failure serving B's requests is logged there). */
const aLogs = captureLog('info');
let site: Awaited<ReturnType<typeof startTestSite>>;
let owner: Member;
let alice: Member;
let chatId: number;
/** A member connected to B; a room run by A that B watches. */
let viewer: Member;
let otherChat: number;
/** B is shut down by the last test. */
let bClosed = false;
/** A stops answering other nodes' room requests (its replies are dropped), as a dead or stuck node. */
let muted = false;

const ack = (m: Member, event: string, payload: object): Promise<any> => (m.socket as any).emitWithAck(event, payload);
const on = (node: TestApp, m: Member) => Object.assign(new Client(node.url, m.client.ip), { cookie: m.client.cookie });
const place = (id: number) => a.state.get(`vm:room:${id}`);
const stats = async (node: TestApp) =>
  (await new Client(node.url, undefined, node.publicApiKey).get('/v1/statistics/chats')).body;

beforeAll(async () => {
  if (!run || !inject('servicesAvailable')) return;
  site = await startTestSite();
  backing = await createBacking();
  const config = { vmAllowPrivateNetworks: true, vmMaxPerNode: 2, vmIdleTimeoutSeconds: 60 };
  a = await startApp({ backing, config, logger: aLogs.log });
  b = await startApp({ backing, config });
  for (const node of [a, b]) node.services.vm.useSettings(async () => ({ start_url: site.url('/button') }));
  const publish = a.state.publish.bind(a.state);
  a.state.publish = async (channel: string, message: string) => {
    if (muted && channel.startsWith('vm:rpc-reply:')) return;
    return publish(channel, message);
  };
});
afterAll(async () => {
  muted = false;
  closeAllSockets();
  await a?.close();
  if (!bClosed) await b?.close();
  await backing?.release();
  await site?.close();
});

describe.skipIf(!browserAvailable || MODE !== 'cluster' || !inject('servicesAvailable'))(
  'room VM across two nodes',
  () => {
    it('runs where it was started; a member on the other node gets room:started and a start there is a no-op', async () => {
      owner = await member(a, { level: 2 });
      alice = await member(b);
      const res = await owner.client.post('/v1/portal/chats/create', { name: 'Two-node room', type: 'public' });
      chatId = res.body.chat.id;
      expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
      expect((await join(alice, { chat_id: chatId })).ok).toBe(true);

      expect((await owner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
      const pushed = await alice.socket.next('room:started', (p) => p.chat_id === chatId);
      expect(pushed.credentials.token).toEqual(expect.any(String));
      expect(JSON.parse((await place(chatId)) as string)).toEqual({ node: a.services.vm.nodeId, state: 'running' });
      expect((await on(b, owner).post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
      expect(a.vmProvider.list()).toHaveLength(1);
      expect(b.vmProvider.list()).toHaveLength(0);
    });

    it('a viewer on B watches with a token A issued, takes control and clicks; the page on A changes', async () => {
      const token = (await ack(alice, 'vm:credentials', { chat_id: chatId })).credentials.token;
      const watch = autoAck(alice.socket, chatId);
      expect(await ack(alice, 'vm:watch', { chat_id: chatId, token })).toEqual({
        ok: true,
        width: 1280,
        height: 720,
        controller_user_id: null,
      });
      await eventually(() => watch.frames.length > 0, WAIT_MS, 'a frame relayed to B');
      expect(await stats(a)).toMatchObject({ active_browsers: 1, viewers: 1 });

      expect(await ack(alice, 'vm:control:request', { chat_id: chatId })).toMatchObject({ granted: true });
      await owner.socket.next('vm:control', (p) => p.chat_id === chatId && p.controller_user_id === alice.user.id);
      const before = watch.latest()?.data as Buffer;
      for (const type of ['move', 'down', 'up'])
        expect((await ack(alice, 'vm:input', { chat_id: chatId, kind: 'mouse', type, x: 250, y: 200 })).ok).toBe(true);
      await eventually(
        async () => (await a.vmProvider.evaluate(String(chatId), 'document.body.dataset.clicked')) === 'yes',
        WAIT_MS,
        'the click from B on A',
      );
      await eventually(() => !watch.latest()?.data.equals(before), WAIT_MS, 'a changed frame on B');
      // The owner on A refuses a grant from a plain member on B.
      const bob = await member(b);
      expect((await join(bob, { chat_id: chatId })).ok).toBe(true);
      expect(await ack(bob, 'vm:control:grant', { chat_id: chatId, user_id: bob.user.id })).toMatchObject({
        ok: false,
        code: 'ERR_FORBIDDEN',
      });
      expect(await ack(bob, 'vm:input', { chat_id: chatId, kind: 'text', text: 'x' })).toMatchObject({
        code: 'ERR_FORBIDDEN',
      });
    });

    it('a failure on A serving input from B is logged on A with its stack; a store outage there answers B 503', async () => {
      const input = a.vmProvider.input;
      const send = () => ack(alice, 'vm:input', { chat_id: chatId, kind: 'mouse', type: 'move', x: 10, y: 10 });
      try {
        a.vmProvider.input = async () => {
          throw new TypeError('a bug in the room browser');
        };
        expect(await send()).toMatchObject({ ok: false, code: 'ERR_INTERNAL' });
        const bug = aLogs.lines().find((l) => l.msg === 'unexpected error serving another node');
        expect(bug).toMatchObject({
          level: LEVEL.error,
          op: 'input',
          from: b.services.vm.nodeId,
          err: { type: 'TypeError', message: 'a bug in the room browser', stack: expect.stringMatching(/^TypeError/) },
        });
        // What ioredis rejects a command with when Redis cannot be reached (errors.ts, connectionFailure).
        a.vmProvider.input = async () => {
          throw new Error('Connection is closed.');
        };
        expect(await send()).toMatchObject({ ok: false, code: 'ERR_SERVICE_UNAVAILABLE', retry_after: 5 });
        expect(aLogs.lines().find((l) => l.msg === 'backing store unavailable')).toMatchObject({
          level: LEVEL.warn,
          op: 'input',
          store_error: { message: 'Connection is closed.' },
        });
      } finally {
        a.vmProvider.input = input;
      }
      expect((await send()).ok).toBe(true);
    });

    it('a kick on A ends the stream on B at once and drops control', async () => {
      const frames = alice.socket.received.filter((r) => r.event === 'vm:frame').length;
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: alice.user.id })).status).toBe(200);
      await alice.socket.next('room:left', (p) => p.chat_id === chatId);
      await owner.socket.next('vm:control', (p) => p.chat_id === chatId && p.controller_user_id === null);
      // The owner navigates: frames keep coming on A's side, none reach alice.
      const ownerWatch = autoAck(owner.socket, chatId);
      const token = (await ack(owner, 'vm:credentials', { chat_id: chatId })).credentials.token;
      expect((await ack(owner, 'vm:watch', { chat_id: chatId, token })).ok).toBe(true);
      expect((await ack(owner, 'vm:control:grant', { chat_id: chatId, user_id: owner.user.id })).ok).toBe(true);
      await ack(owner, 'vm:input', { chat_id: chatId, kind: 'navigate', url: site.url('/page2') });
      await eventually(() => ownerWatch.frames.length > 1, WAIT_MS, 'frames on A');
      await new Promise((r) => setTimeout(r, 300));
      const after = alice.socket.received.filter((r) => r.event === 'vm:frame').length;
      expect(after - frames).toBeLessThanOrEqual(1); // at most the frame already on its way
      ownerWatch.stop();
    });

    it('a stop asked on B stops the room on A; viewers hear room:stopped and the room map is clean', async () => {
      const carol = await member(b);
      expect((await join(carol, { chat_id: chatId })).ok).toBe(true);
      const token = (await ack(carol, 'vm:credentials', { chat_id: chatId })).credentials.token;
      autoAck(carol.socket, chatId);
      expect((await ack(carol, 'vm:watch', { chat_id: chatId, token })).ok).toBe(true);
      expect((await on(b, carol).post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(403);
      expect((await on(b, owner).post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(200);
      expect(await carol.socket.next('room:stopped', (p) => p.chat_id === chatId)).toEqual({
        chat_id: chatId,
        reason: 'stopped',
      });
      expect(a.vmProvider.list()).toEqual([]);
      expect(await place(chatId)).toBeNull();
      expect(await ack(carol, 'vm:credentials', { chat_id: chatId })).toMatchObject({ code: 'ERR_ROOM_NOT_RUNNING' });
    });

    it('a crash (twice) where the room runs reaches viewers on both nodes as room:stopped (crashed), clears the map', async () => {
      const dave = await member(b);
      expect((await join(dave, { chat_id: chatId })).ok).toBe(true);
      expect((await on(b, owner).post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
      // Started through B: B runs it now.
      expect(b.vmProvider.list()).toHaveLength(1);
      const token = (await dave.socket.next('room:started', (p) => p.chat_id === chatId)).credentials.token;
      autoAck(owner.socket, chatId);
      const ownerToken = (await ack(owner, 'vm:credentials', { chat_id: chatId })).credentials.token;
      expect((await ack(owner, 'vm:watch', { chat_id: chatId, token: ownerToken })).ok).toBe(true);
      expect((await ack(dave, 'vm:watch', { chat_id: chatId, token })).ok).toBe(true);
      const first = b.vmProvider.pidOf(String(chatId)) as number;
      process.kill(first, 'SIGKILL');
      const second = await eventually(() => {
        const pid = b.vmProvider.pidOf(String(chatId));
        return pid !== first && b.vmProvider.status(String(chatId))?.state === 'running' ? pid : undefined;
      });
      process.kill(second as number, 'SIGKILL');
      await owner.socket.next('room:stopped', (p) => p.chat_id === chatId && p.reason === 'crashed');
      await dave.socket.next('room:stopped', (p) => p.chat_id === chatId && p.reason === 'crashed');
      await eventually(async () => (await place(chatId)) === null, WAIT_MS, 'the map entry removed');
    });

    it('idle: a room watched only from the other node stays up; unwatched, it stops and leaves the map', async () => {
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
      const erin = await member(b);
      expect((await join(erin, { chat_id: chatId })).ok).toBe(true);
      const token = (await ack(erin, 'vm:credentials', { chat_id: chatId })).credentials.token;
      expect((await ack(erin, 'vm:watch', { chat_id: chatId, token })).ok).toBe(true);
      const later = () => new Date(Date.now() + 61_000);
      await a.services.vm.sweep(later());
      expect(a.services.vm.isRunning(chatId)).toBe(true);
      expect((await ack(erin, 'vm:unwatch', { chat_id: chatId })).ok).toBe(true);
      await eventually(async () => (await stats(a)).viewers === 0, WAIT_MS, 'A hears B has no viewers');
      await a.services.vm.sweep(later());
      await erin.socket.next('room:stopped', (p) => p.chat_id === chatId && p.reason === 'idle');
      expect(await place(chatId)).toBeNull();
    });

    it('a start on B while A is still stopping the room waits for the stop, then runs the room on B', async () => {
      viewer = await member(b);
      expect((await join(viewer, { chat_id: chatId })).ok).toBe(true);
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
      // A's browser is slow to exit: the stop holds there until the test lets it go.
      const provider = a.vmProvider;
      const stopBrowser = provider.stop.bind(provider);
      let inStop!: () => void;
      const stopEntered = new Promise<void>((r) => {
        inStop = r;
      });
      let letGo!: () => void;
      const gate = new Promise<void>((r) => {
        letGo = r;
      });
      provider.stop = async (id: string) => {
        inStop();
        await gate;
        return stopBrowser(id);
      };
      // B's reads of the room map entry while it says the room is stopping.
      let stoppingSeen = 0;
      let seenTwice!: () => void;
      const waiting = new Promise<void>((r) => {
        seenTwice = r;
      });
      const get = b.state.get.bind(b.state);
      b.state.get = async (key: string) => {
        const raw = await get(key);
        if (key === `vm:room:${chatId}` && raw?.includes('"stopping"') && ++stoppingSeen === 2) seenTwice();
        return raw;
      };
      try {
        const stopping = owner.client.post(`/v1/portal/chats/${chatId}/stop`, {});
        await stopEntered;
        // Stopping is not running, on any node.
        expect(await ack(viewer, 'vm:credentials', { chat_id: chatId })).toMatchObject({
          code: 'ERR_ROOM_NOT_RUNNING',
        });
        stoppingSeen = 0;
        const starting = on(b, owner).post(`/v1/portal/chats/${chatId}/start`, {});
        // B looked (its start) and tried to claim the room (held: stopping); then A's stop ends.
        await Promise.race([waiting, starting]);
        letGo();
        expect((await stopping).status).toBe(200);
        expect((await starting).status).toBe(200);
      } finally {
        letGo();
        provider.stop = stopBrowser;
        b.state.get = get;
      }
      expect(b.services.vm.isRunning(chatId)).toBe(true);
      expect(JSON.parse((await place(chatId)) as string)).toEqual({ node: b.services.vm.nodeId, state: 'running' });
      await viewer.socket.next('room:started', (p) => p.chat_id === chatId);
    });

    it('B keeps its own room in the map while the node running a room it watches does not answer', async () => {
      // The room of `chatId` runs on B now; another runs on A, watched from B.
      const res = await owner.client.post('/v1/portal/chats/create', { name: 'Room on A', type: 'public' });
      otherChat = res.body.chat.id;
      expect((await join(owner, { chat_id: otherChat })).ok).toBe(true);
      expect((await join(viewer, { chat_id: otherChat })).ok).toBe(true);
      expect((await owner.client.post(`/v1/portal/chats/${otherChat}/start`, {})).status).toBe(200);
      const token = (await ack(viewer, 'vm:credentials', { chat_id: otherChat })).credentials.token;
      autoAck(viewer.socket, otherChat);
      expect((await ack(viewer, 'vm:watch', { chat_id: otherChat, token })).ok).toBe(true);

      muted = true;
      try {
        await a.state.del(`vm:room:${chatId}`);
        // A sweep due to report B's viewers to A (every 5 s), short of the idle timeout.
        await b.services.vm.sweep(new Date(Date.now() + 6_000));
        expect(JSON.parse((await place(chatId)) as string)).toEqual({ node: b.services.vm.nodeId, state: 'running' });
        // The sweep did not wait for A's answer: the viewer on B still watches A's room.
        expect(await ack(viewer, 'vm:frame:ack', { chat_id: otherChat, seq: 0 })).toMatchObject({ ok: true });
        // A stays silent past the request timeout: B's viewers of its room hear it crashed.
        await viewer.socket.next('room:stopped', (p) => p.chat_id === otherChat && p.reason === 'crashed', WAIT_MS);
      } finally {
        muted = false;
      }
    });

    it('B shuts down cleanly while the node running a room it watches does not answer; its own room stops', async () => {
      const token = (await ack(viewer, 'vm:credentials', { chat_id: otherChat })).credentials.token;
      expect((await ack(viewer, 'vm:watch', { chat_id: otherChat, token })).ok).toBe(true);
      muted = true;
      // Fastify gives each close hook 10 s; a room VM close waiting on A would fail app.close().
      try {
        await b.close();
      } finally {
        bClosed = true;
      }
      await owner.socket.next('room:stopped', (p) => p.chat_id === chatId && p.reason === 'shutdown');
      expect(await place(chatId)).toBeNull();
    });
  },
);

describeBrowser('two watchers on one node opening its audience of a room elsewhere at once', () => {
  let runs: TestApp;
  let watches: Awaited<ReturnType<typeof buildApp>>;
  let watchesUrl: string;
  let site2: Awaited<ReturnType<typeof startTestSite>>;

  beforeAll(async () => {
    site2 = await startTestSite();
    runs = await startApp({ config: { vmAllowPrivateNetworks: true, vmMaxPerNode: 1, vmIdleTimeoutSeconds: 600 } });
    runs.services.vm.useSettings(async () => ({ start_url: site2.url('/button') }));
    // A second node over the same stores, with no browsers: it watches the room over the frame channel.
    watches = await buildApp({
      config: { ...runs.config, vmMaxPerNode: 0 },
      database: runs.database,
      state: runs.state,
      ownsStores: false,
      logger: false,
    });
    watchesUrl = await watches.app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await watches?.app.close();
    await runs?.close();
    await site2?.close();
  });

  it('keeps the viewer whose audience the other ended while it subscribed: its acks count, a kick ends its stream', async () => {
    const host = await member(runs, { level: 2 });
    const created = await host.client.post('/v1/portal/chats/create', { name: 'Two watchers', type: 'public' });
    const roomChat = created.body.chat.id as number;
    expect((await join(host, { chat_id: roomChat })).ok).toBe(true);
    expect((await host.client.post(`/v1/portal/chats/${roomChat}/start`, {})).status).toBe(200);
    const [stays, leaves] = [await member(runs), await member(runs)];
    for (const m of [stays, leaves]) {
      m.socket.close();
      m.socket = await connectSocket(watchesUrl, m.client);
      expect((await join(m, { chat_id: roomChat })).ok).toBe(true);
    }
    const tokenOf = async (m: Member) => (await ack(m, 'vm:credentials', { chat_id: roomChat })).credentials.token;
    const [token1, token2] = [await tokenOf(stays), await tokenOf(leaves)];

    // The second node's subscription to the room's frames takes a while (a Redis SUBSCRIBE round trip).
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const subscribe = runs.state.subscribe.bind(runs.state);
    runs.state.subscribe = async (channel: string, handler: (m: string) => void) => {
      if (channel.startsWith('vm:frames:')) await gate;
      return subscribe(channel, handler);
    };
    try {
      const socket = watches.services.realtime.io.of('/').sockets.get(stays.socket.id as string);
      const staying: Caller = {
        socketId: stays.socket.id as string,
        userId: stays.user.id,
        permissionLevel: 0,
        username: stays.user.username,
        joined: (id) => socket?.rooms.has(`chat:${id}`) ?? false,
      };
      // The other watcher's socket leaves the chat while its watch is checked: it finds the audience empty.
      let asked = 0;
      const leaving: Caller = {
        socketId: 'a-socket-leaving',
        userId: leaves.user.id,
        permissionLevel: 0,
        username: leaves.user.username,
        joined: () => ++asked === 1,
      };
      const first = watches.services.vm.watch(staying, roomChat, token1);
      await new Promise((r) => setTimeout(r, 50));
      const second = watches.services.vm.watch(leaving, roomChat, token2);
      await new Promise((r) => setTimeout(r, 50));
      release();
      await expect(second).rejects.toMatchObject({ code: 'ERR_NOT_CHAT_MEMBER' });
      await expect(first).resolves.toMatchObject({ width: 1280 });
    } finally {
      runs.state.subscribe = subscribe;
    }

    const frames = () => stays.socket.received.filter((r) => r.event === 'vm:frame' && r.payload.chat_id === roomChat);
    await eventually(() => frames().length > 0, WAIT_MS, 'a first frame');
    const seq = frames()[0]?.payload.seq;
    expect(await ack(stays, 'vm:frame:ack', { chat_id: roomChat, seq })).toEqual({ ok: true });

    // A kick (on the node where the socket is) ends its stream at once, whatever the page does next.
    const hostThere = Object.assign(new Client(watchesUrl, host.client.ip), { cookie: host.client.cookie });
    expect((await hostThere.post(`/v1/portal/chats/${roomChat}/kick`, { user_id: stays.user.id })).status).toBe(200);
    await stays.socket.next('room:left', (p) => p.chat_id === roomChat);
    const before = frames().length;
    expect((await ack(host, 'vm:control:request', { chat_id: roomChat })).granted).toBe(true);
    const navigate = { chat_id: roomChat, kind: 'navigate', url: site2.url('/page2') };
    expect((await ack(host, 'vm:input', navigate)).ok).toBe(true);
    await new Promise((r) => setTimeout(r, 1500));
    expect(frames().length - before).toBe(0);
  });
});

/**
 * docs/api.md, Control: a controller who leaves the chat's room loses control. When the node holding
 * the controller's sockets dies, no leave reaches the room's node: its sweep re-checks the
 * controller once per PLACE_TTL_MS against the chat's sockets on every node.
 */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))('room VM control of a user whose node died', () => {
  let nodes: Nodes;
  let bClosed = false;
  beforeAll(async () => {
    nodes = await startNodes({ config: { vmIdleTimeoutSeconds: 600 } });
    // No browsers: a room runs as soon as it is launched.
    for (const node of [nodes.a, nodes.b]) withoutBrowsers(node);
  });
  afterAll(async () => {
    closeAllSockets();
    // B is closed by the test already; the backing goes with the nodes.
    if (bClosed) nodes.b.close = async () => {};
    await nodes?.close();
  });

  it('keeps control of a controller on a live node; drops it within PLACE_TTL_MS once that node is gone', async () => {
    const { a: runs, b: dies } = nodes;
    const owner = await member(runs, { level: 2 });
    const other = await member(runs);
    const ctl = await member(dies);
    const res = await owner.client.post('/v1/portal/chats/create', { name: 'Dead node', type: 'public' });
    const roomChat = res.body.chat.id as number;
    for (const m of [owner, other, ctl]) expect((await join(m, { chat_id: roomChat })).ok).toBe(true);
    expect((await owner.client.post(`/v1/portal/chats/${roomChat}/start`, {})).status).toBe(200);
    expect(runs.services.vm.isRunning(roomChat)).toBe(true);
    expect(await ack(ctl, 'vm:control:request', { chat_id: roomChat })).toMatchObject({ granted: true });

    // A (running the room) re-checks by reading the chat's sockets on every node: the test awaits those reads.
    const { realtime } = runs.services;
    const socketsIn = realtime.socketsIn;
    const reads: Promise<unknown>[] = [];
    realtime.socketsIn = (room) => {
      const read = socketsIn(room);
      reads.push(read);
      return read;
    };
    try {
      // A re-check while the controller's socket is on B, alive: control stays. The sweeps here run
      // a minute ahead of the clock: A's own sweep (every second) re-checks nothing meanwhile.
      const ahead = Date.now() + 60_000;
      const before = reads.length;
      await runs.services.vm.sweep(new Date(ahead));
      expect(reads.length - before).toBe(1);
      await Promise.all(reads);
      await new Promise((r) => setTimeout(r, 100));
      expect(await stats(runs)).toMatchObject({ active_browsers: 1, controllers: 1 });
      expect(owner.socket.received.some((r) => r.event === 'vm:control' && r.payload.controller_user_id === null)).toBe(
        false,
      );
      // Within the interval, no room is re-checked again.
      await runs.services.vm.sweep(new Date(ahead + PLACE_TTL_MS - 1_000));
      expect(reads.length - before).toBe(1);

      // B dies: it sends nothing to the cluster any more (its leave of the controller is lost).
      dies.state.publish = async () => {};
      await dies.close();
      bClosed = true;
      await runs.services.vm.sweep(new Date(ahead + PLACE_TTL_MS));
      await owner.socket.next('vm:control', (p) => p.chat_id === roomChat && p.controller_user_id === null);
    } finally {
      realtime.socketsIn = socketsIn;
    }
    expect(runs.services.vm.isRunning(roomChat)).toBe(true);
    expect(await stats(runs)).toMatchObject({ active_browsers: 1, controllers: 0 });
    expect(await ack(other, 'vm:control:request', { chat_id: roomChat })).toMatchObject({
      ok: true,
      granted: true,
      controller_user_id: other.user.id,
    });
  });
});
