import {
  buildKeyShare,
  encryptMessage,
  generateChatKey,
  generateKeyPair,
  type KeyPair,
  publicKeyToBase64,
  unwrapChatKey,
  wrapChatKey,
} from '@parlor/sdk';
import { expect } from 'vitest';
import type { TestApp } from './app.js';
import type { Client } from './client.js';
import { type LoggedIn, login, setLevel } from './flows.js';
import { connectSocket, type TestSocket } from './sockets.js';

/** A logged-in session with a registered key and a connected socket. */
export interface Member extends LoggedIn {
  keys: KeyPair;
  socket: TestSocket;
  sessionId: number;
}

/** Logs in (optionally as an existing identity), registers a fresh key pair and connects. */
export async function member(app: TestApp, opts: { level?: number; platformUserId?: string } = {}): Promise<Member> {
  const who = await login(app, { platformUserId: opts.platformUserId });
  if (opts.level) await setLevel(app, who.user.id, opts.level);
  const keys = generateKeyPair();
  const reg = await who.client.post('/v1/portal/keys', { public_key: publicKeyToBase64(keys.publicKey) });
  const socket = await connectSocket(app.url, who.client);
  const sessions = await who.client.get('/v1/users/me/sessions');
  expect(sessions.status).toBe(200);
  const sessionId = await sessionIdOf(app, who.client);
  expect(reg.body).toEqual({ status: 'registered', session_id: sessionId });
  return { ...who, keys, socket, sessionId };
}

/** The numeric session id behind a client's cookie (what key rings and envelopes name). */
export async function sessionIdOf(app: TestApp, client: Client): Promise<number> {
  const rows = (await app.database.db.execute(
    `select id from sessions where token_suffix = '${client.cookie?.slice(-6)}' and ended_at is null` as never,
  )) as unknown as { rows: { id: number }[] } | { id: number }[];
  const list = 'rows' in rows ? rows.rows : rows;
  return Number(list[0]?.id);
}

export async function join(m: Member, payload: { chat_id: number } | { invite: string }) {
  return m.socket.emitWithAck('room:join', payload as never) as Promise<any>;
}

/** Keys the chat's current epoch from `m` for the whole ring; returns the chat key. */
export async function keyEpoch(m: Member, chatId: number): Promise<{ chatKey: Uint8Array; epoch: number }> {
  const state = await m.client.get(`/v1/portal/chats/${chatId}/keys`);
  const chatKey = generateChatKey();
  const share = buildKeyShare({ keyRing: state.body.key_ring, chatKey, chatId, epoch: state.body.epoch });
  const res = await m.client.post(`/v1/portal/chats/${chatId}/keys/share`, {
    epoch: state.body.epoch,
    envelopes: share.envelopes,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return { chatKey, epoch: state.body.epoch };
}

/** Reads this member's envelope at the current epoch and unwraps it. */
export async function receiveKey(m: Member, chatId: number): Promise<{ chatKey: Uint8Array; epoch: number }> {
  const state = await m.client.get(`/v1/portal/chats/${chatId}/keys`);
  expect(state.body.envelope).toEqual(expect.any(String));
  const chatKey = unwrapChatKey({
    envelope: state.body.envelope,
    recipientPrivateKey: m.keys.privateKey,
    chatId,
    epoch: state.body.epoch,
    recipientSessionId: m.sessionId,
  });
  return { chatKey, epoch: state.body.epoch };
}

/** `holder` wraps the epoch's key for `recipients`' sessions and shares it (as on portal:key_added). */
export async function shareKey(
  holder: Member,
  key: { chatId: number; chatKey: Uint8Array; epoch: number },
  recipients: Member[],
): Promise<void> {
  const { chatId, chatKey, epoch } = key;
  const envelopes = recipients.map((m) => ({
    session_id: m.sessionId,
    wrapped: wrapChatKey({
      chatKey,
      recipientPublicKey: m.keys.publicKey,
      chatId,
      epoch,
      recipientSessionId: m.sessionId,
    }),
  }));
  const res = await holder.client.post(`/v1/portal/chats/${chatId}/keys/share`, { epoch, envelopes });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

/** An Admin's public chat with the creator joined and the first epoch keyed. */
export async function keyedChat(app: TestApp, type: 'public' | 'private' = 'public') {
  const owner = await member(app, { level: 2 });
  const created = await owner.client.post('/v1/portal/chats/create', { name: 'Test chat', type });
  expect(created.status).toBe(200);
  const chatId: number = created.body.chat.id;
  expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
  const { chatKey, epoch } = await keyEpoch(owner, chatId);
  return { owner, chatId, chatKey, epoch };
}

export function bundle(chatKey: Uint8Array, chatId: number, epoch: number, plaintext: string): string {
  return encryptMessage({ chatKey, chatId, epoch, plaintext });
}
