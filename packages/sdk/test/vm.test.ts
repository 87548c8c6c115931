import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { startApp, type TestApp } from '../../server/test/support/app.js';
import {
  BROWSER_TEST_TIMEOUT_MS,
  describeBrowser,
  eventually,
  jpegSize,
  startTestSite,
  WAIT_MS,
} from '../../server/test/support/vm-browser.js';
import {
  type BotClient,
  connect,
  joinRoom,
  leaveRoom,
  ParlorApiError,
  type ParlorSocket,
  RoomVm,
  type VmFrame,
} from '../src/index.js';
import { loginUser, type TestUser, testBot } from './support.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/** The room VM as an SDK user drives it: REST start/stop, then RoomVm over the socket. */
let app: TestApp;
let bot: BotClient;
let site: Awaited<ReturnType<typeof startTestSite>>;
const sockets: ParlorSocket[] = [];

beforeAll(async () => {
  site = await startTestSite();
  app = await startApp({ config: { vmAllowPrivateNetworks: true, vmMaxPerNode: 1 } });
  app.services.vm.useSettings(async () => ({ start_url: site.url('/button') }));
  bot = await testBot(app);
});
afterAll(async () => {
  for (const s of sockets) s.disconnect();
  await app?.close();
  await site?.close();
});

async function inChat(user: TestUser, chatId: number) {
  const socket = await connect(user.client, { reconnection: false });
  sockets.push(socket);
  await joinRoom(socket, { chat_id: chatId });
  return socket;
}

describeBrowser('SDK: RoomVm against real Chromium', () => {
  it('starts, watches, takes control, clicks the page and sees it change, then stops', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const viewer = await loginUser(app, bot);
    const { chat } = await owner.client.createChat({ name: 'SDK room', type: 'public' });
    const ownerRoom = new RoomVm(await inChat(owner, chat.id), chat.id);
    const room = new RoomVm(await inChat(viewer, chat.id), chat.id);

    const notRunning = await room.credentials().catch((e: unknown) => e);
    expect(notRunning).toBeInstanceOf(ParlorApiError);
    expect(notRunning).toMatchObject({ code: 'ERR_ROOM_NOT_RUNNING', source: 'socket' });
    const refused = await viewer.client.startRoom(chat.id).catch((e: unknown) => e);
    expect(refused).toMatchObject({ status: 403, code: 'ERR_FORBIDDEN' });

    const started = new Promise((resolve) => room.on('started', resolve));
    expect(await owner.client.startRoom(chat.id)).toEqual({ ok: true });
    expect(await started).toMatchObject({ credentials: { token: expect.any(String) } });

    const frames: VmFrame[] = [];
    room.on('frame', (f) => frames.push(f));
    expect(await room.watch()).toEqual({ width: 1280, height: 720, controller_user_id: null });
    expect(room.watching).toBe(true);
    await eventually(() => frames.length > 0, WAIT_MS, 'a first frame');
    expect(jpegSize((frames[0] as VmFrame).data)).toEqual({ width: 1280, height: 720 });

    const controls: (number | null)[] = [];
    ownerRoom.on('control', (e) => controls.push(e.controller_user_id));
    expect(await room.requestControl()).toEqual({ granted: true, controller_user_id: viewer.user.id });
    await eventually(() => controls.includes(viewer.user.id), WAIT_MS, 'vm:control to the owner');
    const requests: number[] = [];
    ownerRoom.on('controlRequest', (e) => requests.push(e.user_id));
    expect(await ownerRoom.requestControl()).toMatchObject({ granted: false });

    // The button turns the page blue: a later frame delivered through the SDK differs from the last one before.
    const before = frames.at(-1) as VmFrame;
    await room.click(250, 200);
    const changed = await eventually(
      () => frames.find((f) => f.seq > before.seq && !Buffer.from(f.data).equals(Buffer.from(before.data))),
      WAIT_MS,
      'a frame of the clicked page',
    );
    expect(changed?.receivedAt).toBeGreaterThanOrEqual(before.receivedAt);
    expect(await app.vmProvider.evaluate(String(chat.id), 'document.body.dataset.clicked')).toBe('yes');
    await room.typeText('hi');
    await room.navigate(site.url('/page2'));
    await eventually(
      async () => (await app.vmProvider.evaluate(String(chat.id), 'location.pathname')) === '/page2',
      WAIT_MS,
      'navigation',
    );
    await room.release();
    await ownerRoom.grant(viewer.user.id);

    const stopped = new Promise((resolve) => room.on('stopped', resolve));
    expect(await owner.client.stopRoom(chat.id)).toEqual({ ok: true });
    expect(await stopped).toEqual({ reason: 'stopped' });
    expect(room.watching).toBe(false);
    room.close();
    ownerRoom.close();
  });

  it('reports the end of its stream when the socket drops or the membership ends', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const viewer = await loginUser(app, bot);
    const { chat } = await owner.client.createChat({ name: 'SDK room ends', type: 'public' });
    await inChat(owner, chat.id);
    const room = new RoomVm(await inChat(viewer, chat.id), chat.id);
    expect(await owner.client.startRoom(chat.id)).toEqual({ ok: true });
    try {
      await room.watch();
      const dropped = new Promise((resolve) => room.on('stopped', resolve));
      room.socket.disconnect();
      expect(await dropped).toEqual({ reason: 'disconnected' });
      expect(room.watching).toBe(false);
      room.close();

      const again = new RoomVm(await inChat(viewer, chat.id), chat.id);
      const frames: VmFrame[] = [];
      again.on('frame', (f) => frames.push(f));
      await again.watch();
      await eventually(() => frames.length > 0, WAIT_MS, 'a frame on the new socket');
      const left = new Promise((resolve) => again.on('stopped', resolve));
      await leaveRoom(again.socket, chat.id);
      expect(await left).toEqual({ reason: 'left' });
      expect(again.watching).toBe(false);
      again.close();
    } finally {
      await owner.client.stopRoom(chat.id);
    }
  });
});
