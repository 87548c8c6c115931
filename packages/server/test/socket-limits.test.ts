import { INT32_MAX, Limits } from '@parlor/protocol';
import { io, type Socket } from 'socket.io-client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rooms, SOCKET_MESSAGE_MAX_BYTES, SOCKETS_PER_SESSION_MAX } from '../src/platform/realtime.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { login } from './support/flows.js';

let app: TestApp;
let cookie: string;
const opened: Socket[] = [];
beforeAll(async () => {
  app = await startApp();
  cookie = (await login(app)).client.cookie ?? '';
});
afterAll(async () => {
  for (const s of opened) s.close();
  await app?.close();
});

async function connect(transport: 'websocket' | 'polling'): Promise<Socket> {
  const socket = io(app.url, {
    transports: [transport],
    extraHeaders: { cookie: `psession=${cookie}` },
    reconnection: false,
    forceNew: true,
  });
  opened.push(socket);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('connect_error', reject);
  });
  return socket;
}

/**
 * The bytes of one client event on the wire without an ack: Engine.IO's message type ("4"),
 * Socket.IO's event type ("2") and the JSON of `[event, payload]` (ASCII here: one byte each).
 */
const wireBytes = (event: string, payload: unknown) => 2 + JSON.stringify([event, payload]).length;

/** A `vm:input` text event whose message is exactly `bytes` long (its text is too long to be valid). */
function eventOfSize(bytes: number) {
  const empty = { chat_id: 1, kind: 'text', text: '' };
  const payload = { ...empty, text: 'a'.repeat(bytes - wireBytes('vm:input', empty)) };
  expect(wireBytes('vm:input', payload)).toBe(bytes);
  return payload;
}

/** Whether the socket is still served: an event with an ack gets its answer. */
const answers = async (socket: Socket) =>
  ((await socket.timeout(5000).emitWithAck('room:leave', { chat_id: INT32_MAX })) as { ok: boolean }).ok === false;

describeApp('the largest socket message', () => {
  it('takes the largest legitimate client event: vm:input text of the most characters JSON writes longest', async () => {
    const socket = await connect('websocket');
    // A control character (or a lone surrogate) takes 6 bytes of JSON: "\u0001".
    const payload = { chat_id: INT32_MAX, kind: 'text', text: '\u0001'.repeat(Limits.VM_INPUT_TEXT_MAX) };
    const bytes = Buffer.byteLength(JSON.stringify(['vm:input', payload])) + 2 + String(Number.MAX_SAFE_INTEGER).length;
    expect(bytes).toBeGreaterThan(Limits.VM_INPUT_TEXT_MAX * 6);
    expect(bytes).toBeLessThanOrEqual(SOCKET_MESSAGE_MAX_BYTES);
    const ack = (await socket.timeout(5000).emitWithAck('vm:input', payload as never)) as { ok: boolean; code: string };
    // Valid, so it reached the room VM rules (this user is in no such chat).
    expect(ack.ok).toBe(false);
    expect(ack.code).not.toBe('ERR_VALIDATION');
    expect(socket.connected).toBe(true);
  });

  for (const transport of ['websocket', 'polling'] as const) {
    it(`${transport}: keeps a socket whose message is ${SOCKET_MESSAGE_MAX_BYTES} bytes; closes one whose message is a byte more`, async () => {
      const atLimit = await connect(transport);
      atLimit.emit('vm:input', eventOfSize(SOCKET_MESSAGE_MAX_BYTES) as never);
      expect(await answers(atLimit)).toBe(true);
      expect(atLimit.connected).toBe(true);

      const over = await connect(transport);
      const closed = new Promise<string>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error('the socket was not closed')), 5000);
        over.once('disconnect', (reason) => {
          clearTimeout(t);
          resolve(reason);
        });
      });
      over.emit('vm:input', eventOfSize(SOCKET_MESSAGE_MAX_BYTES + 1) as never);
      expect(await closed).toMatch(/^transport (close|error)$/);
    });
  }
});

describeApp('unstorable text in socket payloads', () => {
  // The same rule as HTTP bodies (platform/validation.ts): no string anywhere in a payload may hold
  // a NUL or half of a surrogate pair. Valid otherwise, these events would reach their handlers
  // (this user is in no such chat: ERR_NOT_CHAT_MEMBER).
  it('answers ERR_VALIDATION to a NUL or a lone surrogate in vm:input text and keys and in a vm:watch token, and stays up', async () => {
    const socket = await connect('websocket');
    const ack = async (event: string, payload: object) =>
      (await socket.timeout(5000).emitWithAck(event, payload as never)) as { ok: boolean; code: string };
    const text = (t: string) => ({ chat_id: INT32_MAX, kind: 'text', text: t });
    for (const bad of ['a\u0000b', '\u0000', '\ud800', 'x\udfffy', '\udbff'])
      expect(await ack('vm:input', text(bad)), JSON.stringify(bad)).toMatchObject({
        ok: false,
        code: 'ERR_VALIDATION',
      });
    expect(
      await ack('vm:input', { chat_id: INT32_MAX, kind: 'key', type: 'down', key: 'a', code: '\ud800' }),
    ).toMatchObject({ ok: false, code: 'ERR_VALIDATION' });
    expect(await ack('vm:watch', { chat_id: INT32_MAX, token: 'abc\u0000' })).toMatchObject({
      ok: false,
      code: 'ERR_VALIDATION',
    });
    // A whole surrogate pair (an emoji) is text like any other: it reaches the handler.
    for (const good of ['😀', 'a\u0001b'])
      expect(await ack('vm:input', text(good)), JSON.stringify(good)).toMatchObject({
        ok: false,
        code: 'ERR_NOT_CHAT_MEMBER',
      });
    expect(socket.connected).toBe(true);
  });
});

describeApp('sockets of one session', () => {
  /** Opens a socket with this session cookie; resolves with it and the connect error's code (null: connected). */
  function handshake(sessionCookie: string): Promise<{ socket: Socket; refused: string | null }> {
    const socket = io(app.url, {
      transports: ['websocket'],
      extraHeaders: { cookie: `psession=${sessionCookie}` },
      reconnection: false,
      forceNew: true,
    });
    opened.push(socket);
    return new Promise((resolve) => {
      socket.once('connect', () => resolve({ socket, refused: null }));
      socket.once('connect_error', (err) => resolve({ socket, refused: err.message }));
    });
  }

  it(`holds ${SOCKETS_PER_SESSION_MAX} sockets of one session on a node, refuses the next with ERR_TOO_MANY_CONNECTIONS, and takes one again once one closed`, async () => {
    const who = await login(app);
    const sessionCookie = who.client.cookie ?? '';
    const sessionSockets = () => app.services.realtime.io.of('/').adapter.rooms.get(rooms.user(who.user.id))?.size ?? 0;
    // All at once, and each held after the app's middleware (where it is decided) until all of them
    // were decided there: every one races for the last place, and one only gets it.
    const waiting: (() => void)[] = [];
    let holding = true;
    app.services.realtime.io.use((socket, next) => {
      if (holding && socket.data.userId === who.user.id) waiting.push(() => next());
      else next();
    });
    const attempts = Array.from({ length: SOCKETS_PER_SESSION_MAX + 1 }, () => handshake(sessionCookie));
    let refusedNow = 0;
    for (const attempt of attempts) void attempt.then((h) => (refusedNow += h.refused === null ? 0 : 1));
    await expect.poll(() => waiting.length + refusedNow).toBe(SOCKETS_PER_SESSION_MAX + 1);
    holding = false;
    for (const go of waiting) go();
    const first = await Promise.all(attempts);
    expect(first.filter((h) => h.refused === null)).toHaveLength(SOCKETS_PER_SESSION_MAX);
    expect(first.filter((h) => h.refused !== null).map((h) => h.refused)).toEqual(['ERR_TOO_MANY_CONNECTIONS']);
    expect(sessionSockets()).toBe(SOCKETS_PER_SESSION_MAX);
    // One at a time: still full.
    expect((await handshake(sessionCookie)).refused).toBe('ERR_TOO_MANY_CONNECTIONS');
    // Another session is not this one's: it connects.
    expect((await handshake(cookie)).refused).toBeNull();

    first.find((h) => h.refused === null)?.socket.close();
    await expect.poll(sessionSockets).toBe(SOCKETS_PER_SESSION_MAX - 1);
    const again = await handshake(sessionCookie);
    expect(again.refused).toBeNull();
    expect(again.socket.connected).toBe(true);
    expect(sessionSockets()).toBe(SOCKETS_PER_SESSION_MAX);
    for (const h of first) h.socket.close();
    again.socket.close();
  });
});
