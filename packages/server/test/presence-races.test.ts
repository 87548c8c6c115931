import { Redis } from 'ioredis';
import postgres from 'postgres';
import { io, type Socket } from 'socket.io-client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { MODE, type Nodes, startNodes, type TestApp } from './support/app.js';
import { bundle, join, keyEpoch, keyedChat, type Member, member } from './support/chat-flows.js';
import { hold, lockWaiters } from './support/pg-locks.js';
import { closeAllSockets, connectSocket, type TestSocket } from './support/sockets.js';
import { holdReader } from './support/stream-reader.js';

const clusterOnly = describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'));

/** A gate: `reached` resolves once the held code gets there, which then waits for `open`. */
function gate() {
  let reach!: () => void;
  let open!: () => void;
  const reached = new Promise<void>((r) => {
    reach = r;
  });
  const opened = new Promise<void>((r) => {
    open = r;
  });
  return { reached, reach, opened, open };
}

/** The `portal:presence` deltas `to` heard of `sessionId` since `mark` (online or not). */
const deltas = (to: TestSocket, sessionId: number, mark: number) =>
  to.received
    .slice(mark)
    .filter((r) => r.event === 'portal:presence' && r.payload.session_id === sessionId)
    .map((r) => r.payload.online as boolean);

/** Resolves once `to` has heard, since `mark`, a delta of `sessionId` saying `online`. */
async function heardSince(to: TestSocket, mark: number, sessionId: number, online: boolean): Promise<void> {
  await expect.poll(() => deltas(to, sessionId, mark).includes(online), { timeout: 15_000 }).toBe(true);
}

/** Whether a fresh joiner's snapshot (through `node`) lists the session. */
async function listed(node: TestApp, chatId: number, sessionId: number): Promise<boolean> {
  const other = await member(node);
  const snapshot = await join(other, { chat_id: chatId });
  return (snapshot.members as { session_id: number }[]).some((m) => m.session_id === sessionId);
}

/**
 * A member joining through `node` after the rest: its online delta, sent by that node after what it
 * sent before, is the barrier that tells `owner` has heard everything that node said earlier.
 */
async function barrier(node: TestApp, owner: Member, chatId: number): Promise<void> {
  const late = await member(node);
  expect((await join(late, { chat_id: chatId })).ok).toBe(true);
  await owner.socket.next('portal:presence', (p) => p.session_id === late.sessionId && p.online === true);
}

clusterOnly('Presence against a kick, on a node that reads the stream late (cluster)', () => {
  let nodes: Nodes;
  let a: TestApp;
  let b: TestApp;
  const opened: Socket[] = [];
  beforeAll(async () => {
    nodes = await startNodes();
    ({ a, b } = nodes);
  });
  afterAll(async () => {
    for (const s of opened) s.close();
    closeAllSockets();
    await nodes?.close();
  });

  it('room:join: a kick committing once the join entered, while it reads the key ring, says the session offline last, and the join answers ERR_NOT_CHAT_MEMBER', async () => {
    const { owner, chatId } = await keyedChat(a);
    const guest = await member(b);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    await owner.socket.next('portal:presence', (p) => p.session_id === guest.sessionId && p.online === true);
    guest.socket.close();
    await owner.socket.next('portal:presence', (p) => p.session_id === guest.sessionId && p.online === false);
    const mark = owner.socket.received.length;

    // Another tab of the session re-enters through B; its join has entered and committed, and waits
    // to read the key ring, its last read (session_keys locked here), while B's reader lags.
    const tab = await connectSocket(b.url, guest.client);
    const sql = postgres(a.config.databaseUrl ?? '', { max: 2, onnotice: () => {} });
    const ringLock = hold(sql, (tx) => tx`lock table session_keys in access exclusive mode`);
    const reader = holdReader(b);
    let ack: { ok: boolean; code?: string };
    try {
      await ringLock.ready;
      const pending = tab.emitWithAck('room:join', { chat_id: chatId, rejoin: true } as never);
      await lockWaiters(sql, 1);
      const kick = await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: guest.user.id, reason: 'x' });
      expect(kick.status, JSON.stringify(kick.body)).toBe(200);
      await heardSince(owner.socket, mark, guest.sessionId, false);
      // B has not applied the kick's sockets-leave: the tab is still in the room there.
      await expect.poll(() => reader.count()).toBeGreaterThan(0);
      expect(tab.id && b.services.realtime.io.of('/').adapter.rooms.get(`chat:${chatId}`)?.has(tab.id)).toBe(true);
      await ringLock.end();
      ack = (await pending) as typeof ack;
    } finally {
      await ringLock.end();
      reader.release();
      await sql.end({ timeout: 1 });
    }
    expect(ack).toMatchObject({ ok: false, code: 'ERR_NOT_CHAT_MEMBER' });
    await barrier(b, owner, chatId);
    // Online when it entered (under the membership), offline by the kick, which committed after.
    expect(deltas(owner.socket, guest.sessionId, mark)).toEqual([true, false]);
    expect(
      b.services.realtime.io
        .of('/')
        .adapter.rooms.get(`chat:${chatId}`)
        ?.has(tab.id ?? ''),
    ).not.toBe(true);
    expect(await listed(a, chatId, guest.sessionId)).toBe(false);
  }, 60_000);

  it("a recovered socket: a kick committing while its rooms are checked again says it offline after the check's online", async () => {
    const chat = await keyedChat(a);
    const { owner, chatId } = chat;
    const guest = await member(b);
    // Its only socket: one that can be recovered (the test sockets do not keep their session).
    guest.socket.close();
    const socket = io(b.url, {
      transports: ['websocket'],
      extraHeaders: { cookie: `psession=${guest.client.cookie}` },
      reconnection: false,
      forceNew: true,
    });
    opened.push(socket);
    const got: string[] = [];
    const left: { chat_id: number; reason: string }[] = [];
    socket.on('message:new', (m: { id: string }) => got.push(m.id));
    socket.on('room:left', (p: { chat_id: number; reason: string }) => left.push(p));
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
    });
    expect(((await socket.emitWithAck('room:join', { chat_id: chatId })) as { ok: boolean }).ok).toBe(true);
    await owner.socket.next('portal:presence', (p) => p.session_id === guest.sessionId && p.online === true);
    // An event it gets, so its connection has an offset to recover from.
    const sent = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chat.chatKey, chatId, chat.epoch, 'one'),
    });
    expect(sent.status).toBe(200);
    await expect.poll(() => got.includes(sent.body.id)).toBe(true);
    const dropped = owner.socket.received.length;
    const down = new Promise<void>((r) => socket.once('disconnect', () => r()));
    socket.io.engine.close();
    await down;
    await heardSince(owner.socket, dropped, guest.sessionId, false);
    const mark = owner.socket.received.length;

    // The recovered socket's check of its rooms on connect answers slowly once it has read them.
    const chats = b.services.chats as unknown as { underMemberships: (...args: unknown[]) => Promise<void> };
    const original = chats.underMemberships;
    const held = gate();
    chats.underMemberships = async (...args: unknown[]) => {
      await original.apply(chats, args);
      held.reach();
      await held.opened;
    };
    const reader = holdReader(b);
    try {
      const back = new Promise<string | null>((resolve) => {
        socket.once('connect', () => resolve(null));
        socket.once('connect_error', (err) => resolve(err.message));
        socket.connect();
      });
      expect(await back).toBeNull();
      expect(socket.recovered).toBe(true);
      await held.reached;
      const kick = await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: guest.user.id, reason: 'x' });
      expect(kick.status).toBe(200);
      await heardSince(owner.socket, mark, guest.sessionId, false);
      await expect.poll(() => reader.count()).toBeGreaterThan(0);
      held.open();
    } finally {
      chats.underMemberships = original;
      held.open();
      reader.release();
    }
    await barrier(b, owner, chatId);
    expect(deltas(owner.socket, guest.sessionId, mark)).toEqual([true, false]);
    // B applied the kick's leave: the socket is out of the room, told why.
    await expect.poll(() => left).toContainEqual({ chat_id: chatId, reason: 'kicked' });
    expect(
      b.services.realtime.io
        .of('/')
        .adapter.rooms.get(`chat:${chatId}`)
        ?.has(socket.id ?? ''),
    ).not.toBe(true);
    expect(await listed(a, chatId, guest.sessionId)).toBe(false);
  }, 60_000);

  it('room:join of a member kicked on A and member again through A: its socket on a node whose reader lags stays in the room and gets the chat', async () => {
    const chat = await keyedChat(a);
    const { owner, chatId } = chat;
    const guest = await member(a);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    // Another tab of the same session, on B, in the room under that membership.
    const tab = await connectSocket(b.url, guest.client);
    expect(((await tab.emitWithAck('room:join', { chat_id: chatId } as never)) as { ok: boolean }).ok).toBe(true);

    const reader = holdReader(b);
    const realtime = b.services.realtime;
    const catchUp = realtime.catchUpRooms;
    const waiting = gate();
    realtime.catchUpRooms = () => {
      waiting.reach();
      return catchUp.call(realtime);
    };
    let ack: { ok: boolean; code?: string };
    try {
      const kick = await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: guest.user.id, reason: 'x' });
      expect(kick.status).toBe(200);
      // B has not applied the kick's sockets-leave of the guest's sockets: the tab seems in the room.
      await expect.poll(() => reader.count()).toBeGreaterThan(0);
      // Member again through A (a new membership; A applied its own leave first).
      expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
      // The tab on B joins under the new membership, which it already holds (not a new member's join).
      const pending = tab.emitWithAck('room:join', { chat_id: chatId } as never) as Promise<typeof ack>;
      // B's reader reads on once the join waits for it, or once the join answered without waiting.
      await Promise.race([waiting.reached, pending]);
      reader.release();
      ack = await pending;
    } finally {
      realtime.catchUpRooms = catchUp;
      reader.release();
    }
    expect(ack).toMatchObject({ ok: true });
    // The kick's leave was applied before the tab entered again: it is in the room, and gets the chat.
    expect(tab.id && b.services.realtime.io.of('/').adapter.rooms.get(`chat:${chatId}`)?.has(tab.id)).toBe(true);
    const k = await keyEpoch(owner, chatId);
    const sent = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(k.chatKey, chatId, k.epoch, 'after the rejoin'),
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    await tab.next('message:new', (m) => m.id === sent.body.id);
  }, 60_000);

  it('a node swept as dead that comes back says online only the presences still held by a member', async () => {
    const { owner, chatId } = await keyedChat(a);
    const guest = await member(b);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    await owner.socket.next('portal:presence', (p) => p.session_id === guest.sessionId && p.online === true);
    // Joined after the guest: B holds its presence after the guest's, and says it online after it.
    const stays = await member(b);
    expect((await join(stays, { chat_id: chatId })).ok).toBe(true);
    await owner.socket.next('portal:presence', (p) => p.session_id === stays.sessionId && p.online === true);
    const mark = owner.socket.received.length;

    // B stalls: its reader has not read the kick (made on A) when B is swept and comes back.
    const reader = holdReader(b);
    const redis = new Redis(a.config.redisUrl ?? '');
    try {
      const kick = await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: guest.user.id, reason: 'x' });
      expect(kick.status).toBe(200);
      await heardSince(owner.socket, mark, guest.sessionId, false);
      await expect.poll(() => reader.count()).toBeGreaterThan(0);
      // B's heartbeat expired during the stall: A sweeps it and says what it held offline.
      await redis.del(`${a.config.redisPrefix}presence:alive:${b.services.realtime.nodePresence?.nodeId}`);
      await a.services.realtime.nodePresence?.beat();
      await heardSince(owner.socket, mark, stays.sessionId, false);
      // B resumes: its heartbeat finds it was swept, before its reader has read the backlog.
      await b.services.realtime.nodePresence?.beat();
    } finally {
      reader.release();
      redis.disconnect();
    }
    // The member B still holds is said online again (after the guest, had it been said).
    await heardSince(owner.socket, mark, stays.sessionId, true);
    expect(deltas(owner.socket, guest.sessionId, mark)).toEqual([false, false]);
    expect(await listed(a, chatId, guest.sessionId)).toBe(false);
  }, 60_000);
});
