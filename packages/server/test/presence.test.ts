import { connect, HttpClient, joinRoom, type ParlorSocket } from '@parlor/sdk';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { schema } from '../src/platform/db/index.js';
import { describeApp, type Nodes, startNodes, type TestApp } from './support/app.js';
import { bundle, join, keyEpoch, keyedChat, type Member, member } from './support/chat-flows.js';
import type { Answer } from './support/client.js';
import { createBot, operator } from './support/flows.js';
import { closeAllSockets, connectSocket, disconnected } from './support/sockets.js';

// Two nodes over one store in the cluster project (one node, both A and B, embedded).
let nodes: Nodes;
let app: TestApp;
beforeAll(async () => {
  nodes = await startNodes();
  app = nodes.a;
});
afterAll(async () => {
  closeAllSockets();
  await nodes?.close();
});

/** Another public chat of `owner`, whose room its socket is in. */
async function sideChat(owner: Member): Promise<number> {
  const created = await owner.client.post('/v1/portal/chats/create', { name: 'Side chat', type: 'public' });
  expect(created.status).toBe(200);
  const chatId: number = created.body.chat.id;
  expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
  return chatId;
}

/** The `portal:presence` deltas a socket got about one session in one chat, in order. */
const presenceDeltas = (m: Member, chatId: number, sessionId: number) =>
  m.socket.received
    .filter((r) => r.event === 'portal:presence' && r.payload.chat_id === chatId && r.payload.session_id === sessionId)
    .map((r) => r.payload.online as boolean);

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);

describeApp('presence in a chat', () => {
  it('gives a joiner the whole list, one entry per connected session, in its ack and room:members', async () => {
    const { owner, chatId } = await keyedChat(app);
    const g1 = await member(app);
    const g2 = await member(app, { platformUserId: g1.platformUserId });
    await join(g1, { chat_id: chatId });
    const ack = await join(g2, { chat_id: chatId });
    const expected = sorted([owner.sessionId, g1.sessionId, g2.sessionId]);
    expect(sorted(ack.members.map((m: any) => m.session_id))).toEqual(expected);
    const list = await g2.socket.next('room:members', (e) => e.chat_id === chatId);
    expect(sorted(list.members.map((m: any) => m.session_id))).toEqual(expected);
    expect(list.members).toContainEqual({ user_id: g1.user.id, session_id: g2.sessionId, username: g1.user.username });
  });

  it('tells the others of a join and a disconnect by portal:presence only, never the whole list', async () => {
    const { owner, chatId } = await keyedChat(app);
    const guest = await member(app);
    await join(guest, { chat_id: chatId });
    await owner.socket.next(
      'portal:presence',
      (e) => e.chat_id === chatId && e.session_id === guest.sessionId && e.online === true,
    );
    expect((await owner.socket.next('portal:presence', (e) => e.session_id === guest.sessionId)).user_id).toBe(
      guest.user.id,
    );
    guest.socket.close();
    await owner.socket.next('portal:presence', (e) => e.session_id === guest.sessionId && e.online === false);
    // Both changes have reached the owner; a member list sent with either would have come first.
    // (The owner's only list is its own, from when it joined: itself alone.)
    const lists = owner.socket.received.filter((r) => r.event === 'room:members' && r.payload.chat_id === chatId);
    expect(lists.map((r) => r.payload.members.map((m: any) => m.session_id))).toEqual([[owner.sessionId]]);
  });

  it('says a member who leaves is no longer present, for each of its sessions in the room', async () => {
    const { owner, chatId } = await keyedChat(app);
    const g1 = await member(app);
    const g2 = await member(app, { platformUserId: g1.platformUserId });
    await join(g1, { chat_id: chatId });
    await join(g2, { chat_id: chatId });
    expect(await g1.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    for (const sessionId of [g1.sessionId, g2.sessionId]) {
      expect(
        await owner.socket.next('portal:presence', (e) => e.session_id === sessionId && e.online === false),
      ).toEqual({ chat_id: chatId, user_id: g1.user.id, session_id: sessionId, online: false });
    }
  });

  it('a join whose membership a leave ended before it answered: ERR_NOT_CHAT_MEMBER, and its session is not left online', async () => {
    const { owner, chatId } = await keyedChat(app);
    const g = await member(app);
    expect((await join(g, { chat_id: chatId })).ok).toBe(true);
    // Another socket of the same session (a tab, a reconnect) enters again with rejoin.
    const tab = await connectSocket(app.url, g.client);
    await tab.next('chat:list');
    // Its join has committed (the tab's socket is in the room); the user leaves from its first
    // socket before the socket route answers.
    const chats = app.services.chats;
    const original = chats.join;
    chats.join = async (data, payload, enter) => {
      const out = await original(data, payload, enter);
      if (data.userId !== g.user.id) return out;
      expect(await g.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
      await owner.socket.next(
        'portal:presence',
        (e) => e.chat_id === chatId && e.session_id === g.sessionId && !e.online,
      );
      return out;
    };
    const ack = await (
      tab.emitWithAck('room:join', { chat_id: chatId, rejoin: true } as never) as Promise<any>
    ).finally(() => {
      chats.join = original;
    });
    expect(ack).toMatchObject({ ok: false, code: 'ERR_NOT_CHAT_MEMBER' });
    // A later join's delta reaches the owner after any the tab's join sent.
    const late = await member(app);
    const lateAck = await join(late, { chat_id: chatId });
    expect(lateAck.members.map((m: any) => m.session_id)).not.toContain(g.sessionId);
    await owner.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === late.sessionId);
    // The first join, then the leave, which committed after the tab's entry (the tab's own socket
    // in the room says nothing: its session was present already): offline last.
    expect(presenceDeltas(owner, chatId, g.sessionId)).toEqual([true, false]);
  });

  it('says nothing when a socket enters a room it is already in', async () => {
    const { owner, chatId } = await keyedChat(app);
    const g1 = await member(app);
    const g2 = await member(app);
    await join(g1, { chat_id: chatId });
    await owner.socket.next('portal:presence', (e) => e.session_id === g1.sessionId && e.online === true);
    for (let i = 0; i < 3; i += 1) expect((await join(g1, { chat_id: chatId })).ok).toBe(true);
    // g2's join comes after the repeats; once its delta is here, any delta of theirs would be too.
    await join(g2, { chat_id: chatId });
    await owner.socket.next('portal:presence', (e) => e.session_id === g2.sessionId && e.online === true);
    const deltas = owner.socket.received.filter(
      (r) => r.event === 'portal:presence' && r.payload.chat_id === chatId && r.payload.session_id !== owner.sessionId,
    );
    expect(deltas.map((r) => r.payload.session_id)).toEqual([g1.sessionId, g2.sessionId]);
  });

  it('keeps a session present while another of its sockets is in the room, on any node; offline with its last', async () => {
    const { owner, chatId } = await keyedChat(app);
    const side = await sideChat(owner);
    // One session (same cookie) with a socket on each node: both in the chat, the first also in the side chat.
    const g = await member(app);
    const second = await connectSocket(nodes.b.url, g.client);
    expect((await join(g, { chat_id: chatId })).ok).toBe(true);
    expect((await join(g, { chat_id: side })).ok).toBe(true);
    expect(((await second.emitWithAck('room:join', { chat_id: chatId } as never)) as any).ok).toBe(true);
    g.socket.close();
    // The side chat had no other socket of the session: it hears the session go, after the chat
    // would have (a disconnect announces its chats in the order its socket entered them).
    await owner.socket.next('portal:presence', (e) => e.chat_id === side && e.session_id === g.sessionId && !e.online);
    // (Each socket's first entry said online: a repeated `true` changes no list.)
    expect(presenceDeltas(owner, chatId, g.sessionId)).not.toContain(false);
    // The session is still present in the chat, as a joiner's list says.
    const late = await member(nodes.b);
    const ack = await join(late, { chat_id: chatId });
    expect(ack.members.map((m: any) => m.session_id)).toContain(g.sessionId);
    // Its last socket goes: now it is offline, once.
    second.close();
    await owner.socket.next(
      'portal:presence',
      (e) => e.chat_id === chatId && e.session_id === g.sessionId && !e.online,
    );
    expect(presenceDeltas(owner, chatId, g.sessionId).filter((online) => !online)).toHaveLength(1);
    await late.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === g.sessionId);
    expect(presenceDeltas(late, chatId, g.sessionId)).toEqual([false]);
  });

  it('announces no session whose socket disconnected while its join ran (the membership it made stays)', async () => {
    const { owner, chatId } = await keyedChat(app);
    const side = await sideChat(owner);
    const g = await member(app);
    expect((await join(g, { chat_id: side })).ok).toBe(true);
    // g's join of the chat waits, once the server has it, until its socket is gone.
    const chats = app.services.chats;
    const original = chats.join;
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    let began!: () => void;
    const received = new Promise<void>((r) => {
      began = r;
    });
    let finished: ReturnType<typeof original> | undefined;
    chats.join = (data, payload, enter) => {
      if (data.sessionId !== g.sessionId || !('chat_id' in payload) || payload.chat_id !== chatId)
        return original(data, payload, enter);
      finished = released.then(() => original(data, payload, enter));
      began();
      return finished;
    };
    try {
      g.socket.emit('room:join', { chat_id: chatId } as never, (() => {}) as never);
      await received;
      g.socket.disconnect();
      // The server has handled the disconnect once the side chat hears the session go.
      await owner.socket.next(
        'portal:presence',
        (e) => e.chat_id === side && e.session_id === g.sessionId && !e.online,
      );
      release();
      expect((await finished)?.chat.id).toBe(chatId);
    } finally {
      chats.join = original;
    }
    // A later join's delta reaches the owner after any the finished join sent.
    const late = await member(app);
    const ack = await join(late, { chat_id: chatId });
    expect(ack.members.map((m: any) => m.session_id)).not.toContain(g.sessionId);
    await owner.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === late.sessionId);
    expect(presenceDeltas(owner, chatId, g.sessionId)).toEqual([]);
    // The join itself was real: g is a member.
    expect((await g.client.get('/v1/portal/chats')).body.chats.map((c: any) => c.id)).toContain(chatId);
  });

  it('a kick says offline a session that ended just before it, whose socket its node had not dropped yet', async () => {
    const { owner, chatId } = await keyedChat(app);
    const target = await member(app);
    expect((await join(target, { chat_id: chatId })).ok).toBe(true);
    await owner.socket.next('portal:presence', (e) => e.session_id === target.sessionId && e.online);
    // The session ended (as its expiry or a logout on a slow node): its socket is still in the room.
    await app.database.db
      .update(schema.sessions)
      .set({ endedAt: new Date(Date.now() - 1000) })
      .where(eq(schema.sessions.id, target.sessionId));
    const kicked = await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: target.user.id });
    expect(kicked.status).toBe(200);
    await owner.socket.next('portal:presence', (e) => e.session_id === target.sessionId && !e.online);
  });

  it('a kick asks no node for sockets while it holds the chat: with every socket read stalled, it and a send in the chat go through', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const target = await member(app);
    expect((await join(target, { chat_id: chatId })).ok).toBe(true);
    const realtime = app.services.realtime;
    const original = realtime.socketsIn;
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    // A node that does not answer: every read of sockets waits until the end of the test.
    realtime.socketsIn = async (room) => {
      await released;
      return original(room);
    };
    try {
      const kicked = await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: target.user.id });
      expect(kicked.status).toBe(200);
      await owner.socket.next('portal:presence', (e) => e.session_id === target.sessionId && !e.online);
      const { chatKey: next, epoch: nextEpoch } = await keyEpoch(owner, chatId);
      expect(nextEpoch).toBe(epoch + 1);
      const sent = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
        content: bundle(next, chatId, nextEpoch, 'after the kick'),
      });
      expect(sent.status, JSON.stringify(sent.body)).toBe(200);
      expect(chatKey).not.toEqual(next);
    } finally {
      release();
      realtime.socketsIn = original;
    }
  });

  it('a kick says the session offline after its sockets-leave; a join making a member again right after it ends present', async () => {
    const { owner, chatId } = await keyedChat(app);
    const target = await member(app);
    // Another live session of the user, never in the chat: its offline changes no list.
    const elsewhere = await member(app, { platformUserId: target.platformUserId });
    expect((await join(target, { chat_id: chatId })).ok).toBe(true);
    await owner.socket.next('portal:presence', (e) => e.session_id === target.sessionId && e.online);
    const kicking = owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: target.user.id });
    await target.socket.next('room:left', (e) => e.chat_id === chatId);
    const rejoin = join(target, { chat_id: chatId });
    expect((await kicking).status).toBe(200);
    // The join came after the kick (a new membership): ok, in the room, said online after the offline.
    expect(await rejoin).toMatchObject({ ok: true });
    await owner.socket.next('portal:presence', (e) => e.session_id === target.sessionId && !e.online);
    const late = await member(app);
    const ack = await join(late, { chat_id: chatId });
    expect(ack.members.map((m: any) => m.session_id)).toContain(target.sessionId);
    expect(ack.members.map((m: any) => m.session_id)).not.toContain(elsewhere.sessionId);
    await owner.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === late.sessionId);
    expect(presenceDeltas(owner, chatId, target.sessionId)).toEqual([true, false, true]);
    expect(presenceDeltas(owner, chatId, elsewhere.sessionId).filter(Boolean)).toEqual([]);
    // In the room: the owner's message of the new epoch reaches it.
    const { chatKey, epoch } = await keyEpoch(owner, chatId);
    const sent = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch, 'after the rejoin'),
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    await target.socket.next('message:new', (m) => m.id === sent.body.id);
  });
});

let tagCounter = 0;
/** A tag no other test uses, so tests do not pair across each other. */
const tag = () => `pres${Date.now() % 1000}x${++tagCounter}`;

/** `a` waits on a fresh tag and `b` pairs with it through node A: their direct chat's id. */
async function matched(a: Member, b: Member): Promise<number> {
  const t = tag();
  expect((await a.client.on(nodes.a).post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
  expect((await b.client.on(nodes.a).post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
  return (await a.socket.next('match:found')).chat_id;
}

describeApp('presence in a new direct chat, and of a second socket of one session', () => {
  it("the peer of a new match hears the other's session online, once, before its offline", async () => {
    const [a, b] = [await member(app), await member(app)];
    const chatId = await matched(a, b);
    await a.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === b.sessionId);
    // Their joins of the chat they are in already say nothing more.
    expect((await join(a, { chat_id: chatId })).ok).toBe(true);
    expect((await join(b, { chat_id: chatId })).ok).toBe(true);
    b.socket.close();
    await a.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === b.sessionId && !e.online);
    expect(presenceDeltas(a, chatId, b.sessionId)).toEqual([true, false]);
  });

  // Cluster: the match is made on node A, B's socket is on node B. B's node puts it in the room,
  // and its room:join (as a client does on match:found) says it online: once, before its offline.
  it('a peer whose socket is on another node than the match is said online once by its join at the latest', async () => {
    const a = await member(app);
    const b = await member(nodes.b);
    const chatId = await matched(a, b);
    expect((await join(b, { chat_id: chatId })).ok).toBe(true);
    await a.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === b.sessionId && e.online);
    b.socket.close();
    await a.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === b.sessionId && !e.online);
    expect(presenceDeltas(a, chatId, b.sessionId)).toEqual([true, false]);
  });

  it('a second socket of a session joining a chat it is present in says nothing; its last socket going says offline once', async () => {
    const { owner, chatId } = await keyedChat(app);
    const side = await sideChat(owner);
    const g = await member(app);
    const second = await connectSocket(app.url, g.client);
    expect((await join(g, { chat_id: chatId })).ok).toBe(true);
    expect((await join(g, { chat_id: side })).ok).toBe(true);
    expect(((await second.emitWithAck('room:join', { chat_id: chatId } as never)) as any).ok).toBe(true);
    // A later join's delta comes after any of the second socket's.
    const late = await member(app);
    await join(late, { chat_id: chatId });
    await owner.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === late.sessionId);
    expect(presenceDeltas(owner, chatId, g.sessionId)).toEqual([true]);
    // The first socket goes: the side chat, where it was the session's only one, hears it (the
    // same read decided the chat, where the second socket keeps the session present).
    g.socket.close();
    await owner.socket.next('portal:presence', (e) => e.chat_id === side && e.session_id === g.sessionId && !e.online);
    second.close();
    await owner.socket.next(
      'portal:presence',
      (e) => e.chat_id === chatId && e.session_id === g.sessionId && !e.online,
    );
    expect(presenceDeltas(owner, chatId, g.sessionId)).toEqual([true, false]);
  });

  it('a session whose two sockets in a chat end at once (a logout) is said offline once', async () => {
    const { owner, chatId } = await keyedChat(app);
    const g = await member(app);
    const second = await connectSocket(app.url, g.client);
    expect((await join(g, { chat_id: chatId })).ok).toBe(true);
    expect(((await second.emitWithAck('room:join', { chat_id: chatId } as never)) as any).ok).toBe(true);
    // The logout drops both sockets in one go: each disconnect's check runs after both left.
    expect((await g.client.post('/v1/authentication/logout')).status).toBe(200);
    await owner.socket.next(
      'portal:presence',
      (e) => e.chat_id === chatId && e.session_id === g.sessionId && !e.online,
    );
    // A later join's delta comes after any other of that logout's.
    const late = await member(app);
    await join(late, { chat_id: chatId });
    await owner.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === late.sessionId);
    expect(presenceDeltas(owner, chatId, g.sessionId)).toEqual([true, false]);
  });
});

/** The ways a user is renamed, each asked of node B (the user's sockets are on node A). */
const renames: [string, (who: Member, username: string) => Promise<Answer>][] = [
  ['the user itself', (who, username) => who.client.on(nodes.b).post('/v1/users/me/update', { username })],
  [
    'a bot',
    async (who, username) =>
      (await createBot(nodes.b)).client.post(`/v1/bot/users/${who.user.id}/update`, { username }),
  ],
  ['an admin', (who, username) => operator(nodes.b).post(`/v1/admin/users/${who.user.id}/update`, { username })],
];

/** Resolves once `socket` is connected again, or rejects after `ms`. */
const reconnected = (socket: ParlorSocket, ms = 10_000) =>
  new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('not connected again')), ms);
    socket.once('connect', () => {
      clearTimeout(t);
      resolve();
    });
  });

describeApp('presence after a rename', () => {
  it.each(renames)(
    'drops the sockets of a user renamed by %s; the SDK client comes back, and a later joiner gets the new name',
    async (_, rename) => {
      const { chatId } = await keyedChat(app);
      const g = await member(app);
      // The client as an app runs it: the SDK's socket, which reconnects by itself.
      const sdk = await connect(new HttpClient({ baseUrl: app.url, session: g.client.cookie }));
      try {
        await joinRoom(sdk, { chat_id: chatId });
        const dropped = disconnected(sdk, 5_000);
        const username = `renamed_${g.user.id}`;
        const res = await rename(g, username);
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        // The server dropped it (as after a level change): the new handshake reads the new name.
        expect(await dropped).toBe('io server disconnect');
        // Not a Socket.IO reconnection (it gives up after a server drop): the SDK's own, 0.5-1 s on.
        await reconnected(sdk);
        await joinRoom(sdk, { chat_id: chatId });
        const later = await member(nodes.b);
        const ack = await join(later, { chat_id: chatId });
        expect(ack.ok).toBe(true);
        const entries = ack.members.filter((m: any) => m.user_id === g.user.id);
        expect(entries).toEqual([{ user_id: g.user.id, session_id: g.sessionId, username }]);
      } finally {
        sdk.disconnect();
      }
    },
  );

  it('keeps the sockets of a user whose own rename changes nothing', async () => {
    const g = await member(app);
    const res = await g.client.post('/v1/users/me/update', { username: g.user.username });
    expect([res.status, res.body.errors]).toEqual([200, null]);
    // Node A holds the socket: a drop would have reached it before this event's answer.
    const ack = await g.socket.timeout(5_000).emitWithAck('room:leave', { chat_id: 999_999 });
    expect([ack.ok, g.socket.connected]).toEqual([false, true]);
  });

  it('gives a socket recovered after a rename made while it was away the new name', async () => {
    const { owner, chatId } = await keyedChat(app);
    const g = await member(app);
    expect((await join(g, { chat_id: chatId })).ok).toBe(true);
    // Its transport is cut (not a clean disconnect): the server keeps its session for recovery.
    g.socket.io.engine.close();
    await owner.socket.next('portal:presence', (e) => e.session_id === g.sessionId && e.online === false);
    const username = `away_${g.user.id}`;
    expect((await g.client.on(nodes.b).post('/v1/users/me/update', { username })).status).toBe(200);
    const back = new Promise<void>((resolve) => g.socket.once('connect', () => resolve()));
    g.socket.connect();
    await back;
    expect(g.socket.recovered).toBe(true);
    // Back in the chat's room without a join, with the data of its new handshake.
    const later = await member(nodes.b);
    const ack = await join(later, { chat_id: chatId });
    expect(ack.members).toContainEqual({ user_id: g.user.id, session_id: g.sessionId, username });
  });
});
