import { Limits } from '@parlor/protocol';
import { io, type Socket } from 'socket.io-client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rooms, SOCKETS_PER_SESSION_MAX } from '../src/platform/realtime.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { bundle, keyEpoch, keyedChat, member, sessionIdOf } from './support/chat-flows.js';
import { type LoggedIn, login, operator } from './support/flows.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
const opened: Socket[] = [];
beforeAll(async () => {
  app = await startApp();
});
afterAll(async () => {
  for (const s of opened) s.close();
  closeAllSockets();
  await app?.close();
});

/**
 * A socket of `m`'s session that can come back with connection state recovery: it reconnects
 * only when told (`connect()`), after `drop()` cut its transport (not a clean disconnect, so the
 * server keeps its session for the recovery window). `packets` records every event packet that
 * reaches the client, before or without a successful connect too (the manager's decoded packets);
 * `disconnects` the reason of each disconnect.
 */
async function recoverable(m: LoggedIn) {
  const socket = io(app.url, {
    transports: ['websocket'],
    extraHeaders: { cookie: `psession=${m.client.cookie}` },
    reconnection: false,
    forceNew: true,
  });
  opened.push(socket);
  const packets: { event: string; payload: any }[] = [];
  socket.io.on('packet', (p: { type: number; data?: unknown[] }) => {
    if (p.type === 2 && Array.isArray(p.data)) packets.push({ event: String(p.data[0]), payload: p.data[1] });
  });
  const disconnects: string[] = [];
  socket.on('disconnect', (reason) => disconnects.push(reason));
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('connect_error', reject);
  });
  return {
    socket,
    packets,
    disconnects,
    /** The cookie its next handshakes send (the browser's, after another login in it). */
    useCookieOf(other: LoggedIn) {
      (socket.io.opts.extraHeaders as Record<string, string>).cookie = `psession=${other.client.cookie}`;
    },
    /** The ids of the user messages received (system messages aside). */
    messages: () =>
      packets.filter((p) => p.event === 'message:new' && p.payload.type === 'user').map((p) => p.payload.id as string),
    async drop() {
      const down = new Promise<void>((resolve) => socket.once('disconnect', () => resolve()));
      socket.io.engine.close();
      await down;
    },
    /** Reconnects; resolves with the connect error's message, or null once connected. */
    reconnect(): Promise<string | null> {
      return new Promise((resolve) => {
        socket.once('connect', () => resolve(null));
        socket.once('connect_error', (err) => resolve(err.message));
        socket.connect();
      });
    },
  };
}

/** Resolves once `socket` has received a message with this id. */
function received(r: Awaited<ReturnType<typeof recoverable>>, id: string, ms = 10_000): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setInterval(() => {
      if (r.messages().includes(id)) {
        clearInterval(t);
        clearTimeout(timer);
        resolve();
      }
    }, 10);
    const timer = setTimeout(() => {
      clearInterval(t);
      reject(new Error(`no message ${id}; got ${r.messages().join(', ')}`));
    }, ms);
  });
}

/** A member of the chat whose only socket is a recoverable one, in the chat room, with a recovery offset. */
async function inChat(chat: Awaited<ReturnType<typeof keyedChat>>) {
  const m = await member(app);
  m.socket.close(); // member() connects a socket of its own; this test watches only `r`.
  const r = await recoverable(m);
  expect(((await r.socket.emitWithAck('room:join', { chat_id: chat.chatId })) as { ok: boolean }).ok).toBe(true);
  return { m, r };
}

/** The owner keys the chat's new epoch (after a kick, ban or logout raised it). */
const rekey = async (chat: Awaited<ReturnType<typeof keyedChat>>) => {
  Object.assign(chat, await keyEpoch(chat.owner, chat.chatId));
};

const send = async (chat: Awaited<ReturnType<typeof keyedChat>>, text: string): Promise<string> => {
  const res = await chat.owner.client.post(`/v1/portal/chats/${chat.chatId}/messages`, {
    content: bundle(chat.chatKey, chat.chatId, chat.epoch, text),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id;
};

/** Drops both transports and waits until the chat has heard both go offline (the server kept their sessions). */
async function dropAll(chat: Awaited<ReturnType<typeof keyedChat>>, ...who: Awaited<ReturnType<typeof inChat>>[]) {
  for (const w of who) await w.r.drop();
  for (const w of who) {
    await chat.owner.socket.next(
      'portal:presence',
      (p) => p.chat_id === chat.chatId && p.session_id === w.m.sessionId && p.online === false,
    );
  }
}

/** A member of a new keyed chat that received a first message (its recovery offset), then went away. */
async function awayAfterOne() {
  const chat = await keyedChat(app);
  const member = await inChat(chat);
  const one = await send(chat, 'one');
  await received(member.r, one);
  await dropAll(chat, member);
  return { chat, member, one };
}

describeApp('presence of a recovered socket', () => {
  it('says the session online once when it comes back and joins its chat again (the re-check and the join)', async () => {
    const { chat, member: back } = await awayAfterOne();
    // The server's re-check of the recovered room waits until the client's own join (a rejoin, as
    // the SDK sends on a reconnect) has answered: each would say it online.
    const chats = app.services.chats;
    const original = chats.underMemberships;
    let joined = () => {};
    const joinAnswered = new Promise<void>((resolve) => {
      joined = resolve;
    });
    let rechecked: Promise<unknown> | null = null;
    chats.underMemberships = (...args) => {
      rechecked = joinAnswered.then(() => original.apply(chats, args));
      return rechecked as ReturnType<typeof original>;
    };
    try {
      expect(await back.r.reconnect()).toBeNull();
      expect(back.r.socket.recovered).toBe(true);
      const ack = (await back.r.socket.emitWithAck('room:join', { chat_id: chat.chatId, rejoin: true })) as {
        ok: boolean;
      };
      expect(ack.ok).toBe(true);
      joined();
      expect(rechecked).not.toBeNull();
      await rechecked;
    } finally {
      chats.underMemberships = original;
    }
    // A later joiner's delta reaches the owner after any the recovered socket's caused.
    const late = await member(app);
    expect(((await late.socket.emitWithAck('room:join', { chat_id: chat.chatId })) as { ok: boolean }).ok).toBe(true);
    await chat.owner.socket.next(
      'portal:presence',
      (p) => p.chat_id === chat.chatId && p.session_id === late.sessionId,
    );
    const deltas = chat.owner.socket.received
      .filter((r) => r.event === 'portal:presence' && r.payload.session_id === back.m.sessionId)
      .map((r) => r.payload.online);
    // Its first join's online, the drop's offline, one online as it came back.
    expect(deltas).toEqual([true, false, true]);
  });
});

describeApp('connection state recovery after a kick', () => {
  it('gives a kicked user back no chat room and replays nothing the chat was sent; a member still in it gets both', async () => {
    const chat = await keyedChat(app);
    const kicked = await inChat(chat);
    const stays = await inChat(chat);
    // A first message gives both clients a recovery offset.
    const one = await send(chat, 'one');
    await received(kicked.r, one);
    await received(stays.r, one);

    await dropAll(chat, kicked, stays);
    const away = kicked.r.packets.length;
    const heard = chat.owner.socket.received.length;
    const kick = await chat.owner.client.post(`/v1/portal/chats/${chat.chatId}/kick`, { user_id: kicked.m.user.id });
    expect(kick.status, JSON.stringify(kick.body)).toBe(200);
    await rekey(chat);
    const missed = await send(chat, 'two');

    expect(await kicked.r.reconnect()).toBeNull();
    expect(await stays.r.reconnect()).toBeNull();
    expect(kicked.r.socket.recovered).toBe(true);
    expect(stays.r.socket.recovered).toBe(true);
    const live = await send(chat, 'three');
    await received(stays.r, missed);
    await received(stays.r, live);
    // An ack on the kicked socket's connection comes after anything the chat was sent before it.
    await kicked.r.socket.emitWithAck('vm:credentials', { chat_id: chat.chatId });

    expect(stays.r.messages()).toEqual([one, missed, live]);
    expect(kicked.r.messages()).toEqual([one]);
    // What went to the user while away is replayed: the kick itself.
    expect(kicked.r.packets).toContainEqual({
      event: 'room:left',
      payload: { chat_id: chat.chatId, reason: 'kicked' },
    });
    // Nothing the chat was sent since: no system message, no rekey, no key or presence events.
    const since = kicked.r.packets.slice(away).filter((p) => p.payload?.chat_id === chat.chatId);
    expect(since.map((p) => p.event)).toEqual(['room:left']);
    // The chat is told the member who stayed is back, not the one who was kicked.
    const back = (sessionId: number) =>
      chat.owner.socket.received
        .slice(heard)
        .some((e) => e.event === 'portal:presence' && e.payload.session_id === sessionId && e.payload.online === true);
    await chat.owner.socket.next('portal:presence', (p) => p.session_id === stays.m.sessionId && p.online === true);
    expect(back(kicked.m.sessionId)).toBe(false);
  });

  it('is the same after a ban from the chat', async () => {
    const { chat, member: banned, one } = await awayAfterOne();
    const ban = await chat.owner.client.post(`/v1/portal/chats/${chat.chatId}/ban`, { user_id: banned.m.user.id });
    expect(ban.status, JSON.stringify(ban.body)).toBe(200);
    await rekey(chat);
    await send(chat, 'two');
    expect(await banned.r.reconnect()).toBeNull();
    expect(banned.r.socket.recovered).toBe(true);
    await send(chat, 'three');
    await banned.r.socket.emitWithAck('vm:credentials', { chat_id: chat.chatId });
    expect(banned.r.messages()).toEqual([one]);
    expect(banned.r.packets).toContainEqual({
      event: 'room:left',
      payload: { chat_id: chat.chatId, reason: 'banned' },
    });
  });
});

describeApp('connection state recovery after the session ended', () => {
  it('recovers nothing for a session that logged out while away: the handshake is refused and no missed packet is sent', async () => {
    const { chat, member: gone, one } = await awayAfterOne();
    expect((await gone.m.client.post('/v1/authentication/logout', {})).status).toBe(200);
    await rekey(chat);
    await send(chat, 'two');
    expect(await gone.r.reconnect()).toBe('ERR_UNAUTHENTICATED');
    expect(gone.r.messages()).toEqual([one]);
  });
});

describeApp('connection state recovery with the cookie of another session', () => {
  it("connects a socket that comes back with another user's cookie afresh, as that user: nothing the old session was sent is replayed", async () => {
    const { chat, member: a, one } = await awayAfterOne();
    // While away: a notification for A, and a message in A's chat. A's session stays live.
    const notified = await operator(app).post('/v1/admin/notifications', {
      title: 'for A only',
      body: 'for A only',
      type: 'info',
      user_id: a.m.user.id,
    });
    expect(notified.status, JSON.stringify(notified.body)).toBe(200);
    const missed = await send(chat, 'two');

    // The browser now sends B's cookie (B signed in in another tab of it).
    const b = await login(app);
    a.r.useCookieOf(b);
    expect(await a.r.reconnect()).toBeNull();
    expect(a.r.socket.recovered).toBe(false);
    const bSession = await sessionIdOf(app, b.client);
    await expect
      .poll(() => a.r.packets.some((p) => p.event === 'chat:list' && p.payload.session_id === bSession))
      .toBe(true);
    // In none of A's rooms: what they are sent now does not reach it either.
    const socketId = a.r.socket.id ?? '';
    const adapterRooms = app.services.realtime.io.of('/').adapter.rooms;
    for (const room of [`chat:${chat.chatId}`, `user:${a.m.user.id}`, `session:${a.m.sessionId}`])
      expect(adapterRooms.get(room)?.has(socketId) ?? false).toBe(false);
    const live = await send(chat, 'three');
    await chat.owner.socket.next('message:new', (p) => p.id === live);
    // An ack on the connection comes after anything replayed or sent to it before.
    await a.r.socket.emitWithAck('vm:credentials', { chat_id: chat.chatId });
    expect(a.r.messages()).toEqual([one]);
    expect(a.r.messages()).not.toContain(missed);
    expect(a.r.packets.filter((p) => p.event === 'notification:new').map((p) => p.payload.id)).not.toContain(
      notified.body.id,
    );
  });
});

describeApp('chat:list on a (re)connection', () => {
  it('closes a connection whose chat:list cannot be read, as a dropped transport: the client comes back and gets it', async () => {
    const who = await login(app);
    const chats = app.services.chats;
    const original = chats.list;
    let failed = 0;
    chats.list = async (...args: Parameters<typeof original>) => {
      if (args[0] === who.user.id && failed === 0) {
        failed += 1;
        throw new Error('database briefly unreachable');
      }
      return original.apply(chats, args);
    };
    let r: Awaited<ReturnType<typeof recoverable>>;
    try {
      r = await recoverable(who);
      await expect.poll(() => r.disconnects).toEqual(['transport close']);
    } finally {
      chats.list = original;
    }
    expect(failed).toBe(1);
    expect(r.packets.some((p) => p.event === 'chat:list')).toBe(false);
    expect(await r.reconnect()).toBeNull();
    const session = await sessionIdOf(app, who.client);
    await expect
      .poll(() => r.packets.some((p) => p.event === 'chat:list' && p.payload.session_id === session))
      .toBe(true);
  });
});

describeApp('connection state recovery while its check runs', () => {
  it('replays what the chat was sent while the recovery was being checked, so nothing is missed', async () => {
    const { chat, member: back, one } = await awayAfterOne();
    const missed = await send(chat, 'missed');

    // The check reads the session and the memberships from the database; a message is sent in
    // the chat during that round trip (here: inside it, so that it always overlaps).
    const sessions = app.services.sessions;
    const original = sessions.mayConnect;
    let during: string | null = null;
    sessions.mayConnect = async (userId, sessionId) => {
      const answer = await original.call(sessions, userId, sessionId);
      if (during === null) during = await send(chat, 'during');
      return answer;
    };
    try {
      expect(await back.r.reconnect()).toBeNull();
    } finally {
      sessions.mayConnect = original;
    }
    expect(back.r.socket.recovered).toBe(true);
    const after = await send(chat, 'after');
    await received(back.r, after);
    expect(during).not.toBeNull();
    expect(back.r.messages()).toEqual([one, missed, during, after]);
  });
});

describeApp('connection state recovery while its handshake middleware runs', () => {
  it('delivers, once, what the chat is sent while a recovered socket is in its handshake middleware', async () => {
    const { chat, member: back, one } = await awayAfterOne();
    const missed = await send(chat, 'missed');

    // A middleware after the app's own (its session look-up): a message is sent in the chat and
    // reaches the chat's other sockets (the owner's, on this node) before the handshake goes on.
    let armed = true;
    let during: string | null = null;
    app.services.realtime.io.use((socket, next) => {
      if (!armed || !socket.recovered || socket.data.userId !== back.m.user.id) return next();
      armed = false;
      send(chat, 'during')
        .then(async (id) => {
          during = id;
          await chat.owner.socket.next('message:new', (p) => p.id === id);
        })
        .then(() => next(), next);
    });
    try {
      expect(await back.r.reconnect()).toBeNull();
    } finally {
      armed = false;
    }
    expect(back.r.socket.recovered).toBe(true);
    expect(during).not.toBeNull();
    const after = await send(chat, 'after');
    await received(back.r, after);
    expect(back.r.messages()).toEqual([one, missed, during, after]);
  });
});

describeApp('connection state recovery and a removal that commits while the socket is restored', () => {
  // The check reads the memberships before the socket is restored; a kick or ban that commits
  // after that read, before the socket is one of the namespace's (while the check returns, or
  // while the handshake middleware runs), cannot take the room from it. The connected socket is
  // checked again and leaves the room, told with `room:left`.
  for (const [when, action] of [
    ['check', 'kick'],
    ['middleware', 'ban'],
  ] as const) {
    it(`takes the chat room from a recovered socket whose user was removed (${action} during the ${when})`, async () => {
      const { chat, member: gone, one } = await awayAfterOne();

      let removed = false;
      const remove = async () => {
        removed = true;
        const res = await chat.owner.client.post(`/v1/portal/chats/${chat.chatId}/${action}`, {
          user_id: gone.m.user.id,
        });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
      };
      const chats = app.services.chats;
      const original = chats.roomsStillAllowed;
      if (when === 'check') {
        // The check has read the memberships (still a member); the kick commits right after.
        chats.roomsStillAllowed = async (...args: Parameters<typeof original>) => {
          const allowed = await original.apply(chats, args);
          if (!removed) await remove();
          return allowed;
        };
      } else {
        // A middleware after the session lookup: the ban commits while the handshake runs.
        app.services.realtime.io.use((socket, next) => {
          if (!socket.recovered || removed) return next();
          remove().then(() => next(), next);
        });
      }
      try {
        expect(await gone.r.reconnect()).toBeNull();
      } finally {
        chats.roomsStillAllowed = original;
      }
      expect(gone.r.socket.recovered).toBe(true);
      expect(removed).toBe(true);

      // The connected socket is checked again and leaves the room, and is told so (\`removed\`). In
      // cluster mode the removal's own \`room:left\` (\`kicked\`, \`banned\`) may reach it first: the
      // other node's leave and event come through Redis, after the socket is connected; the check
      // then finds it out of the room already and says nothing more.
      const reasons = ['removed', action === 'kick' ? 'kicked' : 'banned'];
      await new Promise<void>((resolve, reject) => {
        const seen = () =>
          gone.r.packets.some(
            (p) => p.event === 'room:left' && p.payload.chat_id === chat.chatId && reasons.includes(p.payload.reason),
          );
        const t = setInterval(() => {
          if (!seen()) return;
          clearInterval(t);
          clearTimeout(timer);
          resolve();
        }, 10);
        const timer = setTimeout(() => {
          clearInterval(t);
          reject(
            new Error(`no room:left (${reasons.join(' or ')}); got ${gone.r.packets.map((p) => p.event).join(', ')}`),
          );
        }, 10_000);
      });
      await rekey(chat);
      const after = await send(chat, 'after');
      // An ack on the socket's connection comes after anything the chat was sent before it.
      await gone.r.socket.emitWithAck('vm:credentials', { chat_id: chat.chatId });
      expect(gone.r.messages()).not.toContain(after);
      expect(gone.r.messages()).toEqual([one]);
    });
  }
});

describeApp('connection state recovery and the room enter limit', () => {
  it(`spends one of the user's ${Limits.ROOM_ENTERS_PER_USER} room enters per chat room it puts back; one the allowance cannot pay for connects afresh and spends nothing`, async () => {
    const c0 = await keyedChat(app);
    const c1 = await keyedChat(app);
    const chats = [c0, c1];
    const m = await member(app);
    m.socket.close();
    const r = await recoverable(m);
    const enter = async (chatId: number) =>
      (await r.socket.emitWithAck('room:join', { chat_id: chatId, rejoin: true })) as {
        ok: boolean;
        code?: string;
        retry_after?: number;
      };
    // Two joins that make a member, then room enters until 3 of the window's are left.
    for (const c of chats)
      expect((await r.socket.emitWithAck('room:join', { chat_id: c.chatId })) as { ok: boolean }).toMatchObject({
        ok: true,
      });
    for (let i = 0; i < Limits.ROOM_ENTERS_PER_USER - 5; i += 1)
      expect((await enter(c0.chatId)).ok, `enter ${i}`).toBe(true);
    // A message gives the socket its recovery offset.
    const one = await send(c0, 'one');
    await received(r, one);
    /** Drops the transport and waits until the chat has heard this session go offline once more. */
    const away = async () => {
      const offline = () =>
        c0.owner.socket.received.filter(
          (p) =>
            p.event === 'portal:presence' &&
            p.payload.chat_id === c0.chatId &&
            p.payload.session_id === m.sessionId &&
            p.payload.online === false,
        ).length;
      const before = offline();
      await r.drop();
      await expect.poll(offline).toBe(before + 1);
    };
    const chatRooms = () =>
      chats.filter((c) =>
        app.services.realtime.io
          .of('/')
          .adapter.rooms.get(`chat:${c.chatId}`)
          ?.has(r.socket.id ?? ''),
      ).length;

    // Back in both rooms: two enters spent, one left.
    await away();
    expect(await r.reconnect()).toBeNull();
    expect(r.socket.recovered).toBe(true);
    expect(chatRooms()).toBe(2);

    // Two rooms, one enter left: not recovered, in no chat room.
    await away();
    expect(await r.reconnect()).toBeNull();
    expect(r.socket.recovered).toBe(false);
    expect(chatRooms()).toBe(0);
    // The refused recovery spent nothing: the enter left is room:join's, and the next is refused.
    expect((await enter(c0.chatId)).ok).toBe(true);
    const refused = await enter(c1.chatId);
    expect([refused.ok, refused.code]).toEqual([false, 'ERR_RATE_LIMITED']);
    expect(refused.retry_after).toBeGreaterThanOrEqual(1);
  }, 60_000);
});

describeApp('connection state recovery of a session that holds every place on the node', () => {
  it('refuses it before anything is replayed or spent, each time, and recovers it once a place is free', async () => {
    const { chat, member } = await awayAfterOne();
    const { m, r } = member;
    const two = await send(chat, 'two');
    // Other tabs of the session take every place while the socket is away.
    const tabs: Socket[] = [];
    for (let i = 0; i < SOCKETS_PER_SESSION_MAX; i += 1) {
      const tab = io(app.url, {
        transports: ['websocket'],
        extraHeaders: { cookie: `psession=${m.client.cookie}` },
        reconnection: false,
        forceNew: true,
      });
      opened.push(tab);
      await new Promise<void>((resolve, reject) => {
        tab.once('connect', () => resolve());
        tab.once('connect_error', reject);
      });
      tabs.push(tab);
    }
    const packets = r.packets.length;
    for (let i = 0; i < 2; i += 1) {
      expect(await r.reconnect()).toBe('ERR_TOO_MANY_CONNECTIONS');
      // Nothing reached the client during the refused handshake (it would hold it for its next connection).
      expect(r.packets.length).toBe(packets);
      expect(r.socket.receiveBuffer).toEqual([]);
    }

    tabs.pop()?.close();
    await expect
      .poll(() => app.services.realtime.io.of('/').adapter.rooms.get(rooms.session(m.sessionId))?.size)
      .toBe(SOCKETS_PER_SESSION_MAX - 1);
    expect(await r.reconnect()).toBeNull();
    expect(r.socket.recovered).toBe(true);
    await received(r, two);
    expect(r.messages().filter((id) => id === two)).toEqual([two]);
    // The refused recoveries spent none of the user's room enters: the window's enters less the
    // join and the one recovery let in are left.
    let left = 0;
    for (;;) {
      const ack = (await r.socket.emitWithAck('room:join', { chat_id: chat.chatId, rejoin: true })) as {
        ok: boolean;
        code?: string;
      };
      if (!ack.ok) {
        expect(ack.code).toBe('ERR_RATE_LIMITED');
        break;
      }
      left += 1;
    }
    expect(left).toBe(Limits.ROOM_ENTERS_PER_USER - 2);
    for (const tab of tabs) tab.close();
  }, 60_000);
});
