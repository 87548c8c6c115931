import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { type Backing, createBacking, MODE, startApp, type TestApp } from './support/app.js';
import { join, type Member, member } from './support/chat-flows.js';
import { Client } from './support/client.js';
import { closeAllSockets } from './support/sockets.js';
import {
  autoAck,
  BROWSER_TEST_TIMEOUT_MS,
  browserAvailable,
  eventually,
  startTestSite,
  WAIT_MS,
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
let site: Awaited<ReturnType<typeof startTestSite>>;
let owner: Member;
let alice: Member;
let chatId: number;

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
  a = await startApp({ backing, config });
  b = await startApp({ backing, config });
  for (const node of [a, b]) node.services.vm.useSettings(async () => ({ start_url: site.url('/button') }));
});
afterAll(async () => {
  closeAllSockets();
  await a?.close();
  await b?.close();
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
  },
);
