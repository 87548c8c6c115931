import { Limits } from '@parlor/protocol';
import { eq, inArray } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STRANGER_GRACE_MS } from '../src/modules/auth/auth.service.js';
import { FakeClock } from '../src/platform/clock.js';
import { chatMembers, sessions, users } from '../src/platform/db/schema.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { keyedChat, member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

let app: TestApp;
const clock = new FakeClock(Date.now());
let tagCounter = 0;
const tag = () => `str${Date.now() % 1000}x${++tagCounter}`;

beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

async function stranger() {
  const client = new Client(app.url, nextIp(), app.publicApiKey);
  const res = await client.post('/v1/portal/stranger', {});
  expect(res.status).toBe(200);
  return { client, id: res.body.user.id as number, cookie: client.cookie };
}

async function exists(id: number): Promise<boolean> {
  return (await app.database.db.select({ id: users.id }).from(users).where(eq(users.id, id))).length > 0;
}

const sweep = () => app.services.auth.sweepStrangers();

describeApp('the stranger account sweep', () => {
  describe('after logout', () => {
    it('deletes a stranger that never matched once the grace period has passed, not before; its cookie answers 401', async () => {
      const s = await stranger();
      const saved = s.cookie;
      expect((await s.client.post('/v1/authentication/logout', {})).status).toBe(200);
      clock.advance(STRANGER_GRACE_MS - 1);
      expect(await sweep()).not.toContain(s.id);
      expect(await exists(s.id)).toBe(true);
      clock.advance(1);
      expect(await sweep()).toContain(s.id);
      expect(await exists(s.id)).toBe(false);
      expect(await app.database.db.select().from(sessions).where(eq(sessions.userId, s.id))).toEqual([]);
      s.client.cookie = saved;
      expect((await s.client.get('/v1/portal/chats')).status).toBe(401);
      expect(await sweep()).not.toContain(s.id);
    });
  });

  it('keeps a stranger whose session is live', async () => {
    const s = await stranger();
    clock.advance(STRANGER_GRACE_MS * 3);
    expect(await sweep()).not.toContain(s.id);
    expect(await exists(s.id)).toBe(true);
    expect((await s.client.get('/v1/portal/chats')).status).toBe(200);
  });

  it('keeps a stranger of an archived direct chat until the chat is removed, then deletes it; the peer stays', async () => {
    const s = await stranger();
    await connectSocket(app.url, s.client);
    const peer = await member(app);
    const t = tag();
    expect((await s.client.post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
    const paired = await peer.client.post('/v1/portal/match', { interests: [t] });
    expect(paired.body.state).toBe('searching');
    const chatId: number = (await peer.socket.next('match:found')).chat_id;
    expect((await s.client.post('/v1/portal/match/leave', {})).body).toEqual({ ok: true, chat_id: chatId });
    expect((await s.client.post('/v1/authentication/logout', {})).status).toBe(200);

    clock.advance(STRANGER_GRACE_MS + 1);
    await app.services.chats.sweepDirect();
    expect(await sweep()).not.toContain(s.id);
    // The peer still reads the archived chat, the stranger's leave message and name included.
    const { chat } = (await peer.client.get(`/v1/portal/chats/${chatId}`)).body;
    expect(chat).toMatchObject({ archived: true });
    const history = (await peer.client.get(`/v1/portal/chats/${chatId}/messages`)).body;
    expect(JSON.stringify(history)).toContain(`"user_id":${s.id}`);

    clock.advance(Limits.DIRECT_ARCHIVE_TTL_MS);
    await app.services.chats.sweepDirect();
    expect((await peer.client.get(`/v1/portal/chats/${chatId}`)).status).toBe(404);
    expect(await sweep()).toContain(s.id);
    expect(await exists(s.id)).toBe(false);
    expect(await exists(peer.user.id)).toBe(true);
    const peerRows = await app.database.db.select().from(chatMembers).where(eq(chatMembers.userId, peer.user.id));
    expect(peerRows.map((r) => r.chatId)).toContain(chatId);
    expect((await peer.client.get('/v1/users/me')).status).toBe(200);
  });

  it('deletes each account once when two sweeps run at the same time', async () => {
    const made = [await stranger(), await stranger(), await stranger()];
    for (const s of made) expect((await s.client.post('/v1/authentication/logout', {})).status).toBe(200);
    clock.advance(STRANGER_GRACE_MS);
    const [first, second] = await Promise.all([sweep(), sweep()]);
    const all = [...first, ...second];
    expect(new Set(all).size).toBe(all.length);
    for (const s of made) expect(all.filter((id) => id === s.id)).toHaveLength(1);
    const ids = made.map((s) => s.id);
    expect(await app.database.db.select().from(users).where(inArray(users.id, ids))).toEqual([]);
  });

  it('deletes a stranger whose session expired without a logout, after the grace period', async () => {
    const s = await stranger();
    clock.advance(Limits.SESSION_TTL_USER_MS);
    expect(await sweep()).not.toContain(s.id);
    clock.advance(STRANGER_GRACE_MS);
    expect(await sweep()).toContain(s.id);
    expect((await s.client.get('/v1/portal/chats')).status).toBe(401);
  });
});

describeApp('a search when a session ends', () => {
  it("ends a stranger's search at its logout: the next searcher on its tag is not paired with it", async () => {
    const s = await stranger();
    await connectSocket(app.url, s.client);
    const next = await member(app);
    const t = tag();
    expect((await s.client.post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
    expect((await s.client.post('/v1/authentication/logout', {})).status).toBe(200);
    expect((await app.services.matchmaking.status(s.id)).state).toBe('idle');
    expect((await next.client.post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
    expect((await next.client.get('/v1/portal/match/status')).body.state).toBe('searching');
    await next.client.post('/v1/portal/match/dequeue', {});
  });

  // Both stores: the pairing's chat creation is held, then fails as a database failure would (a
  // dropped connection, a lock or statement timeout while it waits on the users' slot locks).
  it("ends a stranger's search at its logout while a pairing has it out of the queue: the pairing failing does not put it back", async () => {
    const s = await stranger();
    const socket = await connectSocket(app.url, s.client);
    const [caller, next] = [await member(app), await member(app)];
    const t = tag();
    expect((await s.client.post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
    const chats = app.services.chats;
    const createDirect = chats.createDirect;
    let entered!: () => void;
    const held = new Promise<void>((r) => {
      entered = r;
    });
    let fail!: () => void;
    const failing = new Promise<void>((r) => {
      fail = r;
    });
    chats.createDirect = async () => {
      entered();
      await failing;
      throw new Error('connection terminated');
    };
    let pairing: Awaited<ReturnType<typeof caller.client.post>>;
    try {
      const answer = caller.client.post('/v1/portal/match', { interests: [t] });
      await held;
      expect((await s.client.post('/v1/authentication/logout', {})).status).toBe(200);
      fail();
      pairing = await answer;
    } finally {
      chats.createDirect = createDirect;
    }
    expect(pairing.status).toBe(500);
    expect((await app.services.matchmaking.status(s.id)).state).toBe('idle');
    // Nobody meets it: the next searcher on its tag waits, and nothing counts it.
    expect((await next.client.post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
    expect((await next.client.get('/v1/portal/match/status')).body.state).toBe('searching');
    const searching = (await next.client.get('/v1/portal/match/statistics')).body.top_tags;
    expect(searching.find((x: { tag: string }) => x.tag === t)).toEqual({ tag: t, searching: 1 });
    expect(socket.received.filter((r) => r.event.startsWith('match:'))).toEqual([]);
    await next.client.post('/v1/portal/match/dequeue', {});
  });

  it("keeps a registered user's search when it logs out (it may sign in again before the deadline)", async () => {
    const who = await member(app);
    await member(app);
    expect((await who.client.post('/v1/portal/match', { interests: [tag()] })).body.state).toBe('searching');
    expect((await who.client.post('/v1/authentication/logout', {})).status).toBe(200);
    expect((await app.services.matchmaking.status(who.user.id)).state).toBe('searching');
    await app.services.matchmaking.dequeue(who.user.id);
  });
});

/** A matched direct chat of two users, made as matchmaking makes it. */
async function directChat(userIds: number[]): Promise<number> {
  const made = await app.services.chats.createDirect(userIds, ['strangers']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  return made.chat.id;
}

describeApp('a stranger naming a chat outside its reach (docs/api.md, Strangers)', () => {
  /** An id that names no chat (ids are serial from 1). */
  const missing = 2_000_000_000;

  it("answers 401 ERR_UNAUTHENTICATED alike on every chat route it may use, whether the id names no chat, another's chat or is no id at all", async () => {
    const s = await stranger();
    s.client.apiKey = null;
    const peer = await member(app);
    const own = await directChat([s.id, peer.user.id]);
    const others = await directChat([(await member(app)).user.id, (await member(app)).user.id]);
    const pub = await keyedChat(app);
    const envelopes = [{ session_id: 1, wrapped: 'A'.repeat(40) }];
    const routes = (id: number | string): [string, string, unknown][] => [
      ['GET', `/v1/portal/chats/${id}`, undefined],
      ['GET', `/v1/portal/chats/${id}/messages`, undefined],
      ['GET', `/v1/portal/chats/${id}/keys`, undefined],
      ['POST', `/v1/portal/chats/${id}/messages`, { content: '{"v":2,"epoch":1,"ct":"AAAA"}' }],
      ['POST', `/v1/portal/chats/${id}/messages/delete`, { ids: ['1-1'] }],
      ['POST', `/v1/portal/chats/${id}/messages/delete-mine`, {}],
      ['POST', `/v1/portal/chats/${id}/keys/share`, { epoch: 1, envelopes }],
      // Credentials before validation: a body its schema refuses is told 401 all the same.
      ['POST', `/v1/portal/chats/${id}/keys/share`, { epoch: 'one' }],
      ['POST', `/v1/portal/chats/${id}/messages/delete`, {}],
    ];
    // An id of no chat answered 404 where an existing chat answers 401: that told a stranger which
    // ids exist. A path parameter that is no id (text, 0, past INT32_MAX) names none of its chats either.
    for (const id of [missing, pub.chatId, others, 'abc', 0, 99_999_999_999]) {
      for (const [method, path, body] of routes(id)) {
        const res = await s.client.request(method, path, body === undefined ? {} : { body });
        expect([res.status, res.body.code], `${method} ${path}`).toEqual([401, 'ERR_UNAUTHENTICATED']);
      }
    }
    // Nor is a body read before: malformed JSON, a body past the route's limit, one that is no JSON.
    for (const [path, raw, contentType] of [
      [`/v1/portal/chats/${pub.chatId}/keys/share`, '{"epoch":', undefined],
      [`/v1/portal/chats/${missing}/messages/delete`, `{"ids":["${'1'.repeat(200_000)}"]}`, undefined],
      [`/v1/portal/chats/${others}/messages/delete-mine`, 'x', 'text/plain'],
    ] as const) {
      const res = await s.client.request('POST', path, { raw, contentType });
      expect([res.status, res.body.code], path).toEqual([401, 'ERR_UNAUTHENTICATED']);
    }
    // Its own direct chat it reads (and a body its schema refuses there is a 400, not a 401).
    for (const [method, path] of routes(own).slice(0, 3)) {
      expect((await s.client.request(method, path)).status, `${method} ${path}`).toBe(200);
    }
    const invalid = await s.client.post(`/v1/portal/chats/${own}/keys/share`, { epoch: 'one' });
    expect([invalid.status, invalid.body.code]).toEqual([400, 'ERR_VALIDATION']);
    // A registered user is still told that a chat does not exist.
    const absent = await peer.client.get(`/v1/portal/chats/${missing}`);
    expect([absent.status, absent.body.code]).toEqual([404, 'ERR_CHAT_NOT_FOUND']);
  });

  it('answers room:join and room:leave ERR_STRANGER_NOT_ALLOWED alike, whatever the payload names, but for its own direct chats', async () => {
    const s = await stranger();
    const socket = await connectSocket(app.url, s.client);
    const peer = await member(app);
    const own = await directChat([s.id, peer.user.id]);
    const others = await directChat([(await member(app)).user.id, (await member(app)).user.id]);
    const pub = await keyedChat(app);
    const invite = (await pub.owner.client.post(`/v1/portal/chats/${pub.chatId}/invites/create`, {})).body.invite.code;
    expect(invite).toEqual(expect.any(String));
    const ack = (event: 'room:join' | 'room:leave', payload: object) =>
      socket.emitWithAck(event, payload as never) as Promise<{ ok: boolean; code?: string }>;
    for (const payload of [
      { chat_id: missing },
      { chat_id: pub.chatId },
      { chat_id: others },
      { invite },
      { invite: 'noSuchInvite1' },
      { vanity: 'no-such-vanity' },
      { token: 'noSuchMatchToken' },
    ]) {
      const res = await ack('room:join', payload);
      expect([res.ok, res.code], JSON.stringify(payload)).toEqual([false, 'ERR_STRANGER_NOT_ALLOWED']);
    }
    for (const chatId of [missing, pub.chatId, others]) {
      const res = await ack('room:leave', { chat_id: chatId });
      expect([res.ok, res.code], String(chatId)).toEqual([false, 'ERR_STRANGER_NOT_ALLOWED']);
      const credentials = (await socket.emitWithAck('vm:credentials', { chat_id: chatId } as never)) as {
        ok: boolean;
        code?: string;
      };
      expect([credentials.ok, credentials.code], `vm:credentials ${chatId}`).toEqual([
        false,
        'ERR_STRANGER_NOT_ALLOWED',
      ]);
    }
    // Its own direct chat: joined; left only through match/leave, as anyone's.
    expect((await ack('room:join', { chat_id: own })).ok).toBe(true);
    // In its own direct chat it is a member like any other: no room runs there yet.
    const credentials = (await socket.emitWithAck('vm:credentials', { chat_id: own } as never)) as { code?: string };
    expect(credentials.code).toBe('ERR_ROOM_NOT_RUNNING');
    const leave = await ack('room:leave', { chat_id: own });
    expect([leave.ok, leave.code]).toEqual([false, 'ERR_FORBIDDEN']);
  });
});
