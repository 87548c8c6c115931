import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import { rooms } from '../../platform/realtime.js';
import { type Answer, type Ask, crossNodeReads, SOCKET_READ_EVENTS } from '../../platform/socket-reads.js';
import { MemoryState } from '../../platform/state/memory.js';
import type { VmFrame, VmInfo, VmProvider } from '../../platform/vm/provider.js';
import { makeAudiences } from './vm.audience.js';
import { makeVmCluster, PLACE_TTL_MS, type VmCluster } from './vm.cluster.js';
import { makeRoomHost, type RoomHost, serveHost } from './vm.host.js';

/** A provider whose browsers are records: it counts starts and screencast subscriptions. */
function fakeProvider() {
  const calls = { start: 0, subscribe: 0, unsubscribe: 0, releaseInput: 0 };
  const provider: VmProvider = {
    async start(roomId, spec): Promise<VmInfo> {
      calls.start += 1;
      return { roomId, state: 'running', width: spec.width, height: spec.height, startedAt: new Date(), restarts: 0 };
    },
    async stop() {},
    status: () => null,
    list: () => [],
    subscribe: () => {
      calls.subscribe += 1;
      return () => {
        calls.unsubscribe += 1;
      };
    },
    async input() {},
    async releaseInput() {
      calls.releaseInput += 1;
    },
    async navigate() {},
    onStopped: () => () => {},
    async close() {},
  };
  return { provider, calls };
}

/** Lets pending promise callbacks run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('the room host', () => {
  const chatId = 7;
  let state: MemoryState;
  let cluster: VmCluster;
  let clock: FakeClock;
  let fake: ReturnType<typeof fakeProvider>;
  let emitted: { event: string; payload: unknown }[];
  /** What a lookup of the chat's sockets on every node answers; replaced by tests that hold it. */
  let lookUp: () => Promise<{ data: { userId: number } }[]>;
  /** The users with a socket in the chat on this node (what a read falls back to). */
  let localUsers: number[];
  let warnings: string[];
  let host: RoomHost;

  beforeEach(async () => {
    // The room map's entries live by the test's clock, as the host's idle clock does.
    clock = new FakeClock(Date.now());
    state = new MemoryState(clock);
    cluster = makeVmCluster(state, { log: { warn() {}, error() {} }, nodeId: 'self' });
    await cluster.ready;
    fake = fakeProvider();
    emitted = [];
    lookUp = async () => [{ data: { userId: 1 } }, { data: { userId: 2 } }];
    localUsers = [];
    warnings = [];
    // A socket server as the cross-node reads see it: one other node, which answers `lookUp` (a
    // rejection: it does not answer), and this node's sockets.
    const listeners = new Map<string, (message: never) => void>();
    const serverSideEmit = (event: string, ask: Ask) => {
      if (event !== SOCKET_READ_EVENTS.ask) return;
      const answer = listeners.get(SOCKET_READ_EVENTS.answer) as ((answer: Answer) => void) | undefined;
      lookUp().then(
        (found) =>
          answer?.({ id: ask.id, sockets: found.map((s, i) => ({ id: `r${i}`, data: s.data as never, rooms: [] })) }),
        () => {},
      );
    };
    const io = {
      of: () => {
        const sockets = new Map(localUsers.map((userId) => [`s${userId}`, { id: `s${userId}`, data: { userId } }]));
        const adapter = { rooms: new Map([[rooms.chat(chatId), new Set(sockets.keys())]]), serverCount: async () => 2 };
        return { sockets, adapter, on: (event: string, fn: () => void) => listeners.set(event, fn), serverSideEmit };
      },
    };
    const log = { warn: (_obj: object, msg: string) => warnings.push(msg) };
    // The socket server itself is there too: a host reading it directly sees the same failing lookup.
    const realtime = {
      io,
      socketsIn: crossNodeReads(io as never, log as never).socketsIn,
      emitTo: ((_room: string, event: string, payload: unknown) => emitted.push({ event, payload })) as never,
    };
    host = makeRoomHost({
      provider: fake.provider,
      chats: { assertMember: async () => {} },
      realtime,
      clock,
      cluster,
      settingsFor: () => async () => null,
      roomChat: async () => ({ type: 'public', ownerUserId: 1 }),
      allowedAsStored: async (actor, rule) => rule(actor),
      mayRun: async () => {},
      localFrame: () => {},
      announceStarted: async () => {
        emitted.push({ event: 'room:started', payload: { chat_id: chatId } });
      },
      allowPrivateNetworks: true,
      idleMs: 60_000,
      log: { warn() {} },
    });
  });

  afterEach(async () => {
    await host.close();
    await cluster.close();
    await state.close();
  });

  const who = (userId: number) => ({ userId, permissionLevel: 0, username: `user${userId}` });

  it('leaves a running room as it is when it is started again: no launch, same controller, viewers and idle clock', async () => {
    await host.start(chatId);
    host.audience(chatId, 'self', [2]);
    expect(await host.requestControl(chatId, who(2))).toEqual({ granted: true, controller_user_id: 2 });
    const started = emitted.filter((e) => e.event === 'room:started').length;

    await host.start(chatId);

    expect(fake.calls.start).toBe(1);
    expect(emitted.filter((e) => e.event === 'room:started')).toHaveLength(started);
    expect(host.statistics()).toMatchObject({ viewers: 1, controllers: 1 });
    expect(fake.calls).toMatchObject({ subscribe: 1, unsubscribe: 0 });
    // Watched all along: an idle sweep long after leaves it running.
    clock.advance(120_000);
    await host.sweep(clock.now().getTime());
    expect(host.has(chatId)).toBe(true);
  });

  it('shares one launch between starts that overlap', async () => {
    await Promise.all([host.start(chatId), host.start(chatId)]);
    expect(fake.calls.start).toBe(1);
    expect(emitted.filter((e) => e.event === 'room:started')).toHaveLength(1);
  });

  it('calls off a start stopped while its browser started, though the provider could not kill it: 503, no room:started', async () => {
    let launched = () => {};
    const launching = new Promise<void>((resolve) => {
      launched = resolve;
    });
    const browser: string[] = [];
    const start = fake.provider.start.bind(fake.provider);
    // A browser that starts whatever a stop says meanwhile (a host whose answer was already on its way).
    fake.provider.start = async (roomId, spec) => {
      await launching;
      browser.push('started');
      return start(roomId, spec);
    };
    fake.provider.stop = async () => {
      browser.push('stopped');
    };
    const starting = host.start(chatId);
    await settle();
    const stopping = host.stop(chatId, 'stopped');
    launched();

    await expect(starting).rejects.toMatchObject({ code: 'ERR_ROOM_START_FAILED', message: /called off/ });
    await stopping;
    expect(emitted.filter((e) => e.event === 'room:started')).toEqual([]);
    expect(host.runs(chatId)).toBe(false);
    expect(host.has(chatId)).toBe(false);
    // The browser that started anyway is stopped.
    expect(browser.lastIndexOf('stopped')).toBeGreaterThan(browser.indexOf('started'));
    expect(await cluster.placeOf(chatId)).toBeNull();
  });

  it('refuses control to a requester whose last socket left while the request was checked', async () => {
    await host.start(chatId);
    lookUp = async () => [{ data: { userId: 1 } }];
    await expect(host.requestControl(chatId, who(2))).rejects.toMatchObject({ code: 'ERR_NOT_CHAT_MEMBER' });
    expect(host.statistics().controllers).toBe(0);
  });

  it('looks again when the requester’s leave is reported after the sockets were looked up', async () => {
    await host.start(chatId);
    // The first lookup is answered as of before the leave (user 2 still there), after it was reported.
    let answer: (sockets: { data: { userId: number } }[]) => void = () => {};
    lookUp = () =>
      new Promise((resolve) => {
        answer = resolve;
      });
    const asking = host.requestControl(chatId, who(2));
    await settle();
    // The leave: its own lookup finds user 2 gone; it is not the controller yet, so nothing to drop.
    const gone = async () => [{ data: { userId: 1 } }];
    const stale = answer;
    lookUp = gone;
    await host.userLeft(chatId, 2);
    stale([{ data: { userId: 1 } }, { data: { userId: 2 } }]);
    await expect(asking).rejects.toMatchObject({ code: 'ERR_NOT_CHAT_MEMBER' });
    expect(host.statistics().controllers).toBe(0);
    expect(emitted.filter((e) => e.event === 'vm:control')).toEqual([]);
  });

  it('grants control to a requester still in the chat', async () => {
    await host.start(chatId);
    expect(await host.requestControl(chatId, who(2))).toEqual({ granted: true, controller_user_id: 2 });
    expect(await host.requestControl(chatId, who(1))).toEqual({ granted: false, controller_user_id: 2 });
  });

  it('lets go of what the previous controller held each time control changes hands, and only then', async () => {
    await host.start(chatId);
    // Taken while nobody held control: nothing to let go of.
    expect(await host.requestControl(chatId, who(2))).toEqual({ granted: true, controller_user_id: 2 });
    expect(fake.calls.releaseInput).toBe(0);
    // The owner (user 1) hands it to themselves, then again: one change of hands.
    await host.grant(chatId, who(1), 1);
    await host.grant(chatId, who(1), 1);
    expect(fake.calls.releaseInput).toBe(1);
    await host.release(chatId, who(1));
    expect(fake.calls.releaseInput).toBe(2);
    // The controller's last socket leaves.
    expect(await host.requestControl(chatId, who(2))).toMatchObject({ granted: true });
    lookUp = async () => [{ data: { userId: 1 } }];
    await host.userLeft(chatId, 2);
    expect(fake.calls.releaseInput).toBe(3);
  });

  it('decides control from this node’s sockets when another node does not answer the lookup', async () => {
    await host.start(chatId);
    lookUp = () => Promise.reject(new Error('timeout reached: only 1 responses received out of 2'));
    localUsers = [1, 2];

    // The request is answered (granted: user 2 has a socket here), not failed.
    expect(await host.requestControl(chatId, who(2))).toEqual({ granted: true, controller_user_id: 2 });

    // User 2's last socket here leaves: they lose control, though the other node still does not answer.
    localUsers = [1];
    await host.userLeft(chatId, 2);
    expect(host.statistics().controllers).toBe(0);
    expect(emitted.filter((e) => e.event === 'vm:control').map((e) => e.payload)).toEqual([
      { chat_id: chatId, controller_user_id: 2 },
      { chat_id: chatId, controller_user_id: null },
    ]);
    expect(warnings.length).toBeGreaterThan(0);
  });

  it('keeps refreshing its other rooms in the room map while an idle room’s stop hangs, and stops that room once', async () => {
    const other = makeVmCluster(state, { log: { warn() {}, error() {} }, nodeId: 'other' });
    await other.ready;
    // Room 1's browser host does not answer its host:stop (the remote provider waits 10 s for each).
    const stops: string[] = [];
    let asked = () => {};
    const stopAsked = new Promise<void>((resolve) => {
      asked = resolve;
    });
    let answer = () => {};
    const hanging = new Promise<void>((resolve) => {
      answer = resolve;
    });
    fake.provider.stop = async (roomId) => {
      stops.push(roomId);
      if (roomId !== '1') return;
      asked();
      await hanging;
    };
    try {
      // Both rooms are this node's (claimed as vm.service.ts does); room 2 is watched, room 1 is not.
      for (const id of [1, 2]) {
        expect(await cluster.claim(id)).toBeNull();
        await host.start(id);
      }
      host.audience(2, 'self', [2]);
      clock.advance(59_000);
      await host.sweep(clock.now().getTime());
      // The next run: room 1 is idle now.
      clock.advance(1_000);
      const run = host.sweep(clock.now().getTime());
      await stopAsked;
      // Past the lifetime of the entries the previous run wrote: this run refreshed room 2's before
      // it stopped room 1, so no other node can claim the running, watched room.
      clock.advance(PLACE_TTL_MS - 500);
      expect(await cluster.placeOf(2)).toEqual({ node: 'self', state: 'running' });
      expect(await other.claim(2)).toEqual({ node: 'self', state: 'running' });
      // The run ends while the stop hangs, so the next one comes (background runs never overlap).
      await run;
      expect(host.has(1)).toBe(true);
      expect(host.runs(1)).toBe(false);
      clock.advance(1_000);
      await host.sweep(clock.now().getTime());
      expect(stops).toEqual(['1']);
      expect(host.runs(2)).toBe(true);
    } finally {
      answer();
      await host.stopped(1);
      await other.close();
    }
    expect(host.has(1)).toBe(false);
    expect(await cluster.placeOf(1)).toBeNull();
    expect(await cluster.placeOf(2)).toEqual({ node: 'self', state: 'running' });
  });

  it('sends another node the latest frame when a viewer there starts watching, not with every periodic report', async () => {
    let push: (f: VmFrame) => void = () => {};
    fake.provider.subscribe = (_roomId, onFrame) => {
      push = onFrame;
      return () => {};
    };
    serveHost(cluster, host);
    // Another node watching the room: its audience reports to this one (the frames' bytes are what cross).
    const other = makeVmCluster(state, { log: { warn() {}, error() {} }, nodeId: 'other' });
    await other.ready;
    const answered: { last: string | null }[] = [];
    const call = other.call.bind(other);
    other.call = (async (node: string, op: string, args: unknown) => {
      const answer = await call<{ last: string | null }>(node, op, args);
      if (op === 'audience') answered.push(answer);
      return answer;
    }) as typeof other.call;
    const sink = { volatile: { emit() {} }, emit() {} };
    const audiences = makeAudiences({
      realtime: { io: { sockets: { sockets: new Map() }, local: { to: () => sink } } } as never,
      cluster: other,
      now: () => clock.now().getTime(),
    });
    try {
      expect(await cluster.claim(chatId)).toBeNull();
      await host.start(chatId);
      const a = await audiences.open(chatId, 'self');
      a.viewers.add('first-viewer', 2);
      await audiences.report(a);
      push({ seq: 1, mime: 'image/jpeg', width: 2, height: 2, data: Buffer.from('jpeg') });
      // The periodic report: the other node's viewers already have the frames.
      clock.advance(5_000);
      audiences.sweep(clock.now());
      for (let i = 0; i < 10 && answered.length < 2; i++) await settle();
      expect(answered.map((r) => r.last)).toEqual([null, null]);
      // A new viewer there is shown the latest frame at once.
      a.viewers.add('second-viewer', 3);
      expect((await audiences.report(a, { frame: true })).last).toEqual(expect.any(String));
    } finally {
      await other.close();
    }
  });

  it('does not stop a room judged idle that a viewer watches by the time the sweep stops it', async () => {
    for (const id of [1, 2]) {
      expect(await cluster.claim(id)).toBeNull();
      await host.start(id);
    }
    host.audience(2, 'self', [2]);
    clock.advance(60_000);
    // Room 1 is judged idle; then room 2's map refresh waits on the store (a Redis round trip).
    const hold = cluster.hold.bind(cluster);
    let reached = () => {};
    const atRoom2 = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let open = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    cluster.hold = async (id, place) => {
      if (id === 2 && place === 'running') {
        reached();
        await gate;
      }
      return hold(id, place);
    };
    const run = host.sweep(clock.now().getTime());
    await atRoom2;
    // Meanwhile a user starts watching room 1.
    host.audience(1, 'self', [7]);
    open();
    await run;
    expect(host.runs(1)).toBe(true);
    expect(host.runs(2)).toBe(true);
  });
});
