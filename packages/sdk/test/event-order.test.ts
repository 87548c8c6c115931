/**
 * What an E2EChatSession does when the server's events come in an order one node never sends them
 * in: in cluster mode nothing orders the events of different nodes (docs/api.md, Cluster mode). A
 * Socket.IO server of our own plays the server (so the order is chosen), a stand-in fetch answers
 * the REST calls. No app and no store: this file runs in the unit project (vitest.config.ts).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server, type Socket as ServerSocket } from 'socket.io';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  type ChatEntry,
  ChatKeyStore,
  connect,
  E2EChatSession,
  E2ESessionError,
  encryptMessage,
  generateChatKey,
  generateKeyPair,
  ParlorClient,
  publicKeyFromBase64,
  publicKeyToBase64,
  wrapChatKey,
} from '../src/index.js';

const SESSION_ID = 7;
const USER_ID = 1;

let io: Server;
let url: string;
/** The server side of the newest connection. */
let serverSocket: ServerSocket | null = null;
/** How the stand-in server answers `room:join`, by chat id. */
let joinAcks: Record<number, unknown> = {};
beforeAll(async () => {
  const http = createServer();
  io = new Server(http);
  io.on('connection', (s) => {
    serverSocket = s;
    s.on('room:join', (payload: { chat_id: number }, ack: (a: unknown) => void) => ack(joinAcks[payload.chat_id]));
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => io.close(resolve));
});

type Answer = { status: number; body: unknown };
/** REST answers by "METHOD path" (404 for the others); every request is recorded with its body. */
let answers: Record<string, Answer> = {};
const requests: { route: string; body: unknown }[] = [];
const fakeFetch: typeof fetch = async (input, init) => {
  const route = `${init?.method ?? 'GET'} ${new URL(String(input)).pathname}`;
  requests.push({ route, body: typeof init?.body === 'string' ? JSON.parse(init.body) : null });
  const answer =
    route === 'POST /v1/portal/keys'
      ? { status: 200, body: { status: 'registered', session_id: SESSION_ID } }
      : answers[route];
  if (answer === undefined) {
    return new Response(JSON.stringify({ code: 'ERR_NOT_FOUND', message: route }), { status: 404 });
  }
  const headers = { 'content-type': 'application/json' };
  return new Response(JSON.stringify(answer.body), { status: answer.status, headers });
};

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  vi.restoreAllMocks();
  answers = {};
  requests.length = 0;
  joinAcks = {};
});

/** Waits until `check` holds; fails after 10 s. */
async function until(check: () => boolean): Promise<void> {
  const end = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${check}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A session on a new socket; `rekeyJitterMs: 1` makes every rekey delay 0 ms, so they run in order. */
async function openSession(opts: { keyWaitMs: number }) {
  serverSocket = null;
  const client = new ParlorClient({ baseUrl: url, fetch: fakeFetch });
  const socket = await connect(client, { reconnection: false });
  closers.push(() => {
    socket.disconnect();
  });
  await until(() => serverSocket !== null);
  const server = serverSocket as unknown as ServerSocket;
  const session = await E2EChatSession.open({ client, socket, rekeyJitterMs: 1, ...opts });
  closers.unshift(() => session.close());
  const errors: E2ESessionError[] = [];
  session.on('error', (e) => errors.push(e));
  const entries: ChatEntry[] = [];
  session.on('message', (e) => entries.push(e));
  return { session, server, errors, entries };
}

const keysPath = (chatId: number) => `/v1/portal/chats/${chatId}/keys`;
const ownRing = (session: E2EChatSession) => ({ [String(USER_ID)]: { [String(SESSION_ID)]: session.publicKey } });

/**
 * Joins `chatId` at epoch 1 and keys it (nobody had): the server answers the keys and the share
 * as Parlor's does. Returns the ring of the join.
 */
async function joinAndKey(session: E2EChatSession, chatId: number) {
  const ring = ownRing(session);
  joinAcks[chatId] = { ok: true, chat: { id: chatId }, epoch: 1, members: [], key_ring: ring };
  answers[`GET ${keysPath(chatId)}`] = { status: 200, body: { epoch: 1, envelope: null, key_ring: ring } };
  answers[`POST ${keysPath(chatId)}/share`] = { status: 200, body: { epoch: 1, stored: 1 } };
  expect((await session.join({ chat_id: chatId })).hasKey).toBe(true);
  return ring;
}

function userMessage(chatId: number, id: string, chatKey: Uint8Array, epoch: number) {
  const content = encryptMessage({ chatKey, chatId, epoch, plaintext: `message ${id}` });
  const createdAt = '2026-01-01T00:00:00.000Z';
  return { id, chat_id: chatId, type: 'user', sender_id: 2, content, system: null, created_at: createdAt };
}

function systemMessage(chatId: number, id: string) {
  const createdAt = '2026-01-01T00:00:00.000Z';
  return {
    id,
    chat_id: chatId,
    type: 'system',
    sender_id: null,
    content: '',
    system: { kind: 'join' },
    created_at: createdAt,
  };
}

const notMember: Answer = {
  status: 403,
  body: { code: 'ERR_NOT_CHAT_MEMBER', message: 'You are not a member of this chat.' },
};

describe('room:rekey, then room:left before the rekey delay ends', () => {
  it('starts no keying for the chat it left: no GET …/keys, no error event', async () => {
    const { session, server, errors } = await openSession({ keyWaitMs: 5000 });
    await joinAndKey(session, 5);
    const ring6 = await joinAndKey(session, 6);
    // Chat 5: the user is no member any more (a kick), so GET …/keys answers 403 as Parlor's does.
    answers[`GET ${keysPath(5)}`] = notMember;
    answers[`GET ${keysPath(6)}`] = { status: 200, body: { epoch: 2, envelope: null, key_ring: ring6 } };
    answers[`POST ${keysPath(6)}/share`] = { status: 200, body: { epoch: 2, stored: 1 } };
    const keyed6 = new Promise<void>((resolve) =>
      session.on('key', (e) => (e.chatId === 6 && e.epoch === 2 ? resolve() : undefined)),
    );
    requests.length = 0;
    // A node that has not applied the kick yet sends the kick's room:rekey, then room:left.
    server.emit('room:rekey', { chat_id: 5, epoch: 2 });
    server.emit('room:left', { chat_id: 5, reason: 'kicked' });
    // The barrier: chat 6's rekey is delayed as long as chat 5's, so its delay ends after chat 5's.
    server.emit('room:rekey', { chat_id: 6, epoch: 2 });
    await keyed6;
    expect({
      requests: requests.map((r) => r.route),
      errors: errors.map((e) => `${e.code}: ${e.message}`),
    }).toEqual({ requests: [`GET ${keysPath(6)}`, `POST ${keysPath(6)}/share`], errors: [] });
    expect(session.epochOf(5)).toBe(2);
    expect(session.hasKey(5)).toBe(false);
  });
});

describe('room:key of an epoch arriving after room:rekey of the next one', () => {
  it('delivers a message of that epoch decrypted once its key arrives (it waits for it)', async () => {
    const { session, server, entries } = await openSession({ keyWaitMs: 10_000 });
    const other = publicKeyToBase64(generateKeyPair().publicKey);
    const ring = { ...ownRing(session), '2': { '9': other } };
    joinAcks[5] = { ok: true, chat: { id: 5 }, epoch: 1, members: [], key_ring: ring };
    // Epoch 1 is keyed by the other member: no envelope for us yet, our keying loses the race.
    answers[`GET ${keysPath(5)}`] = { status: 200, body: { epoch: 1, envelope: null, key_ring: ring } };
    answers[`POST ${keysPath(5)}/share`] = {
      status: 409,
      body: { code: 'ERR_EPOCH_ALREADY_KEYED', message: 'This epoch is keyed already.' },
    };
    expect((await session.join({ chat_id: 5 }, { waitForKey: false })).hasKey).toBe(false);
    await until(() => requests.some((r) => r.route === `POST ${keysPath(5)}/share`));
    const key1 = generateChatKey();
    const message = userMessage(5, '100-1', key1, 1);
    const envelope = wrapChatKey({
      chatKey: key1,
      recipientPublicKey: publicKeyFromBase64(session.publicKey),
      chatId: 5,
      epoch: 1,
      recipientSessionId: SESSION_ID,
    });
    // Node B (a member left): room:rekey 2. Node A: the message sent at epoch 1 before the leave.
    answers[`GET ${keysPath(5)}`] = { status: 200, body: { epoch: 2, envelope: null, key_ring: ring } };
    server.emit('room:rekey', { chat_id: 5, epoch: 2 });
    server.emit('message:new', message);
    // The barrier: a message of another chat, delivered after chat 5's was read (or set waiting).
    server.emit('message:new', systemMessage(6, '100-2'));
    await until(() => entries.some((e) => e.chatId === 6));
    // Node A: the holder's share of epoch 1 for us, later than node B's rekey.
    server.emit('room:key', { chat_id: 5, epoch: 1, envelope, sender_session_id: 9 });
    await until(() => entries.some((e) => e.chatId === 5));
    const entry = entries.find((e) => e.chatId === 5) as ChatEntry;
    expect({
      kind: entry.kind,
      plaintext: entry.kind === 'user' ? entry.plaintext : null,
      error: entry.kind === 'undecryptable' ? entry.error.code : null,
    }).toEqual({ kind: 'user', plaintext: 'message 100-1', error: null });
  });

  it('delivers a removed member the messages of an epoch it never gets as undecryptable, after one bounded wait', async () => {
    const waits = vi.spyOn(ChatKeyStore.prototype, 'waitForEpoch');
    const { session, server, entries } = await openSession({ keyWaitMs: 200 });
    await joinAndKey(session, 5);
    answers[`GET ${keysPath(5)}`] = notMember;
    // The remaining members' keys of epochs 2 (the kick) and 3 (another removal): never shared with us.
    const [key2, key3] = [generateChatKey(), generateChatKey()];
    // Nodes that have not applied the kick yet deliver what the others sent at epochs 2 and 3.
    server.emit('room:rekey', { chat_id: 5, epoch: 2 });
    server.emit('room:left', { chat_id: 5, reason: 'kicked' });
    server.emit('room:rekey', { chat_id: 5, epoch: 3 });
    server.emit('message:new', userMessage(5, '200-1', key2, 2));
    server.emit('message:new', userMessage(5, '200-2', key2, 2));
    server.emit('message:new', userMessage(5, '200-3', key3, 3));
    server.emit('message:new', systemMessage(5, '200-4'));
    await until(() => entries.length === 4);
    expect(entries.map((e) => [e.message.id, e.kind, e.kind === 'undecryptable' ? e.error.code : null])).toEqual([
      ['200-1', 'undecryptable', 'NO_KEY_FOR_EPOCH'],
      ['200-2', 'undecryptable', 'NO_KEY_FOR_EPOCH'],
      ['200-3', 'undecryptable', 'NO_KEY_FOR_EPOCH'],
      ['200-4', 'system', null],
    ]);
    // One wait per epoch: the second message of epoch 2 did not wait again.
    expect(waits.mock.calls.map(([chatId, epoch]) => [chatId, epoch])).toEqual([
      [5, 2],
      [5, 3],
    ]);
  });
});

describe('history with a malformed page', () => {
  const messagesPath = '/v1/portal/chats/5/messages';

  it('rejects with BAD_SERVER_ANSWER (not a TypeError) when an entry is no message', async () => {
    const { session } = await openSession({ keyWaitMs: 5000 });
    answers[`GET ${messagesPath}`] = { status: 200, body: { messages: [systemMessage(5, '1-2')] } };
    expect((await session.history(5)).map((e) => e.kind)).toEqual(['system']);
    answers[`GET ${messagesPath}`] = { status: 200, body: { messages: [null, systemMessage(5, '1-1')] } };
    const error = await session.history(5).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(E2ESessionError);
    expect({ code: (error as E2ESessionError).code, details: (error as E2ESessionError).details }).toMatchObject({
      code: 'BAD_SERVER_ANSWER',
      details: { answer: 'GET /v1/portal/chats/{chat_id}/messages', path: '/messages/0' },
    });
    answers[`GET ${messagesPath}`] = { status: 200, body: { messages: 'none' } };
    await expect(session.history(5)).rejects.toMatchObject({ code: 'BAD_SERVER_ANSWER' });
  });
});

describe('portal:key_removed {session_id: null} within the coalescing of announcements', () => {
  it('shares with none of the sessions of the user it withdrew', async () => {
    const { session, server, errors } = await openSession({ keyWaitMs: 5000 });
    await joinAndKey(session, 5);
    const [key9, key10, key11] = [0, 1, 2].map(() => publicKeyToBase64(generateKeyPair().publicKey));
    // The ring still lists user 2's sessions: only the withdrawal keeps the key from them.
    const ring = { ...ownRing(session), '2': { '9': key9, '10': key10 }, '3': { '11': key11 } };
    answers[`GET ${keysPath(5)}`] = { status: 200, body: { epoch: 1, envelope: null, key_ring: ring } };
    requests.length = 0;
    server.emit('portal:key_added', { chat_id: 5, user_id: 2, session_id: 9, public_key: key9 });
    server.emit('portal:key_added', { chat_id: 5, user_id: 2, session_id: 10, public_key: key10 });
    server.emit('portal:key_removed', { chat_id: 5, user_id: 2, session_id: null });
    // The barrier: another user's session, announced with them, gets its share.
    server.emit('portal:key_added', { chat_id: 5, user_id: 3, session_id: 11, public_key: key11 });
    await until(() => requests.some((r) => r.route === `POST ${keysPath(5)}/share`));
    const shares = requests.filter((r) => r.route === `POST ${keysPath(5)}/share`);
    const named = shares.map((r) =>
      (r.body as { envelopes: { session_id: number }[] }).envelopes.map((e) => e.session_id),
    );
    expect({ named, errors: errors.map((e) => e.code) }).toEqual({ named: [[11]], errors: [] });
  });
});
