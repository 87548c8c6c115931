import { Limits } from '@parlor/protocol';
import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { chatMembers } from '../src/platform/db/schema.js';
import { makeWriteLimit } from '../src/platform/write-limit.js';
import { describeApp, type Nodes, startNodes, type TestApp } from './support/app.js';
import { join, keyedChat, member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { createLoginBot, type LoggedIn, login, operator, setLevel } from './support/flows.js';
import { closeAllSockets } from './support/sockets.js';

/**
 * The per-user write limit (platform/write-limit.ts): Limits.WRITES_PER_USER POSTs per window for
 * each signed-in user, shared by every node (cluster mode runs two nodes over one PostgreSQL +
 * Redis; embedded mode has one node, so A and B are it). The window is a minute of real time, and
 * every test uses fresh users, so no test spends another's allowance.
 */
let nodes: Nodes;
let a: TestApp;
let b: TestApp;
let bot: Client;

beforeAll(async () => {
  nodes = await startNodes();
  ({ a, b } = nodes);
  bot = await createLoginBot(a);
});
afterAll(async () => {
  closeAllSockets();
  await nodes?.close();
});

/** A counted write that changes nothing visible: marks every notification read. */
const readAll = (client: Client) => client.post('/v1/notifications/read-all', {});

/** Spends `n` of the user's writes, alternating between the nodes; every one must be accepted. */
async function spend(who: LoggedIn, n: number): Promise<void> {
  const clients = [who.client, who.client.on(b)];
  for (let i = 0; i < n; i += 1) {
    const res = await readAll(clients[i % 2] as Client);
    expect(res.status, `write ${i + 1}`).toBe(200);
  }
}

describeApp('the per-user write limit', () => {
  it('spends nothing for a refused write: a write given back while another was refused is usable again', async () => {
    // The app's own store (in-process, or Redis in cluster mode), for a user id no test signs in as.
    const writes = makeWriteLimit(a.state);
    const userId = 2_000_000_000 + Math.floor(Math.random() * 100_000_000);
    for (let i = 0; i < Limits.WRITES_PER_USER - 1; i++) await writes.spend(userId);
    const last = await writes.spend(userId);
    // The last one's handler will answer 400 ERR_VALIDATION; meanwhile another write is refused.
    await expect(writes.spend(userId)).rejects.toMatchObject({ code: 'ERR_RATE_LIMITED' });
    await writes.giveBack(last);
    // One write is left, and only one.
    await writes.spend(userId);
    await expect(writes.spend(userId)).rejects.toMatchObject({ code: 'ERR_RATE_LIMITED' });
  });

  it(`accepts ${Limits.WRITES_PER_USER} writes a window across the nodes and refuses the next with 429 and retry_after`, async () => {
    const who = await login(a, { bot });
    await spend(who, Limits.WRITES_PER_USER);
    for (const client of [who.client, who.client.on(b)]) {
      const refused = await readAll(client);
      expect([refused.status, refused.body.code]).toEqual([429, 'ERR_RATE_LIMITED']);
      expect(refused.body.retry_after).toBeGreaterThanOrEqual(1);
      expect(refused.body.retry_after).toBeLessThanOrEqual(Limits.WRITE_WINDOW_MS / 1000);
    }
    // A refused write did nothing: the profile update below is refused too, and the name stays.
    const rename = await who.client.post('/v1/users/me/update', { username: `limited_${who.user.id}` });
    expect(rename.status).toBe(429);
    expect((await who.client.get('/v1/users/me')).body.user.username).toBe(who.user.username);
    // Reads are not counted.
    expect((await who.client.on(b).get('/v1/notifications/unread')).status).toBe(200);
  });

  it('counts each user on its own', async () => {
    const first = await login(a, { bot });
    const second = await login(a, { bot });
    await spend(first, Limits.WRITES_PER_USER);
    expect((await readAll(first.client)).status).toBe(429);
    expect((await readAll(second.client)).status).toBe(200);
  });

  it('does not count a request refused by validation', async () => {
    const who = await login(a, { bot });
    for (let i = 0; i < 5; i += 1) {
      const bad = await who.client.post('/v1/users/me/update', { username: 1 });
      expect(bad.status).toBe(400);
    }
    await spend(who, Limits.WRITES_PER_USER);
    expect((await readAll(who.client)).status).toBe(429);
  });

  it('gives back the write of a request its handler refuses 400 ERR_VALIDATION: the whole window is left after many', async () => {
    const who = await login(a, { bot });
    await setLevel(a, who.user.id, 2);
    const other = await login(a, { bot });
    const clients = [who.client, who.client.on(b)];
    // Bodies the schema takes and a rule of the route refuses: a self-block, a username the admin
    // update refuses, a low-order public key, a share naming one session twice.
    const refused: [string, unknown][] = [
      ['/v1/users/me/blocks/create', { user_id: who.user.id }],
      [`/v1/admin/users/${other.user.id}/update`, { username: 'not a name' }],
      ['/v1/portal/keys', { public_key: Buffer.alloc(32).toString('base64') }],
      [
        '/v1/portal/chats/2147483000/keys/share',
        { epoch: 1, envelopes: [1, 1].map((session_id) => ({ session_id, wrapped: 'A'.repeat(140) })) },
      ],
    ];
    for (let i = 0; i <= Limits.WRITES_PER_USER; i += 1) {
      const [path, body] = refused[i % refused.length] as [string, unknown];
      const res = await (clients[i % 2] as Client).post(path, body);
      expect([res.status, res.body.code], `${path} #${i + 1}`).toEqual([400, 'ERR_VALIDATION']);
    }
    await spend(who, Limits.WRITES_PER_USER);
    expect((await readAll(who.client.on(b))).status).toBe(429);
    // Refusals of the rules themselves (here 404: no such chat) spend their write as before.
    const fresh = await login(a, { bot });
    const missing = await fresh.client.post('/v1/portal/chats/2147483000/keys/share', {
      epoch: 1,
      envelopes: [{ session_id: 1, wrapped: 'A'.repeat(140) }],
    });
    expect([missing.status, missing.body.code]).toEqual([404, 'ERR_CHAT_NOT_FOUND']);
    await spend(fresh, Limits.WRITES_PER_USER - 1);
    expect((await readAll(fresh.client)).status).toBe(429);
  });

  it('leaves message sends (limited on their own), ending sessions and logout out of it', async () => {
    const who = await login(a, { bot });
    const other = await login(a, { bot, platformUserId: who.platformUserId });
    await spend(who, Limits.WRITES_PER_USER);
    expect((await readAll(who.client)).status).toBe(429);
    // A send reaches its own checks: the chat does not exist.
    const send = await who.client.post('/v1/portal/chats/2147483000/messages', {
      content: JSON.stringify({ v: 2, epoch: 1, ct: Buffer.alloc(40).toString('base64') }),
    });
    expect(send.status).toBe(404);
    const suffix = (await other.client.get('/v1/users/me/sessions')).body.sessions.find(
      (s: { is_current: boolean }) => s.is_current,
    )?.token_suffix;
    expect(typeof suffix).toBe('string');
    expect((await who.client.post(`/v1/users/me/sessions/${suffix}/destroy`, {})).status).toBe(200);
    expect((await who.client.post('/v1/users/me/sessions/destroy', {})).status).toBe(200);
    expect((await who.client.post('/v1/authentication/logout', {})).status).toBe(200);
  });

  it("does not count a stranger's request refused 401 for naming a chat outside its reach, body valid or not", async () => {
    const { chatId } = await keyedChat(a);
    const s = new Client(a.url, nextIp(), a.publicApiKey);
    expect((await s.post('/v1/portal/stranger', {})).status).toBe(200);
    s.apiKey = null;
    const clients = [s, s.on(b)];
    const envelopes = [{ session_id: 1, wrapped: 'A'.repeat(40) }];
    // Writes to a public chat and to an id of no chat, some with a body their schema refuses: each
    // is told 401 before the write limit (and before validation), so none spends a write.
    const refused: [string, unknown][] = [
      [`/v1/portal/chats/${chatId}/keys/share`, { epoch: 1, envelopes }],
      [`/v1/portal/chats/${chatId}/messages/delete`, { ids: ['1-1'] }],
      [`/v1/portal/chats/${chatId}/messages/delete-mine`, {}],
      ['/v1/portal/chats/2147483000/keys/share', { epoch: 1, envelopes }],
      [`/v1/portal/chats/${chatId}/keys/share`, { epoch: 'one', envelopes: 'none' }],
      [`/v1/portal/chats/${chatId}/messages/delete`, { ids: 'all' }],
    ];
    for (let i = 0; i <= Limits.WRITES_PER_USER; i += 1) {
      const [path, body] = refused[i % refused.length] as [string, unknown];
      const res = await (clients[i % 2] as Client).post(path, body);
      expect([res.status, res.body.code], `${path} #${i + 1}`).toEqual([401, 'ERR_UNAUTHENTICATED']);
    }
    // The whole allowance is left: a stranger's counted write (a dequeue) is accepted that many times.
    for (let i = 0; i < Limits.WRITES_PER_USER; i += 1) {
      const res = await (clients[i % 2] as Client).post('/v1/portal/match/dequeue', {});
      expect(res.status, `dequeue ${i + 1}`).toBe(200);
    }
    expect((await s.post('/v1/portal/match/dequeue', {})).status).toBe(429);
  });

  it('does not count the operator token', async () => {
    const who = await login(a, { bot });
    const op = operator(a);
    for (let i = 0; i <= Limits.WRITES_PER_USER; i += 1) {
      const res = await op.post(`/v1/admin/users/${who.user.id}/update`, { username: `op${i % 2}_${who.user.id}` });
      expect(res.status, `operator write ${i + 1}`).toBe(200);
    }
  });

  it('spends a write on room:join as a new member and on room:leave; entering a chat one is in is free', async () => {
    const first = await keyedChat(a);
    const second = await keyedChat(a);
    const m = await member(a);
    const isMember = async (chatId: number) =>
      (
        await a.database.db
          .select()
          .from(chatMembers)
          .where(and(eq(chatMembers.chatId, chatId), eq(chatMembers.userId, m.user.id)))
      ).length === 1;
    // member() registered a key: one write spent.
    await spend(m, Limits.WRITES_PER_USER - 2);
    expect((await join(m, { chat_id: first.chatId })).ok).toBe(true);
    expect(await isMember(first.chatId)).toBe(true);
    // The allowance is spent now; joining the chat again only enters its room.
    expect((await join(m, { chat_id: first.chatId })).ok).toBe(true);
    const refusedJoin = await join(m, { chat_id: second.chatId });
    expect([refusedJoin.ok, refusedJoin.code]).toEqual([false, 'ERR_RATE_LIMITED']);
    expect(refusedJoin.retry_after).toBeGreaterThanOrEqual(1);
    expect(await isMember(second.chatId)).toBe(false);
    const refusedLeave = (await m.socket.emitWithAck('room:leave', { chat_id: first.chatId })) as {
      ok: boolean;
      code?: string;
    };
    expect([refusedLeave.ok, refusedLeave.code]).toEqual([false, 'ERR_RATE_LIMITED']);
    expect(await isMember(first.chatId)).toBe(true);
  });

  it(`accepts ${Limits.ROOM_ENTERS_PER_USER} room:join a window, entering a chat one is in included, and refuses the next`, async () => {
    const { chatId } = await keyedChat(a);
    const m = await member(a);
    for (let i = 0; i < Limits.ROOM_ENTERS_PER_USER; i += 1) {
      const ack = await join(m, { chat_id: chatId });
      expect(ack.ok, `join ${i + 1}: ${JSON.stringify(ack)}`).toBe(true);
    }
    const refused = await join(m, { chat_id: chatId });
    expect([refused.ok, refused.code]).toEqual([false, 'ERR_RATE_LIMITED']);
    expect(refused.retry_after).toBeGreaterThanOrEqual(1);
    // Writes are a separate allowance: the joins spent one (the first made a member), the key one.
    await spend(m, Limits.WRITES_PER_USER - 2);
    expect((await readAll(m.client)).status).toBe(429);
  });
});
