/**
 * What the SDK does with server data of the wrong shape: a Socket.IO server of our own plays the
 * server (so it can send what Parlor's never does), a stand-in fetch answers the REST calls.
 * Socket.IO runs listeners where nothing catches what they throw (in Node the process ends), so a
 * malformed event must become an `error` event and be dropped, and nothing of it be kept.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server, type Socket as ServerSocket } from 'socket.io';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  connect,
  E2EChatSession,
  E2ESessionError,
  onChecked,
  ParlorClient,
  type ParlorSocket,
  RoomVm,
  type RoomVmError,
  ServerEventSchemas,
} from '../src/index.js';

const SESSION_ID = 7;
const CHAT_ID = 5;

let io: Server;
let url: string;
/** The server side of the newest connection. */
let serverSocket: ServerSocket | null = null;
/** How the stand-in server answers `room:join`. */
let joinAck: unknown = null;
beforeAll(async () => {
  const http = createServer();
  io = new Server(http);
  io.on('connection', (s) => {
    serverSocket = s;
    s.on('room:join', (_payload: unknown, ack: (a: unknown) => void) => ack(joinAck));
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => io.close(resolve));
});

/** REST answers by "METHOD path"; every request is recorded. */
let answers: Record<string, unknown> = {};
const requests: string[] = [];
const fakeFetch: typeof fetch = async (input, init) => {
  const route = `${init?.method ?? 'GET'} ${new URL(String(input)).pathname}`;
  requests.push(route);
  const body = route === 'POST /v1/portal/keys' ? { status: 'registered', session_id: SESSION_ID } : answers[route];
  if (body === undefined)
    return new Response(JSON.stringify({ code: 'ERR_NOT_FOUND', message: route }), { status: 404 });
  return new Response(JSON.stringify(body), { status: 200, headers: { 'content-type': 'application/json' } });
};

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  answers = {};
  requests.length = 0;
  joinAck = null;
});

async function openSocket(): Promise<{ client: ParlorClient; socket: ParlorSocket; server: ServerSocket }> {
  serverSocket = null;
  const client = new ParlorClient({ baseUrl: url, fetch: fakeFetch });
  const socket = await connect(client, { reconnection: false });
  closers.push(() => {
    socket.disconnect();
  });
  await until(() => serverSocket !== null);
  return { client, socket, server: serverSocket as unknown as ServerSocket };
}

async function openSession() {
  const { client, socket, server } = await openSocket();
  const session = await E2EChatSession.open({ client, socket, keyWaitMs: 200, rekeyJitterMs: 1 });
  closers.unshift(() => session.close());
  const errors: E2ESessionError[] = [];
  session.on('error', (e) => errors.push(e));
  return { session, socket, server, errors };
}

/** Waits until `check` holds; fails after 10 s. */
async function until(check: () => boolean): Promise<void> {
  const end = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${check}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Uncaught exceptions while `fn` runs (in a Node app, each one ends the process). */
async function uncaughtDuring(fn: () => Promise<void>): Promise<unknown[]> {
  const caught: unknown[] = [];
  const onError = (error: unknown) => caught.push(error);
  process.on('uncaughtException', onError);
  try {
    await fn();
  } finally {
    process.off('uncaughtException', onError);
  }
  return caught;
}

describe('ServerEventSchemas and onChecked', () => {
  /** What the server emits (packages/server/src; the protocol's ServerToClientEvents). */
  const SERVER_EVENTS = [
    'message:new',
    'message:bulk_deleted',
    'portal:key_added',
    'portal:key_removed',
    'room:rekey',
    'room:key',
    'room:members',
    'portal:presence',
    'room:left',
    'chat:list',
    'chat:updated',
    'notification:new',
    'match:found',
    'match:timeout',
    'user:unmuted',
    'room:started',
    'room:stopped',
    'vm:frame',
    'vm:control',
    'vm:control:request',
  ];

  it('has a schema for every event the server emits', () => {
    expect(SERVER_EVENTS.filter((e) => !Object.hasOwn(ServerEventSchemas, e))).toEqual([]);
  });

  it('refuses, when it is called, an event without a schema (a payload of it would throw inside Socket.IO)', () => {
    const added: string[] = [];
    const socket = { on: (e: string) => added.push(e), off: () => {} } as unknown as ParlorSocket;
    const register = () =>
      onChecked(
        socket,
        'no:such' as 'room:left',
        () => {},
        () => {},
        () => {},
      );
    expect(register).toThrow(TypeError);
    expect(register).toThrow(/no:such/);
    expect(added).toEqual([]);
  });

  it('drops a malformed payload of each newly covered event instead of throwing', () => {
    const listeners = new Map<string, (p: unknown) => void>();
    const socket = {
      on: (e: string, l: (p: unknown) => void) => listeners.set(e, l),
      off: () => {},
    } as unknown as ParlorSocket;
    const events = [
      'message:bulk_deleted',
      'room:members',
      'portal:presence',
      'chat:updated',
      'notification:new',
      'match:found',
      'match:timeout',
      'user:unmuted',
    ] as const;
    const bad: string[] = [];
    const seen: string[] = [];
    for (const e of events)
      onChecked(
        socket,
        e,
        () => seen.push(e),
        (d) => bad.push(d.event),
        () => {},
      );
    for (const e of events) expect(() => listeners.get(e)?.(null)).not.toThrow();
    expect(bad).toEqual([...events]);
    listeners.get('message:bulk_deleted')?.({ room_id: 5, deleted_ids: ['1-1'], deleted_by: 3 });
    listeners.get('notification:new')?.({
      id: 1,
      title: 'Hi',
      body: 'x',
      type: 'info',
      read_at: null,
      created_at: '2026-01-01T00:00:00.000Z',
      created_by: null,
    });
    listeners.get('match:found')?.({
      chat_id: 9,
      token: 'abcdefgh',
      interests: ['go'],
      expires_at: '2026-01-01T00:00:00.000Z',
      peer: { id: 2, username: 'ann', stranger: false, country_code: null },
    });
    listeners.get('message:bulk_deleted')?.({ room_id: 5, deleted_ids: ['nope'], deleted_by: 3 });
    expect(seen).toEqual(['message:bulk_deleted', 'notification:new', 'match:found']);
    expect(bad.at(-1)).toBe('message:bulk_deleted');
  });
});

const badEvent = (event: string) => ({ code: 'BAD_SERVER_EVENT', details: expect.objectContaining({ event }) });

describe('E2EChatSession: server events of the wrong shape', () => {
  const cases: [string, unknown][] = [
    ['message:new', null],
    ['message:new', { id: '1-1', chat_id: CHAT_ID, type: 'user', content: 42 }],
    ['room:key', null],
    ['room:key', { chat_id: CHAT_ID, epoch: 2, envelope: null, sender_session_id: 3 }],
    ['room:rekey', null],
    ['room:rekey', { chat_id: CHAT_ID, epoch: '5' }],
    ['room:left', null],
    ['portal:key_added', null],
    ['portal:key_removed', null],
    ['chat:list', null],
    ['message:bulk_deleted', null],
    ['message:bulk_deleted', { room_id: CHAT_ID, deleted_ids: '1-1', deleted_by: 3 }],
  ];
  for (const [event, payload] of cases) {
    it(`drops ${event} ${JSON.stringify(payload)} and reports it as an error event BAD_SERVER_EVENT (nothing thrown)`, async () => {
      const { session, server, errors } = await openSession();
      const uncaught = await uncaughtDuring(async () => {
        server.emit(event, payload);
        await until(() => errors.length > 0);
      });
      expect(uncaught.map(String)).toEqual([]);
      expect(errors).toEqual([expect.objectContaining(badEvent(event))]);
      expect(errors[0]).toBeInstanceOf(E2ESessionError);
      expect(session.epochOf(CHAT_ID)).toBeUndefined();
    });
  }

  it('keeps no epoch of a room:rekey whose epoch is a string, and goes on with the next good one', async () => {
    joinAck = { ok: true, chat: { id: CHAT_ID }, epoch: 1, members: [], key_ring: {} };
    const { session, server, errors } = await openSession();
    // The session keys epoch 1 itself (its own session is the whole ring).
    const ring = { '1': { [String(SESSION_ID)]: session.publicKey } };
    answers[`GET /v1/portal/chats/${CHAT_ID}/keys`] = { epoch: 1, envelope: null, key_ring: ring };
    answers[`POST /v1/portal/chats/${CHAT_ID}/keys/share`] = { epoch: 1, stored: 1 };
    expect((await session.join({ chat_id: CHAT_ID })).hasKey).toBe(true);
    server.emit('room:rekey', { chat_id: CHAT_ID, epoch: '5' });
    await until(() => errors.length > 0);
    expect(errors).toEqual([expect.objectContaining(badEvent('room:rekey'))]);
    expect(session.epochOf(CHAT_ID)).toBe(1);
    server.emit('room:rekey', { chat_id: CHAT_ID, epoch: 6 });
    await until(() => session.epochOf(CHAT_ID) === 6);
  });

  it('a malformed chat:list while a resync waits for it: reported, and the resync reads GET /v1/portal/chats', async () => {
    const { session, socket, errors } = await openSession();
    answers['GET /v1/portal/chats'] = { chats: [] };
    const reconnected: { recovered: boolean }[] = [];
    session.on('reconnected', (e) => reconnected.push(e));
    const uncaught = await uncaughtDuring(async () => {
      // A connection that was not recovered makes the session wait for the server's chat:list.
      socket.disconnect();
      serverSocket = null;
      socket.connect();
      await until(() => serverSocket !== null && socket.connected);
      (serverSocket as unknown as ServerSocket).emit('chat:list', { session_id: SESSION_ID });
      await until(() => reconnected.length > 0);
    });
    expect(uncaught.map(String)).toEqual([]);
    expect(errors).toEqual([expect.objectContaining(badEvent('chat:list'))]);
    expect(requests).toContain('GET /v1/portal/chats');
    expect(reconnected).toMatchObject([{ chats: [] }]);
  });
});

describe('E2EChatSession: message:bulk_deleted', () => {
  const systemMessage = (id: string) => ({
    id,
    chat_id: CHAT_ID,
    type: 'system',
    sender_id: null,
    content: '',
    system: { event: 'join' },
    created_at: '2026-01-01T00:00:00.000Z',
  });

  it('emits deleted, and drops a message:new of a deleted id that arrives after its deletion (another node sent it)', async () => {
    const { session, server, errors } = await openSession();
    const deleted: unknown[] = [];
    const ids: string[] = [];
    session.on('deleted', (e) => deleted.push(e));
    session.on('message', (e) => ids.push(e.message.id));
    server.emit('message:bulk_deleted', { room_id: CHAT_ID, deleted_ids: ['100-1', '100-2'], deleted_by: 3 });
    server.emit('message:new', systemMessage('100-1'));
    server.emit('message:new', systemMessage('100-3'));
    server.emit('message:new', { ...systemMessage('100-2'), chat_id: CHAT_ID + 1 }); // Another chat's.
    await until(() => ids.length === 2);
    expect(deleted).toEqual([{ chatId: CHAT_ID, ids: ['100-1', '100-2'], deletedBy: 3 }]);
    expect(ids).toEqual(['100-3', '100-2']);
    expect(errors).toEqual([]);
  });

  it('drops a message still waiting for its epoch’s key when its deletion arrives meanwhile', async () => {
    const { session, server, errors } = await openSession();
    const entries: string[] = [];
    session.on('message', (e) => entries.push(`${e.kind} ${e.message.id}`));
    // A user message of an epoch this session has no key of yet: it waits (keyWaitMs 200 ms).
    const bundle = JSON.stringify({ v: 2, epoch: 1, ct: Buffer.alloc(60).toString('base64') });
    server.emit('message:new', {
      ...systemMessage('200-1'),
      type: 'user',
      sender_id: 3,
      system: null,
      content: bundle,
    });
    server.emit('message:bulk_deleted', { room_id: CHAT_ID, deleted_ids: ['200-1'], deleted_by: 3 });
    server.emit('message:new', systemMessage('200-2'));
    await until(() => entries.length === 1);
    expect(entries).toEqual(['system 200-2']);
    expect(errors).toEqual([]);
  });
});

describe('E2EChatSession: answers of the wrong shape', () => {
  for (const answer of [
    { epoch: 2, envelope: null, key_ring: null },
    { envelope: null, key_ring: {} },
    { epoch: '2', envelope: null, key_ring: {} },
  ]) {
    it(`join rejects with BAD_SERVER_ANSWER on GET …/keys ${JSON.stringify(answer)}, keeping no epoch of it`, async () => {
      joinAck = { ok: true, chat: { id: CHAT_ID }, epoch: 1, members: [], key_ring: {} };
      answers[`GET /v1/portal/chats/${CHAT_ID}/keys`] = answer;
      const { session } = await openSession();
      await expect(session.join({ chat_id: CHAT_ID })).rejects.toMatchObject({
        name: 'E2ESessionError',
        code: 'BAD_SERVER_ANSWER',
        chatId: CHAT_ID,
        details: expect.objectContaining({ answer: 'GET /v1/portal/chats/{chat_id}/keys' }),
      });
      expect(session.epochOf(CHAT_ID)).toBe(1);
    });
  }

  it('join rejects with BAD_SERVER_ANSWER on a room:join acknowledgement whose epoch is a string', async () => {
    joinAck = { ok: true, chat: { id: CHAT_ID }, epoch: '5', members: [], key_ring: {} };
    const { session } = await openSession();
    await expect(session.join({ chat_id: CHAT_ID })).rejects.toMatchObject({
      code: 'BAD_SERVER_ANSWER',
      details: expect.objectContaining({ answer: 'room:join', path: '/epoch' }),
    });
    expect(session.epochOf(CHAT_ID)).toBeUndefined();
  });
});

describe('RoomVm: server events of the wrong shape', () => {
  for (const event of ['room:started', 'room:stopped', 'vm:frame', 'vm:control', 'vm:control:request', 'room:left']) {
    it(`drops ${event} null and reports it as an error event BAD_SERVER_EVENT (nothing thrown)`, async () => {
      const { socket, server } = await openSocket();
      const room = new RoomVm(socket, CHAT_ID);
      closers.push(() => room.close());
      const errors: RoomVmError[] = [];
      const controls: unknown[] = [];
      room.on('error', (e) => errors.push(e));
      room.on('control', (e) => controls.push(e));
      const uncaught = await uncaughtDuring(async () => {
        server.emit(event, null);
        await until(() => errors.length > 0);
      });
      expect(uncaught.map(String)).toEqual([]);
      expect(errors).toEqual([expect.objectContaining({ name: 'RoomVmError', ...badEvent(event) })]);
      // The next good event is handled as usual.
      server.emit('vm:control', { chat_id: CHAT_ID, controller_user_id: 3 });
      await until(() => controls.length > 0);
      expect(controls).toEqual([{ controller_user_id: 3 }]);
    });
  }
});
