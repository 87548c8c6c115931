import { execFileSync } from 'node:child_process';
import { Limits } from '@parlor/protocol';
import { and, eq, isNull } from 'drizzle-orm';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { buildApp } from '../src/app.js';
import { ACK_TIMEOUT_MS, type Caller } from '../src/modules/vm/vm.service.js';
import type { RoomVmSettings } from '../src/modules/vm/vm.settings.js';
import { FRAME_WINDOW } from '../src/modules/vm/vm.viewers.js';
import { schema } from '../src/platform/db/index.js';
import { rooms } from '../src/platform/realtime.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { join, type Member, member } from './support/chat-flows.js';
import { Client } from './support/client.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';
import {
  alive,
  autoAck,
  BROWSER_TEST_TIMEOUT_MS,
  describeBrowser,
  eventually,
  jpegSize,
  startTestSite,
  WAIT_MS,
  type Watcher,
} from './support/vm-browser.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/**
 * Room VMs against real Chromium: one app (cap 2 browsers), one test site on 127.0.0.1, and the
 * tests below in order, sharing the chats they set up (they tell one story: start, watch, control,
 * flow control, capacity, kick, crash, stop, idle, shutdown).
 */
let app: TestApp;
let site: Awaited<ReturnType<typeof startTestSite>>;
let appClosed = false;
const settings = new Map<number, Partial<RoomVmSettings>>();

let owner: Member;
let alice: Member;
let admin: Member;
let bob: Member;
let dave: Member;
let outsider: Member;
let chat1: number;
let chat2: number;
let aliceToken: string;
let bobToken: string;
let aliceWatch: Watcher;

const stats = async () => (await new Client(app.url, undefined, app.publicApiKey).get('/v1/statistics/chats')).body;
const createChat = async (m: Member, name: string) => {
  const res = await m.client.post('/v1/portal/chats/create', { name, type: 'public' });
  expect(res.status).toBe(200);
  return res.body.chat.id as number;
};
const ack = (m: Member, event: string, payload: object): Promise<any> => (m.socket as any).emitWithAck(event, payload);
const evaluate = (chatId: number, expression: string) => app.vmProvider.evaluate(String(chatId), expression);
/**
 * A socket's caller as the VM's socket handlers make it (vm.routes.ts), read from the server side
 * of the socket; `drop` disconnects that socket at once, as a dropped connection does.
 */
const callerOf = (m: Member, socketId: string): Caller & { drop(): void } => {
  const server = app.services.realtime.io.of('/').sockets.get(socketId);
  if (!server) throw new Error(`socket ${socketId} is not on this node`);
  return {
    socketId,
    userId: m.user.id,
    permissionLevel: 0,
    username: m.user.username,
    joined: (chatId) => server.rooms.has(rooms.chat(chatId)),
    drop: () => server.disconnect(true),
  };
};

beforeAll(async () => {
  site = await startTestSite();
  app = await startApp({ config: { vmAllowPrivateNetworks: true, vmMaxPerNode: 2, vmIdleTimeoutSeconds: 60 } });
  app.services.vm.useSettings(async (chatId) => settings.get(chatId) ?? null);
});

afterAll(async () => {
  closeAllSockets();
  if (!appClosed) await app?.close();
  await site?.close();
});

describeApp('room VM without a browser binary', () => {
  it('answers 503 ERR_ROOM_START_FAILED when CHROMIUM_PATH does not exist, and 429 past the user’s starts', async () => {
    // A second node over the same stores, configured with a browser path that does not exist.
    const bare = await buildApp({
      config: { ...app.config, chromiumPath: '/nonexistent/chromium' },
      database: app.database,
      state: app.state,
      ownsStores: false,
      logger: false,
    });
    try {
      const url = await bare.app.listen({ port: 0, host: '127.0.0.1' });
      const m = await member(app, { level: 2 });
      const chatId = await createChat(m, 'No browser');
      const there = new Client(url, m.client.ip);
      there.cookie = m.client.cookie;
      const start = await there.post(`/v1/portal/chats/${chatId}/start`, {});
      expect(start.status).toBe(503);
      expect(start.body).toMatchObject({
        code: 'ERR_ROOM_START_FAILED',
        message: expect.stringMatching(/CHROMIUM_PATH/),
      });
      expect(bare.vmProvider.list()).toEqual([]);
      // Each start that would launch a browser spends one of the user's ROOM_STARTS_PER_USER, failed or not.
      for (let i = 1; i < Limits.ROOM_STARTS_PER_USER; i++)
        expect((await there.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(503);
      const limited = await there.post(`/v1/portal/chats/${chatId}/start`, {});
      expect(limited.status).toBe(429);
      expect(limited.body).toMatchObject({ code: 'ERR_RATE_LIMITED', retry_after: expect.any(Number) });
      expect(limited.body.retry_after).toBeLessThanOrEqual(Limits.ROOM_START_WINDOW_MS / 1000);
    } finally {
      await bare.app.close();
    }
  });
});

describeBrowser('room VM (real Chromium)', () => {
  it('POST …/start: the owner starts it; members in the chat get room:started with their own credentials', async () => {
    [owner, alice, admin, outsider] = await Promise.all([
      member(app, { level: 2 }),
      member(app),
      member(app, { level: 2 }),
      member(app),
    ]);
    chat1 = await createChat(owner, 'Room one');
    settings.set(chat1, { start_url: site.url('/button') });
    for (const m of [owner, alice, admin]) expect((await join(m, { chat_id: chat1 })).ok).toBe(true);

    for (const m of [alice, admin]) {
      const refused = await m.client.post(`/v1/portal/chats/${chat1}/start`, {});
      expect(refused.status).toBe(403);
      expect(refused.body.code).toBe('ERR_FORBIDDEN');
    }
    const started = await owner.client.post(`/v1/portal/chats/${chat1}/start`, {});
    expect(started.status, JSON.stringify(started.body)).toBe(200);
    expect(started.body).toEqual({ ok: true });

    const forAlice = await alice.socket.next('room:started', (p) => p.chat_id === chat1);
    const forOwner = await owner.socket.next('room:started', (p) => p.chat_id === chat1);
    expect(forAlice.credentials).toEqual({ token: expect.any(String), expires_at: expect.any(String) });
    expect(forAlice.credentials.token).not.toBe(forOwner.credentials.token);
    expect(Date.parse(forAlice.credentials.expires_at)).toBeGreaterThan(Date.now());
    aliceToken = forAlice.credentials.token;

    // A second start answers 200 from the running room: no second browser, the same process.
    const pid = app.vmProvider.pidOf(String(chat1));
    const again = await owner.client.post(`/v1/portal/chats/${chat1}/start`, {});
    expect(again.status).toBe(200);
    expect(app.vmProvider.list()).toHaveLength(1);
    expect(app.vmProvider.pidOf(String(chat1))).toBe(pid);
    const platformOwner = await member(app, { level: 3 });
    expect((await platformOwner.client.post(`/v1/portal/chats/${chat1}/start`, {})).status).toBe(200);
  });

  it('pushes room:started to a member who joins while it runs; vm:credentials answers members only', async () => {
    bob = await member(app);
    expect((await join(bob, { chat_id: chat1 })).ok).toBe(true);
    bobToken = (await bob.socket.next('room:started', (p) => p.chat_id === chat1)).credentials.token;
    const fresh = await ack(bob, 'vm:credentials', { chat_id: chat1 });
    expect(fresh).toMatchObject({ ok: true, credentials: { token: expect.any(String) } });
    const refused = await ack(outsider, 'vm:credentials', { chat_id: chat1 });
    expect(refused).toMatchObject({ ok: false, code: 'ERR_NOT_CHAT_MEMBER' });
    expect(await ack(bob, 'vm:credentials', { chat_id: 'x' })).toMatchObject({ ok: false, code: 'ERR_VALIDATION' });
  });

  it('vm:watch refuses non-members and bad or foreign tokens; frames are JPEGs of the announced size', async () => {
    expect(await ack(outsider, 'vm:watch', { chat_id: chat1, token: aliceToken })).toMatchObject({
      ok: false,
      code: 'ERR_NOT_CHAT_MEMBER',
    });
    const tampered = `${aliceToken.slice(0, -2)}${aliceToken.endsWith('AA') ? 'BB' : 'AA'}`;
    for (const token of ['nonsense', bobToken, tampered]) {
      expect(await ack(alice, 'vm:watch', { chat_id: chat1, token })).toMatchObject({
        ok: false,
        code: 'ERR_VM_TOKEN_INVALID',
      });
    }
    aliceWatch = autoAck(alice.socket, chat1);
    const watching = await ack(alice, 'vm:watch', { chat_id: chat1, token: aliceToken });
    expect(watching).toEqual({ ok: true, width: 1280, height: 720, controller_user_id: null });
    const frame = await alice.socket.next('vm:frame', (p) => p.chat_id === chat1);
    expect(frame.mime).toBe('image/jpeg');
    expect(jpegSize(frame.data)).toEqual({ width: 1280, height: 720 });
    expect(await evaluate(chat1, 'location.pathname')).toBe('/button');
    expect(site.hits).toContain('/button');
  });

  it('vm:frame:ack from outside the chat answers ERR_NOT_CHAT_MEMBER, telling nothing of whether its room runs', async () => {
    // Chat one runs; this one is stopped; the last id names no chat. An outsider (a member of none
    // of them) and an anonymous stranger, who cannot tell which chat ids exist (docs/api.md,
    // Strangers), hear the same of each.
    const idle = await createChat(owner, 'Idle room');
    const strangerClient = new Client(app.url, undefined, app.publicApiKey);
    expect((await strangerClient.post('/v1/portal/stranger', {})).status).toBe(200);
    strangerClient.apiKey = null;
    const stranger = { client: strangerClient, socket: await connectSocket(app.url, strangerClient) } as Member;
    const answers: Record<string, unknown> = {};
    for (const [who, m] of [
      ['outsider', outsider],
      ['stranger', stranger],
    ] as const)
      for (const [which, chatId] of [
        ['running', chat1],
        ['stopped', idle],
        ['none', idle + 1_000_000],
      ] as const)
        answers[`${who}/${which}`] = (await ack(m, 'vm:frame:ack', { chat_id: chatId, seq: 1 })).code;
    expect(new Set(Object.values(answers))).toEqual(new Set(['ERR_NOT_CHAT_MEMBER']));
    stranger.socket.close();
    // A member in the chat who does not watch is told to watch first.
    expect(await ack(bob, 'vm:frame:ack', { chat_id: chat1, seq: 1 })).toMatchObject({
      ok: false,
      code: 'ERR_FORBIDDEN',
    });
  });

  it('hands control over by request and grant; only the controller’s clicks and keys reach the page', async () => {
    const click = { chat_id: chat1, kind: 'mouse', x: 250, y: 200, button: 'left' };
    expect(await ack(alice, 'vm:input', { ...click, type: 'down' })).toMatchObject({
      ok: false,
      code: 'ERR_FORBIDDEN',
    });
    expect(await ack(alice, 'vm:control:request', { chat_id: chat1 })).toEqual({
      ok: true,
      granted: true,
      controller_user_id: alice.user.id,
    });
    await owner.socket.next('vm:control', (p) => p.chat_id === chat1 && p.controller_user_id === alice.user.id);
    expect(await ack(bob, 'vm:control:request', { chat_id: chat1 })).toMatchObject({ ok: true, granted: false });
    await owner.socket.next('vm:control:request', (p) => p.user_id === bob.user.id);
    expect(await ack(bob, 'vm:control:grant', { chat_id: chat1, user_id: bob.user.id })).toMatchObject({
      ok: false,
      code: 'ERR_FORBIDDEN',
    });
    expect(await ack(bob, 'vm:input', { ...click, type: 'down' })).toMatchObject({ ok: false, code: 'ERR_FORBIDDEN' });
    expect(await ack(alice, 'vm:input', { ...click, type: 'down', x: -1 })).toMatchObject({ code: 'ERR_VALIDATION' });

    await eventually(() => aliceWatch.frames.length > 0, WAIT_MS, 'a first frame');
    const before = aliceWatch.latest()?.data as Buffer;
    expect(await evaluate(chat1, 'document.body.dataset.clicked ?? null')).toBeNull();
    for (const type of ['move', 'down', 'up']) expect((await ack(alice, 'vm:input', { ...click, type })).ok).toBe(true);
    await eventually(
      async () => (await evaluate(chat1, 'document.body.dataset.clicked')) === 'yes',
      WAIT_MS,
      'the click',
    );
    await eventually(() => !aliceWatch.latest()?.data.equals(before), WAIT_MS, 'a changed frame');

    for (const type of ['down', 'up'])
      await ack(alice, 'vm:input', { chat_id: chat1, kind: 'mouse', type, x: 650, y: 120, button: 'left' });
    expect((await ack(alice, 'vm:input', { chat_id: chat1, kind: 'text', text: 'hello' })).ok).toBe(true);
    for (const type of ['down', 'up'])
      await ack(alice, 'vm:input', { chat_id: chat1, kind: 'key', type, key: '!', code: 'Digit1' });
    await eventually(
      async () => (await evaluate(chat1, 'document.activeElement.value')) === 'hello!',
      WAIT_MS,
      'typing',
    );
    expect((await ack(alice, 'vm:input', { chat_id: chat1, kind: 'wheel', x: 10, y: 10, dx: 0, dy: 100 })).ok).toBe(
      true,
    );

    expect((await ack(alice, 'vm:input', { chat_id: chat1, kind: 'navigate', url: site.url('/page2') })).ok).toBe(true);
    await eventually(async () => (await evaluate(chat1, 'location.pathname')) === '/page2', WAIT_MS, 'navigation');
    expect((await ack(alice, 'vm:input', { chat_id: chat1, kind: 'navigate', action: 'back' })).ok).toBe(true);
    await eventually(async () => (await evaluate(chat1, 'location.pathname')) === '/button', WAIT_MS, 'back');
    expect(await ack(alice, 'vm:input', { chat_id: chat1, kind: 'navigate', url: 'file:///etc/passwd' })).toMatchObject(
      { ok: false, code: 'ERR_VALIDATION' },
    );

    expect(await stats()).toEqual({ active_browsers: 1, viewers: 1, controllers: 1 });
  });

  it('answers ERR_VALIDATION to a navigate URL the pattern passes but no browser parses, and to NUL or lone surrogates in input text', async () => {
    const path = () => evaluate(chat1, 'location.pathname');
    expect(await path()).toBe('/button');
    for (const url of ['http://[', 'http://%zz/', 'http://a b/', 'https://[::1/', 'http://a/\u0000', 'http://a/\ud800'])
      expect(await ack(alice, 'vm:input', { chat_id: chat1, kind: 'navigate', url }), url).toMatchObject({
        ok: false,
        code: 'ERR_VALIDATION',
      });
    for (const text of ['a\u0000b', '\ud800', 'x\udfff'])
      expect(await ack(alice, 'vm:input', { chat_id: chat1, kind: 'text', text }), JSON.stringify(text)).toMatchObject({
        ok: false,
        code: 'ERR_VALIDATION',
      });
    expect(
      await ack(alice, 'vm:input', { chat_id: chat1, kind: 'key', type: 'down', key: '\ud800', code: '' }),
    ).toMatchObject({
      ok: false,
      code: 'ERR_VALIDATION',
    });
    // The room is healthy and took none of them: a valid input still goes through, the page stayed.
    expect((await ack(alice, 'vm:input', { chat_id: chat1, kind: 'wheel', x: 10, y: 10, dx: 0, dy: 1 })).ok).toBe(true);
    expect(await path()).toBe('/button');
  });

  // A history command that reaches the tab while a navigation commits finds it between two pages
  // ("Not attached to an active page"): it is retried, not answered as a room restarting. Each
  // comes right after a URL navigation's answer (Page.navigate answers as the new page commits).
  it('takes back, forward and reload sent right after a navigation', async () => {
    const nav = (more: object) => ack(alice, 'vm:input', { chat_id: chat1, kind: 'navigate', ...more });
    const settledAt = async (path: string) => {
      await eventually(
        async () => (await evaluate(chat1, 'location.pathname + " " + document.readyState')) === `${path} complete`,
        WAIT_MS,
        path,
      );
    };
    expect(await nav({ url: site.url('/page2') })).toEqual({ ok: true });
    expect(await nav({ action: 'back' })).toEqual({ ok: true });
    await settledAt('/button');
    // The new navigation dropped the forward entries: forward has nowhere to go.
    expect(await nav({ url: site.url('/page2') })).toEqual({ ok: true });
    expect(await nav({ action: 'forward' })).toEqual({ ok: true });
    await settledAt('/page2');
    expect(await nav({ url: site.url('/button') })).toEqual({ ok: true });
    expect(await nav({ action: 'reload' })).toEqual({ ok: true });
    await settledAt('/button');
  });

  it('POST …/start on a running room changes nothing: no room:started, the controller, viewers and idle clock stay', async () => {
    const started = () =>
      alice.socket.received.filter((r) => r.event === 'room:started' && r.payload.chat_id === chat1);
    const before = started().length;
    const pid = app.vmProvider.pidOf(String(chat1));
    expect((await owner.client.post(`/v1/portal/chats/${chat1}/start`, {})).status).toBe(200);
    // A round trip on alice's socket: whatever the start sent her arrives before this answer.
    expect((await ack(alice, 'vm:credentials', { chat_id: chat1 })).ok).toBe(true);
    expect(started()).toHaveLength(before);
    expect(app.vmProvider.pidOf(String(chat1))).toBe(pid);
    expect(await stats()).toEqual({ active_browsers: 1, viewers: 1, controllers: 1 });
    expect((await ack(alice, 'vm:input', { chat_id: chat1, kind: 'wheel', x: 10, y: 10, dx: 0, dy: 10 })).ok).toBe(
      true,
    );
    // Alice watches: long past the idle time the room still runs.
    await app.services.vm.sweep(new Date(Date.now() + 61_000));
    expect(app.services.vm.isRunning(chat1)).toBe(true);
  });

  it('refuses vm:control:release from a Moderator whose socket is not in the chat (ERR_NOT_CHAT_MEMBER)', async () => {
    const moderator = await member(app, { level: 1 });
    expect(await ack(moderator, 'vm:control:release', { chat_id: chat1 })).toMatchObject({
      ok: false,
      code: 'ERR_NOT_CHAT_MEMBER',
    });
    expect((await stats()).controllers).toBe(1);
    // In the chat, a Moderator takes control from anyone; alice has it back at once.
    expect((await join(moderator, { chat_id: chat1 })).ok).toBe(true);
    expect((await ack(moderator, 'vm:control:release', { chat_id: chat1 })).ok).toBe(true);
    expect((await stats()).controllers).toBe(0);
    expect((await ack(alice, 'vm:control:request', { chat_id: chat1 })).granted).toBe(true);
  });

  it('adds no viewer for a socket that leaves the chat while its vm:watch is checked', async () => {
    dave = await member(app);
    expect((await join(dave, { chat_id: chat1 })).ok).toBe(true);
    const token = (await ack(dave, 'vm:credentials', { chat_id: chat1 })).credentials.token;
    const second = await connectSocket(app.url, dave.client);
    expect(((await second.emitWithAck('room:join', { chat_id: chat1 } as never)) as { ok: boolean }).ok).toBe(true);
    const caller = callerOf(dave, second.id as string);
    const watching = app.services.vm.watch(caller, chat1, token);
    caller.drop(); // gone while the watch awaits the membership check
    await expect(watching).rejects.toMatchObject({ code: 'ERR_NOT_CHAT_MEMBER' });
    expect(await stats()).toEqual({ active_browsers: 1, viewers: 1, controllers: 1 });
  });

  it('grants no control to a user whose last socket leaves the chat while the request is checked', async () => {
    expect((await ack(alice, 'vm:control:release', { chat_id: chat1 })).ok).toBe(true);
    const caller = callerOf(dave, dave.socket.id as string);
    const asking = app.services.vm.requestControl(caller, chat1);
    caller.drop(); // dave's only socket: gone before the room's node checks the request
    await expect(asking).rejects.toMatchObject({ code: 'ERR_NOT_CHAT_MEMBER' });
    expect((await stats()).controllers).toBe(0);
    expect(await ack(alice, 'vm:control:request', { chat_id: chat1 })).toMatchObject({
      granted: true,
      controller_user_id: alice.user.id,
    });
  });

  it('refuses vm:control:grant to a member with no socket in the chat (ERR_NOT_CHAT_MEMBER); control stays', async () => {
    // Dave is a member of the chat, but his sockets are gone (the test above): he could neither use
    // control nor lose it by leaving.
    expect(await ack(owner, 'vm:control:grant', { chat_id: chat1, user_id: dave.user.id })).toMatchObject({
      ok: false,
      code: 'ERR_NOT_CHAT_MEMBER',
    });
    expect(await ack(bob, 'vm:control:request', { chat_id: chat1 })).toMatchObject({
      granted: false,
      controller_user_id: alice.user.id,
    });
    // Back in the chat, he gets it.
    dave.socket = await connectSocket(app.url, dave.client);
    expect((await join(dave, { chat_id: chat1 })).ok).toBe(true);
    expect((await ack(owner, 'vm:control:grant', { chat_id: chat1, user_id: dave.user.id })).ok).toBe(true);
    await alice.socket.next('vm:control', (p) => p.chat_id === chat1 && p.controller_user_id === dave.user.id);
    expect((await ack(owner, 'vm:control:grant', { chat_id: chat1, user_id: alice.user.id })).ok).toBe(true);
  });

  it('lets an anonymous stranger watch the room of its direct chat, never control it (ERR_STRANGER_NOT_ALLOWED)', async () => {
    const strangerClient = new Client(app.url, undefined, app.publicApiKey);
    const made = await strangerClient.post('/v1/portal/stranger', {});
    expect(made.status).toBe(200);
    strangerClient.apiKey = null;
    const strangerId = made.body.user.id as number;
    const s = {
      client: strangerClient,
      socket: await connectSocket(app.url, strangerClient),
      user: made.body.user,
    } as Member;
    const peer = await member(app);
    const direct = await app.services.chats.createDirect([strangerId, peer.user.id], ['vmwatch']);
    if ('refused' in direct) throw new Error('the direct chat was refused');
    const chatId = direct.chat.id;
    for (const m of [s, peer]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    expect((await peer.client.post(`/v1/portal/chats/${chatId}/start`, {})).status).toBe(200);
    try {
      const { credentials } = await s.socket.next('room:started', (p) => p.chat_id === chatId);
      const watch = autoAck(s.socket, chatId);
      expect(await ack(s, 'vm:watch', { chat_id: chatId, token: credentials.token })).toMatchObject({ ok: true });
      await s.socket.next('vm:frame', (p) => p.chat_id === chatId);
      watch.stop();
      const refused = { ok: false, code: 'ERR_STRANGER_NOT_ALLOWED', message: expect.any(String) };
      expect(await ack(s, 'vm:control:request', { chat_id: chatId })).toEqual(refused);
      expect(await ack(s, 'vm:input', { chat_id: chatId, kind: 'navigate', url: site.url('/page2') })).toEqual(refused);
      expect(
        await ack(s, 'vm:input', { chat_id: chatId, kind: 'mouse', type: 'down', x: 1, y: 1, button: 'left' }),
      ).toEqual(refused);
      // Nor does a moderator hand it control: a grant to a stranger is refused on the room's node.
      const staff = { ...callerOf(admin, admin.socket.id as string), permissionLevel: 2, joined: () => true };
      await expect(app.services.vm.grant(staff, chatId, strangerId)).rejects.toMatchObject({
        code: 'ERR_STRANGER_NOT_ALLOWED',
      });
      expect(await ack(peer, 'vm:control:request', { chat_id: chatId })).toMatchObject({
        ok: true,
        granted: true,
        controller_user_id: peer.user.id,
      });
    } finally {
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/stop`, {})).status).toBe(200);
    }
  });

  it('answers ERR_FORBIDDEN to browser shortcuts in vm:input; the room stays as it was', async () => {
    const key = (type: 'down' | 'up', k: string, code: string) =>
      ack(alice, 'vm:input', { chat_id: chat1, kind: 'key', type, key: k, code });
    expect((await key('down', 'Control', 'ControlLeft')).ok).toBe(true);
    expect(await key('down', 'w', 'KeyW')).toMatchObject({ ok: false, code: 'ERR_FORBIDDEN' });
    expect(await key('up', 'w', 'KeyW')).toMatchObject({ ok: false, code: 'ERR_FORBIDDEN' });
    expect((await key('up', 'Control', 'ControlLeft')).ok).toBe(true);
    expect((await key('down', 'Alt', 'AltLeft')).ok).toBe(true);
    expect(await key('down', 'ArrowLeft', 'ArrowLeft')).toMatchObject({ ok: false, code: 'ERR_FORBIDDEN' });
    expect((await key('up', 'Alt', 'AltLeft')).ok).toBe(true);
    expect(await evaluate(chat1, 'location.pathname')).toBe('/button');
    expect((await ack(alice, 'vm:input', { chat_id: chat1, kind: 'wheel', x: 10, y: 10, dx: 0, dy: -10 })).ok).toBe(
      true,
    );
  });

  it('a new controller does not inherit the keys and mouse buttons the previous controller held', async () => {
    // The page records the key and button releases it gets; its field is emptied.
    await evaluate(
      chat1,
      `window.released = [];
       document.addEventListener('keyup', (e) => window.released.push(e.key), true);
       document.addEventListener('mouseup', (e) => window.released.push('button' + e.button), true);
       document.getElementById('field').value = ''; document.activeElement?.blur(); true`,
    );
    const input = (m: Member, more: object) => ack(m, 'vm:input', { chat_id: chat1, ...more });
    // Alice holds Control and the left button when the owner hands control to Bob.
    expect((await input(alice, { kind: 'key', type: 'down', key: 'Control', code: 'ControlLeft' })).ok).toBe(true);
    expect((await input(alice, { kind: 'mouse', type: 'down', x: 20, y: 600, button: 'left' })).ok).toBe(true);
    expect((await ack(owner, 'vm:control:grant', { chat_id: chat1, user_id: bob.user.id })).ok).toBe(true);
    // The page saw both let go, as if Alice had released them.
    await eventually(
      async () => JSON.stringify(await evaluate(chat1, 'window.released')) === '["button0","Control"]',
      WAIT_MS,
      'the releases',
    );
    // Bob clicks into the field and types "w": a plain key, no Ctrl+W.
    for (const type of ['down', 'up'])
      expect((await input(bob, { kind: 'mouse', type, x: 650, y: 120, button: 'left' })).ok).toBe(true);
    for (const type of ['down', 'up'])
      expect(await input(bob, { kind: 'key', type, key: 'w', code: 'KeyW' })).toEqual({ ok: true });
    await eventually(async () => (await evaluate(chat1, 'document.activeElement?.value')) === 'w', WAIT_MS, 'typing');
    expect((await ack(owner, 'vm:control:grant', { chat_id: chat1, user_id: alice.user.id })).ok).toBe(true);
  });

  it('sends a viewer the next frame only after its ack; kiosk rooms refuse navigation; start_url is honoured', async () => {
    chat2 = await createChat(owner, 'Room two');
    expect((await join(owner, { chat_id: chat2 })).ok).toBe(true);
    settings.set(chat2, { start_url: site.url('/anim'), kiosk: true });
    expect((await owner.client.post(`/v1/portal/chats/${chat2}/start`, {})).status).toBe(200);
    const token = (await ack(owner, 'vm:credentials', { chat_id: chat2 })).credentials.token;
    const watchedAt = Date.now();
    expect((await ack(owner, 'vm:watch', { chat_id: chat2, token })).ok).toBe(true);
    await owner.socket.next('vm:frame', (p) => p.chat_id === chat2, WAIT_MS);
    const frames = () => owner.socket.received.filter((r) => r.event === 'vm:frame' && r.payload.chat_id === chat2);
    // The page animates (dozens of frames a second), so the window fills (how fast depends on the load) ...
    await eventually(() => frames().length >= FRAME_WINDOW, WAIT_MS, 'a full frame window');
    // ... and then nothing more arrives without an ack, but for the resend of an unacknowledged frame
    // (frames are volatile and may be lost): at most one per ACK_TIMEOUT_MS since the watch began,
    // which a machine stalled for seconds can reach.
    await new Promise((r) => setTimeout(r, 1200));
    const resendsAllowed = Math.floor((Date.now() - watchedAt) / ACK_TIMEOUT_MS);
    expect(frames().length).toBeGreaterThanOrEqual(FRAME_WINDOW);
    expect(frames().length).toBeLessThanOrEqual(FRAME_WINDOW + resendsAllowed);
    const held = frames().at(-1)?.payload;
    // Meanwhile the page makes more frames; while the window is full they replace each other. Wait
    // (on the room's own frames) until it has made at least two past the last one sent.
    let made = 0;
    const stopWatching = app.vmProvider.subscribe(String(chat2), (f) => {
      made = Math.max(made, f.seq);
    });
    try {
      await eventually(() => made >= held.seq + 2, WAIT_MS, 'two more frames of the room');
    } finally {
      stopWatching();
    }
    expect((await ack(owner, 'vm:frame:ack', { chat_id: chat2, seq: held.seq })).ok).toBe(true);
    const next = await owner.socket.next('vm:frame', (p) => p.chat_id === chat2 && p.seq > held.seq);
    expect(next.seq).toBeGreaterThan(held.seq + 1); // the frames in between were skipped, not queued

    expect(await evaluate(chat2, 'location.pathname')).toBe('/anim');
    expect((await ack(owner, 'vm:control:grant', { chat_id: chat2, user_id: owner.user.id })).ok).toBe(true);
    const served = site.hits.length;
    for (const nav of [{ url: site.url('/page2') }, { action: 'reload' }]) {
      expect(await ack(owner, 'vm:input', { chat_id: chat2, kind: 'navigate', ...nav })).toMatchObject({
        ok: false,
        code: 'ERR_FORBIDDEN',
        message: expect.stringMatching(/kiosk/),
      });
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(site.hits.slice(served).filter((h) => h !== '/anim' && h !== '/favicon.ico')).toEqual([]);
  });

  it('answers 503 ERR_ROOM_START_FAILED when the node runs its maximum, and for a Tor room', async () => {
    const chat3 = await createChat(owner, 'Room three');
    const full = await owner.client.post(`/v1/portal/chats/${chat3}/start`, {});
    expect(full.status).toBe(503);
    expect(full.body).toMatchObject({ code: 'ERR_ROOM_START_FAILED', message: expect.stringMatching(/no capacity/i) });
    settings.set(chat3, { browser: 'tor' });
    const tor = await owner.client.post(`/v1/portal/chats/${chat3}/start`, {});
    expect(tor.status).toBe(503);
    expect(tor.body.message).toMatch(/Tor/);
  });

  it('ends a kicked member’s stream at once and drops their control', async () => {
    const bobWatch = autoAck(bob.socket, chat1);
    expect((await ack(bob, 'vm:watch', { chat_id: chat1, token: bobToken })).ok).toBe(true);
    await eventually(() => bobWatch.frames.length > 0, WAIT_MS, 'bob’s first frame');
    expect((await ack(owner, 'vm:control:grant', { chat_id: chat1, user_id: bob.user.id })).ok).toBe(true);
    expect((await stats()).viewers).toBe(3);

    const kicked = await owner.client.post(`/v1/portal/chats/${chat1}/kick`, { user_id: bob.user.id });
    expect(kicked.status, JSON.stringify(kicked.body)).toBe(200);
    await bob.socket.next('room:left', (p) => p.chat_id === chat1);
    await owner.socket.next('vm:control', (p) => p.chat_id === chat1 && p.controller_user_id === null);
    const bobFrames = bobWatch.frames.length;
    const aliceFrames = aliceWatch.frames.length;
    // The window between a kick's commit and its sockets leaving the room: admin's membership ends
    // while the socket stays in. The room's node checks the membership and hands nothing over.
    const m = schema.chatMembers;
    const adminRow = and(eq(m.chatId, chat1), eq(m.userId, admin.user.id), isNull(m.leftAt));
    const leftAt = new Date();
    await app.database.db.update(m).set({ leftAt }).where(adminRow);
    const requestsBefore = owner.socket.received.filter((r) => r.event === 'vm:control:request').length;
    expect(await ack(admin, 'vm:control:request', { chat_id: chat1 })).toMatchObject({
      ok: false,
      code: 'ERR_NOT_CHAT_MEMBER',
    });
    await app.database.db
      .update(m)
      .set({ leftAt: null })
      .where(and(eq(m.chatId, chat1), eq(m.userId, admin.user.id), eq(m.leftAt, leftAt)));
    expect(owner.socket.received.filter((r) => r.event === 'vm:control:request')).toHaveLength(requestsBefore);
    // The page changes (alice takes control, which admin's request did not, and navigates): alice
    // sees it, bob gets nothing more.
    expect((await ack(alice, 'vm:control:request', { chat_id: chat1 })).granted).toBe(true);
    expect((await ack(alice, 'vm:input', { chat_id: chat1, kind: 'navigate', url: site.url('/page2') })).ok).toBe(true);
    await eventually(() => aliceWatch.frames.length > aliceFrames, WAIT_MS, 'alice’s next frame');
    await new Promise((r) => setTimeout(r, 300));
    expect(bobWatch.frames.length).toBe(bobFrames);
    expect(await ack(bob, 'vm:frame:ack', { chat_id: chat1, seq: 1 })).toMatchObject({ ok: false });
    expect(await ack(bob, 'vm:watch', { chat_id: chat1, token: bobToken })).toMatchObject({
      ok: false,
      code: 'ERR_NOT_CHAT_MEMBER',
    });
    expect(await stats()).toMatchObject({ active_browsers: 2, viewers: 2, controllers: 2 });
  });

  it('restarts a crashed browser once, then stops the room (room:stopped, reason crashed)', async () => {
    const first = app.vmProvider.pidOf(String(chat2)) as number;
    process.kill(first, 'SIGKILL');
    const second = await eventually(() => {
      const pid = app.vmProvider.pidOf(String(chat2));
      return pid !== first && app.vmProvider.status(String(chat2))?.state === 'running' ? pid : undefined;
    });
    expect(app.vmProvider.status(String(chat2))?.restarts).toBe(1);
    // The viewer keeps receiving frames from the new browser.
    const latest = owner.socket.received.filter((r) => r.event === 'vm:frame' && r.payload.chat_id === chat2).at(-1);
    await ack(owner, 'vm:frame:ack', { chat_id: chat2, seq: latest?.payload.seq });
    await owner.socket.next('vm:frame', (p) => p.chat_id === chat2 && p.seq > latest?.payload.seq, WAIT_MS);

    process.kill(second as number, 'SIGKILL');
    expect(await owner.socket.next('room:stopped', (p) => p.chat_id === chat2)).toEqual({
      chat_id: chat2,
      reason: 'crashed',
    });
    expect(app.vmProvider.status(String(chat2))).toBeNull();
    await eventually(() => !alive(first) && !alive(second as number), WAIT_MS, 'both browsers gone');
  });

  it('POST …/stop: members other than the owner and Admins are refused; viewers get room:stopped, frames end', async () => {
    const refused = await alice.client.post(`/v1/portal/chats/${chat1}/stop`, {});
    expect(refused.status).toBe(403);
    expect((await admin.client.post(`/v1/portal/chats/${chat1}/stop`, {})).status).toBe(200);
    expect(await alice.socket.next('room:stopped', (p) => p.chat_id === chat1)).toEqual({
      chat_id: chat1,
      reason: 'stopped',
    });
    const frames = aliceWatch.frames.length;
    expect(await ack(alice, 'vm:frame:ack', { chat_id: chat1, seq: 1 })).toMatchObject({
      ok: false,
      code: 'ERR_ROOM_NOT_RUNNING',
    });
    expect(await ack(alice, 'vm:watch', { chat_id: chat1, token: aliceToken })).toMatchObject({
      code: 'ERR_ROOM_NOT_RUNNING',
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(aliceWatch.frames.length).toBe(frames);
    expect((await owner.client.post(`/v1/portal/chats/${chat1}/stop`, {})).status).toBe(200);
    expect(await stats()).toEqual({ active_browsers: 0, viewers: 0, controllers: 0 });
    expect(app.vmProvider.list()).toEqual([]);
  });

  it('stops a room nobody has watched for the idle time, and not one being watched', async () => {
    expect((await owner.client.post(`/v1/portal/chats/${chat1}/start`, {})).status).toBe(200);
    const token = (await ack(alice, 'vm:credentials', { chat_id: chat1 })).credentials.token;
    expect((await ack(alice, 'vm:watch', { chat_id: chat1, token })).ok).toBe(true);
    const later = () => new Date(Date.now() + 61_000);
    await app.services.vm.sweep(later());
    expect(app.services.vm.isRunning(chat1)).toBe(true);
    expect((await ack(alice, 'vm:unwatch', { chat_id: chat1 })).ok).toBe(true);
    await app.services.vm.sweep(new Date(Date.now() + 30_000));
    expect(app.services.vm.isRunning(chat1)).toBe(true);
    await app.services.vm.sweep(later());
    expect(await alice.socket.next('room:stopped', (p) => p.chat_id === chat1 && p.reason === 'idle')).toBeTruthy();
    expect(app.vmProvider.list()).toEqual([]);
  });

  it('leaves no browser process behind after the app closes', async () => {
    expect((await owner.client.post(`/v1/portal/chats/${chat1}/start`, {})).status).toBe(200);
    expect((await owner.client.post(`/v1/portal/chats/${chat2}/start`, {})).status).toBe(200);
    const memory = await app.vmProvider.memoryBytes(String(chat1));
    process.stdout.write(`room VM memory (browser process tree, /button page): ${Math.round(memory / 2 ** 20)} MiB\n`);
    const pids = [chat1, chat2].map((id) => app.vmProvider.pidOf(String(id)) as number);
    expect(pids.every(alive)).toBe(true);
    await app.close();
    appClosed = true;
    for (const pid of pids) expect(alive(pid)).toBe(false);
    // Renderers, zygotes, GPU and network processes of each browser: killed (zombies wait for init).
    const living = () => {
      try {
        return execFileSync('ps', ['-o', 'stat=', '-s', pids.join(',')], { stdio: ['ignore', 'pipe', 'pipe'] })
          .toString()
          .split('\n')
          .filter((stat) => stat.trim() !== '' && !stat.trim().startsWith('Z')).length;
      } catch (err) {
        // procps ps exits 1, saying nothing, when no process matches. A usage error also exits 1, with
        // a message on stderr; that, a missing ps or any other failure is no proof that none is left.
        const { status, stderr } = err as { status?: number | null; stderr?: Buffer };
        if (status === 1 && stderr !== undefined && stderr.length === 0) return 0;
        throw err;
      }
    };
    await eventually(() => living() === 0, WAIT_MS, 'no browser process left');
  });
});
