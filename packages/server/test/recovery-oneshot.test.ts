import { io, type Socket } from 'socket.io-client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rooms } from '../src/platform/realtime.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { bundle, keyedChat, member } from './support/chat-flows.js';
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

type Chat = Awaited<ReturnType<typeof keyedChat>>;

/**
 * A member's only socket, one that can come back with connection state recovery: it reconnects
 * only when told (`reconnect()`), keeping its recovery pid and offset across every disconnect, as
 * socket.io-client (and so the SDK's socket) does. `got(id)` tells whether a message reached it.
 */
async function recoverable() {
  const m = await member(app);
  m.socket.close(); // member() connects a socket of its own; this test watches only this one.
  const socket = io(app.url, {
    transports: ['websocket'],
    extraHeaders: { cookie: `psession=${m.client.cookie}` },
    reconnection: false,
    forceNew: true,
  });
  opened.push(socket);
  const ids: string[] = [];
  socket.on('message:new', (message: { id: string }) => ids.push(message.id));
  const reconnect = () =>
    new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
      socket.connect();
    });
  await reconnect();
  return {
    m,
    socket,
    reconnect,
    got: (id: string) => ids.includes(id),
    async join(chat: Chat) {
      expect(((await socket.emitWithAck('room:join', { chat_id: chat.chatId })) as { ok: boolean }).ok).toBe(true);
    },
    /**
     * Cuts its transport (not a clean disconnect: the server keeps its session for the recovery
     * window), and waits until the server has closed that connection (and so stored its session).
     */
    async drop() {
      const id = socket.id ?? '';
      const down = new Promise<void>((resolve) => socket.once('disconnect', () => resolve()));
      socket.io.engine.close();
      await down;
      await expect.poll(() => app.services.realtime.io.of('/').sockets.has(id)).toBe(false);
    },
    /** The chat rooms its connection on the server is in now. */
    chatRooms: (...chats: Chat[]) => {
      const held = app.services.realtime.io.of('/').sockets.get(socket.id ?? '')?.rooms ?? new Set<string>();
      return chats.filter((chat) => held.has(rooms.chat(chat.chatId))).map((chat) => chat.chatId);
    },
  };
}

const send = async (chat: Chat, text: string): Promise<string> => {
  const res = await chat.owner.client.post(`/v1/portal/chats/${chat.chatId}/messages`, {
    content: bundle(chat.chatKey, chat.chatId, chat.epoch, text),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id;
};

/** Sends a message to the chat and waits until `r` has it (so its recovery offset is past it). */
async function heard(r: Awaited<ReturnType<typeof recoverable>>, chat: Chat, text: string) {
  const id = await send(chat, text);
  await expect.poll(() => r.got(id), { timeout: 10_000 }).toBe(true);
}

describeApp('connection state recovery is used once', () => {
  it.each([0, 1, 2])(
    'does not recover a connection the server ended (a rename) after %i earlier recoveries: it comes back in no chat room and is replayed nothing',
    async (earlier) => {
      const c = await keyedChat(app);
      const d = await keyedChat(app);
      const r = await recoverable();
      await r.join(c);
      await heard(r, c, 'one');
      for (let i = 0; i < earlier; i++) {
        await r.drop();
        await r.reconnect();
        expect(r.socket.recovered).toBe(true);
      }
      // A chat joined since the last recovery: a stale session record would not hold it.
      await r.join(d);
      await heard(r, d, 'two');
      const ended = new Promise<string>((resolve) => r.socket.once('disconnect', (reason) => resolve(reason)));
      const renamed = await r.m.client.post('/v1/users/me/update', { username: `renamed_${r.m.user.id}` });
      expect(renamed.status).toBe(200);
      expect(await ended).toBe('io server disconnect');
      const away = await send(c, 'sent while away');
      await r.reconnect();
      expect(r.socket.recovered).toBe(false);
      expect(r.chatRooms(c, d)).toEqual([]);
      // It joins again (as the SDK does on a connection that is not recovered) and hears what is
      // sent from now on; a replay would have come before this, on the same connection.
      await r.join(c);
      await r.join(d);
      await heard(r, c, 'after');
      await heard(r, d, 'after');
      expect(r.got(away)).toBe(false);
    },
  );

  it('recovers a dropped transport after an earlier recovery into the rooms it holds at this drop, the chat joined since included', async () => {
    const c = await keyedChat(app);
    const d = await keyedChat(app);
    const r = await recoverable();
    await r.join(c);
    await heard(r, c, 'one');
    await r.drop();
    await r.reconnect();
    expect(r.socket.recovered).toBe(true);
    await r.join(d);
    await heard(r, d, 'two');
    await r.drop();
    // What the second drop stored is read, not the first's: the one-shot read of the first left nothing else.
    const missedC = await send(c, 'missed in c');
    const missedD = await send(d, 'missed in d');
    await r.reconnect();
    expect(r.socket.recovered).toBe(true);
    expect(r.chatRooms(c, d)).toEqual([c.chatId, d.chatId]);
    await expect.poll(() => r.got(missedC) && r.got(missedD), { timeout: 10_000 }).toBe(true);
  });
});
