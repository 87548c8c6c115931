import { Limits } from '@parlor/protocol';
import { wrapChatKey } from '@parlor/sdk';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { CHAT_PURGE_AFTER_MS } from '../src/modules/chats/chats.direct.js';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyEpoch, member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows } from './support/faults.js';
import { type LoggedIn, login } from './support/flows.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

let app: TestApp;
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

const sweep = (opts?: { batch?: number; maxBatches?: number }) => app.services.chats.sweepDirect(opts);
/** Rows of `table` that belong to chat `chatId`. */
const rowsOf = (table: string, chatId: number) =>
  countRows(app, `select count(*) as n from ${table} where chat_id = ${chatId}`);

async function matched(a: LoggedIn, b: LoggedIn): Promise<number> {
  const made = await app.services.chats.createDirect([a.user.id, b.user.id], ['lifecycle']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  return made.chat.id;
}

describeApp('the direct-chat lifecycle sweep', () => {
  it('ends both memberships when it removes a chat, and deletes the chat and its rows 7 days later', async () => {
    const [a, b] = [await login(app), await login(app)];
    const chatId = await matched(a, b);
    clock.advance(Limits.DIRECT_CHAT_TTL_MS);
    await sweep();
    clock.advance(Limits.DIRECT_ARCHIVE_TTL_MS);
    await sweep();
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).status).toBe(404);
    // The users' chat lists (read on every socket connect) no longer reach the removed chat's rows.
    expect(await rowsOf('chat_members', chatId)).toBe(2);
    expect(
      await countRows(app, `select count(*) as n from chat_members where chat_id = ${chatId} and left_at is null`),
    ).toBe(0);
    expect(await rowsOf('messages', chatId)).toBe(1);

    clock.advance(CHAT_PURGE_AFTER_MS - 1);
    expect((await sweep()).purged).toBe(0);
    expect(await rowsOf('chat_activity', chatId)).toBe(2);
    clock.advance(1);
    expect((await sweep()).purged).toBe(1);
    expect(await countRows(app, `select count(*) as n from chats where id = ${chatId}`)).toBe(0);
    for (const table of ['messages', 'chat_members', 'chat_activity', 'key_envelopes', 'chat_invites'])
      expect(await rowsOf(table, chatId), table).toBe(0);
    // The users stay, and their lists answer.
    expect((await a.client.get('/v1/portal/chats')).status).toBe(200);
    expect((await b.client.get('/v1/users/me')).status).toBe(200);
  });

  it('tells every socket of both members when it removes a chat, in its room or not (another tab), once', async () => {
    const [a, b] = [await login(app), await login(app)];
    const chatId = await matched(a, b);
    const inRoom = await connectSocket(app.url, a.client);
    await inRoom.next('chat:list');
    expect(((await inRoom.emitWithAck('room:join', { chat_id: chatId } as never)) as any).ok).toBe(true);
    // Other tabs: connected, the chat in their lists, its room not entered.
    const tabs = [await connectSocket(app.url, a.client), await connectSocket(app.url, b.client)];
    for (const tab of tabs) expect((await tab.next('chat:list')).chats.map((c: any) => c.id)).toContain(chatId);
    clock.advance(Limits.DIRECT_CHAT_TTL_MS);
    await sweep();
    clock.advance(Limits.DIRECT_ARCHIVE_TTL_MS);
    expect((await sweep()).removed).toBeGreaterThanOrEqual(1);
    const deleted = { chat_id: chatId, reason: 'deleted' };
    for (const socket of [inRoom, ...tabs]) {
      expect(await socket.next('room:left', (e) => e.chat_id === chatId)).toEqual(deleted);
      // An ack on the socket's connection comes after anything it was sent before it.
      await socket.emitWithAck('vm:credentials', { chat_id: chatId });
      expect(socket.received.filter((r) => r.event === 'room:left' && r.payload.chat_id === chatId)).toHaveLength(1);
    }
    // Purged, so the counts of the tests after this one are theirs alone.
    clock.advance(CHAT_PURGE_AFTER_MS);
    expect((await sweep()).purged).toBeGreaterThanOrEqual(1);
  });

  it("announces each chat it archives (chat:updated) with its members; one a moderator's kick archived already is left as it is", async () => {
    const [a, b, c, d] = [await member(app), await member(app), await member(app), await member(app)];
    const [kicked, whole] = [await matched(a, b), await matched(c, d)];
    const mod = await member(app, { level: 1 });
    const ended = b.socket.next('chat:updated', (u: any) => u.chat.id === kicked);
    expect((await mod.client.post(`/v1/portal/chats/${kicked}/kick`, { user_id: a.user.id })).status).toBe(200);
    // The kick ends the direct chat as a leave does: archived at once, with the peer alone in it.
    expect((await ended).chat).toMatchObject({ archived: true, member_count: 1 });
    const archivedAt = `select count(*) as n from chats where id = ${kicked} and archived_at = '${clock.now().toISOString()}'`;
    expect(await countRows(app, archivedAt)).toBe(1);
    clock.advance(Limits.DIRECT_CHAT_TTL_MS);
    const swept = await sweep({ batch: 1000, maxBatches: 100 });
    // The kicked one, archived 24 h ago, is removed now, in the same sweep.
    expect([swept.archived >= 1, swept.removed >= 1]).toEqual([true, true]);
    // The members' sockets entered the chat's room when it was made.
    const updated = await c.socket.next('chat:updated', (u: any) => u.chat.id === whole && u.chat.archived);
    expect(updated.chat.member_count).toBe(2);
    expect((await c.client.get(`/v1/portal/chats/${whole}`)).body.chat.member_count).toBe(2);
    // The sweep did not archive again the chat the kick archived, nor announce it.
    expect(await countRows(app, archivedAt)).toBe(1);
    await b.socket.emitWithAck('vm:credentials', { chat_id: kicked });
    expect(b.socket.received.filter((r) => r.event === 'chat:updated' && r.payload.chat.id === kicked)).toHaveLength(1);
    // Removed and purged, so the counts of the tests after this one are theirs alone.
    clock.advance(Limits.DIRECT_ARCHIVE_TTL_MS);
    expect((await sweep({ batch: 1000, maxBatches: 100 })).removed).toBeGreaterThanOrEqual(1);
    clock.advance(CHAT_PURGE_AFTER_MS);
    expect((await sweep({ batch: 1000, maxBatches: 100 })).purged).toBeGreaterThanOrEqual(2);
  });

  it('handles more than one batch a tick while batches come back full, up to maxBatches', async () => {
    // Whatever earlier tests left due is handled first.
    await sweep({ batch: 1000, maxBatches: 100 });
    // A pair each: a free account has one active direct chat at a time.
    for (let i = 0; i < 5; i++) await matched(await login(app), await login(app));
    clock.advance(Limits.DIRECT_CHAT_TTL_MS);
    expect((await sweep({ batch: 2, maxBatches: 2 })).archived).toBe(4);
    expect((await sweep({ batch: 2, maxBatches: 2 })).archived).toBe(1);
    clock.advance(Limits.DIRECT_ARCHIVE_TTL_MS);
    expect((await sweep({ batch: 2, maxBatches: 5 })).removed).toBe(5);
    clock.advance(CHAT_PURGE_AFTER_MS);
    expect((await sweep({ batch: 2, maxBatches: 5 })).purged).toBe(5);
  });
});

// Spec 3, 8: a direct chat expires 24 h after its match. It is archived exactly then, as
// punishments and subscriptions end exactly at their deadline; the minute sweep only writes it.
describeApp('a direct chat at its expiry, before the sweep archives it', () => {
  it('holds both users’ direct-chat slots until 1 ms before its expiry and frees them at it; the sweep then archives it', async () => {
    const [a, b] = [await login(app), await login(app)];
    const chatId = await matched(a, b);
    clock.advance(Limits.DIRECT_CHAT_TTL_MS - 1);
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(false);
    const full = await app.services.chats.createDirect([a.user.id, b.user.id], ['lifecycle']);
    expect(full).toEqual({
      refused: {
        missing: [],
        inactive: [],
        full: [a.user.id, b.user.id],
        matchBlocked: [],
        cancelled: [],
        blocked: false,
      },
    });
    clock.advance(1);
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(true);
    expect((await b.client.get('/v1/portal/chats')).body.chats.find((c: any) => c.id === chatId).archived).toBe(true);
    const next = await matched(a, b);
    expect(next).not.toBe(chatId);
    // Not archived in storage yet: the sweep writes it (and tells the members) once.
    expect(await countRows(app, `select count(*) as n from chats where id = ${chatId} and archived_at is null`)).toBe(
      1,
    );
    await sweep({ batch: 1000, maxBatches: 100 });
    expect(await countRows(app, `select count(*) as n from chats where id = ${chatId} and archived_at is null`)).toBe(
      0,
    );
    expect(await countRows(app, `select count(*) as n from chats where id = ${next} and archived_at is null`)).toBe(1);
  });

  it('answers 403 ERR_CHAT_READ_ONLY to sends, deletes, key shares and a room VM start from its expiry (a send 1 ms before goes through)', async () => {
    const [a, b] = [await member(app), await member(app)];
    const chatId = await matched(a, b);
    for (const m of [a, b]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    const { chatKey, epoch } = await keyEpoch(a, chatId);
    const send = () =>
      a.client.post(`/v1/portal/chats/${chatId}/messages`, { content: bundle(chatKey, chatId, epoch, 'hi') });
    clock.advance(Limits.DIRECT_CHAT_TTL_MS - 1);
    expect((await send()).status).toBe(200);
    clock.advance(1);
    const refused = (res: { status: number; body: any }) => [res.status, res.body.code];
    expect(refused(await send())).toEqual([403, 'ERR_CHAT_READ_ONLY']);
    // Its room VM does not start either (the sweep has not written the archive yet).
    expect(refused(await a.client.post(`/v1/portal/chats/${chatId}/start`, {}))).toEqual([403, 'ERR_CHAT_READ_ONLY']);
    expect(refused(await a.client.post(`/v1/portal/chats/${chatId}/messages/delete-mine`, {}))).toEqual([
      403,
      'ERR_CHAT_READ_ONLY',
    ]);
    const device = await member(app, { platformUserId: b.platformUserId });
    const envelopes = [
      {
        session_id: device.sessionId,
        wrapped: wrapChatKey({
          chatKey,
          recipientPublicKey: device.keys.publicKey,
          chatId,
          epoch,
          recipientSessionId: device.sessionId,
        }),
      },
    ];
    expect(refused(await a.client.post(`/v1/portal/chats/${chatId}/keys/share`, { epoch, envelopes }))).toEqual([
      403,
      'ERR_CHAT_READ_ONLY',
    ]);
    expect(await rowsOf('messages', chatId)).toBe(2);
    expect(
      await countRows(app, `select count(*) as n from key_envelopes where recipient_session_id = ${device.sessionId}`),
    ).toBe(0);
    // The leave that would archive it finds no active direct chat: it is archived already.
    expect(refused(await a.client.post('/v1/portal/match/leave', { chat_id: chatId }))).toEqual([
      404,
      'ERR_NO_DIRECT_CHAT',
    ]);
  });
});

describeApp('a direct chat past its expiry: its epoch and its archive time', () => {
  it('keeps its epoch when a member session ends after the expiry, before the sweep as after it (no share could key a new one)', async () => {
    for (const swept of [false, true]) {
      const [a, b] = [await member(app), await member(app)];
      const chatId = await matched(a, b);
      for (const m of [a, b]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
      const { epoch } = await keyEpoch(a, chatId);
      // A second device of b, whose session ends once the chat is over.
      const device = await member(app, { platformUserId: b.platformUserId });
      clock.advance(Limits.DIRECT_CHAT_TTL_MS);
      if (swept) await sweep({ batch: 1000, maxBatches: 100 });
      expect((await a.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(true);
      expect((await device.client.post('/v1/authentication/logout')).status).toBe(200);
      const keys = await a.client.get(`/v1/portal/chats/${chatId}/keys`);
      expect([swept, keys.body.epoch]).toEqual([swept, epoch]);
      expect(keys.body.envelope).not.toBeNull();
    }
  });

  it('is archived as of its expiry when the sweep comes late, so it is removed 24 h after the expiry', async () => {
    const [a, b] = [await login(app), await login(app)];
    const chatId = await matched(a, b);
    const expiresAt = clock.now().getTime() + Limits.DIRECT_CHAT_TTL_MS;
    // The sweep comes by 2 h late (every node was down).
    clock.advance(Limits.DIRECT_CHAT_TTL_MS + 2 * 3600_000);
    await sweep({ batch: 1000, maxBatches: 100 });
    expect(
      await countRows(app, `select count(*) as n from chats where id = ${chatId} and archived_at = expires_at`),
    ).toBe(1);
    clock.advance(expiresAt + Limits.DIRECT_ARCHIVE_TTL_MS - 1 - clock.now().getTime());
    await sweep({ batch: 1000, maxBatches: 100 });
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).status).toBe(200);
    clock.advance(1);
    await sweep({ batch: 1000, maxBatches: 100 });
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).status).toBe(404);
  });
});

/** A stranger session (POST /v1/portal/stranger), its client holding the cookie only. */
async function stranger(): Promise<{ client: Client; id: number }> {
  const client = new Client(app.url, nextIp(), app.publicApiKey);
  const made = await client.post('/v1/portal/stranger', {});
  expect(made.status, JSON.stringify(made.body)).toBe(200);
  client.apiKey = null;
  return { client, id: made.body.user.id };
}

async function matchedWith(userIds: number[]): Promise<number> {
  const made = await app.services.chats.createDirect(userIds, ['lifecycle']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  return made.chat.id;
}

describeApp("a stranger's direct chats when its session ends (it never signs in again)", () => {
  it('ends them as a leave does at its logout: archived, the peer told, its only slot free and its status idle', async () => {
    const [peer, next] = [await member(app), await member(app)];
    const s = await stranger();
    const chatId = await matchedWith([s.id, peer.user.id]);
    expect((await join(peer, { chat_id: chatId })).ok).toBe(true);
    const { epoch } = (await peer.client.get(`/v1/portal/chats/${chatId}`)).body.chat;
    const system = peer.socket.next('message:new', (m) => m.chat_id === chatId && m.system?.kind === 'leave');
    const updated = peer.socket.next('chat:updated', (p) => p.chat.id === chatId);

    expect((await s.client.post('/v1/authentication/logout', {})).status).toBe(200);
    expect((await system).system).toEqual({ kind: 'leave', user_id: s.id });
    expect((await updated).chat).toMatchObject({ archived: true, epoch });
    expect((await peer.client.get(`/v1/portal/chats/${chatId}`)).body.chat).toMatchObject({ archived: true, epoch });
    expect((await peer.client.get('/v1/portal/match/status')).body.state).toBe('idle');
    // Its one free direct-chat slot is free again at once, not when the chat would have expired.
    await matchedWith([peer.user.id, next.user.id]);
  });

  it('ends them when its session expires (the expiry sweep), and keeps a registered user’s at its logout', async () => {
    const [peer, registered, other] = [await member(app), await member(app), await member(app)];
    const s = await stranger();
    const strangers = await matchedWith([s.id, peer.user.id]);
    const kept = await matchedWith([registered.user.id, other.user.id]);
    expect((await registered.client.post('/v1/authentication/logout', {})).status).toBe(200);
    // The stranger's session expires now (long before its chat would).
    await app.database.db.execute(
      `update sessions set expires_at = '${clock.now().toISOString()}' where user_id = ${s.id}` as never,
    );
    expect(await app.services.sessions.sweepExpired()).toBeGreaterThan(0);
    const history = (await peer.client.get(`/v1/portal/chats/${strangers}/messages`)).body.messages as any[];
    expect(history.filter((m) => m.system?.kind === 'leave').map((m) => m.system)).toEqual([
      { kind: 'leave', user_id: s.id },
    ]);
    expect((await peer.client.get(`/v1/portal/chats/${strangers}`)).body.chat).toMatchObject({ archived: true });
    expect((await other.client.get(`/v1/portal/chats/${kept}`)).body.chat).toMatchObject({ archived: false });
    expect((await other.client.get('/v1/portal/match/status')).body.state).toBe('matched');
  });
});
