import { Limits } from '@parlor/protocol';
import { generateKeyPair, publicKeyToBase64 } from '@parlor/sdk';
import { eq, inArray } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STRANGER_ADDRESS_BAR_MS, STRANGER_GRACE_MS } from '../src/modules/auth/auth.service.js';
import { FakeClock } from '../src/platform/clock.js';
import { auditLog, chatMembers, moderationActions, notifications, sessions, users } from '../src/platform/db/schema.js';
import { describeApp, MODE, type Nodes, startApp, startNodes, type TestApp } from './support/app.js';
import { join, keyEpoch, keyedChat, member, receiveKey } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows, failInserts } from './support/faults.js';
import { login, operator } from './support/flows.js';
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

async function stranger(ip = nextIp()) {
  const client = new Client(app.url, ip, app.publicApiKey);
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

  it('deletes a stranger whose session expired without a logout, after the grace period, once the expiry sweep has ended its session', async () => {
    const s = await stranger();
    clock.advance(Limits.SESSION_TTL_USER_MS);
    expect(await sweep()).not.toContain(s.id);
    clock.advance(STRANGER_GRACE_MS);
    // Not ended yet: its keys and searches go the way a logout's do, by the expiry sweep, first.
    expect(await sweep()).not.toContain(s.id);
    await app.services.sessions.sweepExpired();
    expect(await sweep()).toContain(s.id);
    expect((await s.client.get('/v1/portal/chats')).status).toBe(401);
  });
});

describeApp('POST /v1/portal/stranger: the per-address allowance', () => {
  it(`gives back the point of a creation that fails: the address still makes ${Limits.STRANGERS_PER_IP} strangers, then 429`, async () => {
    const ip = nextIp();
    const client = new Client(app.url, ip, app.publicApiKey);
    const lift = await failInserts(app, 'sessions', `new.client_ip = '${ip}'`);
    try {
      const failed = await client.post('/v1/portal/stranger', {});
      expect(failed.status, JSON.stringify(failed.body)).toBe(500);
    } finally {
      await lift();
    }
    expect(await countRows(app, `select count(*) as n from sessions where client_ip = '${ip}'`)).toBe(0);
    for (let i = 0; i < Limits.STRANGERS_PER_IP; i++) {
      const made = await new Client(app.url, ip, app.publicApiKey).post('/v1/portal/stranger', {});
      expect(made.status, `stranger ${i + 1}: ${JSON.stringify(made.body)}`).toBe(200);
    }
    const over = await client.post('/v1/portal/stranger', {});
    expect([over.status, over.body.code]).toEqual([429, 'ERR_RATE_LIMITED']);
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

describeApp('a stranger a moderator blocked (POST /v1/portal/strangers/block)', () => {
  const create = (ip: string) => new Client(app.url, ip, app.publicApiKey).post('/v1/portal/stranger', {});

  it('bars the address that made it (an IPv6 client: its /64) from new strangers for 24 hours: a logout and a new stranger do not lift the block', async () => {
    const ip = '2001:db8:5a:1::1';
    const s = await stranger(ip);
    s.client.apiKey = null;
    await connectSocket(app.url, s.client);
    await member(app); // someone online
    const mod = await member(app, { level: 1 });
    expect((await mod.client.post('/v1/portal/strangers/block', { user_id: s.id })).body).toEqual({ ok: true });
    const enqueue = await s.client.post('/v1/portal/match', { interests: [tag()] });
    expect([enqueue.status, enqueue.body.code]).toEqual([403, 'ERR_STRANGER_BLOCKED']);
    expect((await s.client.post('/v1/authentication/logout', {})).status).toBe(200);

    // The same client, and any other address of its /64, makes no new stranger (nothing is spent).
    for (const from of [ip, '2001:db8:5a:1:ffff:eeee:dddd:cccc', ip]) {
      const res = await create(from);
      expect([res.status, res.body.code], from).toEqual([403, 'ERR_STRANGER_BLOCKED']);
    }
    // Another /64 does; a registered user signs in from the barred address and matches as ever.
    expect((await create('2001:db8:5a:2::1')).status).toBe(200);
    const registered = await login(app, { client: new Client(app.url, ip, app.publicApiKey) });
    await connectSocket(app.url, registered.client);
    const search = await registered.client.post('/v1/portal/match', { interests: [tag()] });
    expect(search.body.state, JSON.stringify(search.body)).toBe('searching');
    await registered.client.post('/v1/portal/match/dequeue', {});

    // The coordination store keeps time with the app's clock in embedded mode only (Redis keeps its own).
    if (MODE === 'embedded') {
      clock.advance(STRANGER_ADDRESS_BAR_MS - 1);
      expect((await create(ip)).body.code).toBe('ERR_STRANGER_BLOCKED');
      clock.advance(1);
      expect((await create(ip)).status).toBe(200);
    }
  });
});

describeApp('POST /v1/portal/strangers/block: the caller’s level as stored', () => {
  it('answers 403 ERR_FORBIDDEN to a Moderator demoted to User by a write the node’s session cache has not heard of: it blocks no stranger, and the stranger’s search goes on', async () => {
    const s = await stranger();
    await connectSocket(app.url, s.client);
    const mod = await member(app, { level: 1 });
    const search = await s.client.post('/v1/portal/match', { interests: [tag()] });
    expect(search.body.state, JSON.stringify(search.body)).toBe('searching');
    expect((await mod.client.get('/v1/users/me')).body.user.permission_level).toBe(1);
    // Written behind the stores' back (as another node's commit whose invalidation is on its way).
    await app.database.db.update(users).set({ permissionLevel: 0 }).where(eq(users.id, mod.user.id));
    expect((await mod.client.get('/v1/users/me')).body.user.permission_level).toBe(1);

    const res = await mod.client.post('/v1/portal/strangers/block', { user_id: s.id });
    expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    const [row] = await app.database.db.select({ at: users.matchBlockedAt }).from(users).where(eq(users.id, s.id));
    expect(row?.at).toBeNull();
    const audits = await app.database.db.select().from(auditLog).where(eq(auditLog.targetUserId, s.id));
    expect(audits).toEqual([]);
    expect((await s.client.get('/v1/portal/match/status')).body.state).toBe('searching');
    await s.client.post('/v1/portal/match/dequeue', {});
  });
});

describeApp('platform punishments of a stranger (docs/api.md, Strangers)', () => {
  /** A stranger (its own address) in an active direct chat with a connected registered peer. */
  async function strangerInDirect() {
    const ip = nextIp();
    const s = await stranger(ip);
    s.client.apiKey = null;
    const peer = await member(app);
    const direct = await app.services.chats.createDirect([s.id, peer.user.id], [tag()]);
    if ('refused' in direct) throw new Error(`direct chat refused: ${JSON.stringify(direct.refused)}`);
    const chatId = direct.chat.id;
    expect((await join(peer, { chat_id: chatId })).ok).toBe(true);
    expect((await peer.client.get('/v1/portal/match/status')).body.state).toBe('matched');
    return { ip, s, peer, chatId };
  }
  const rowsOf = async (userId: number) => ({
    records: await app.database.db.select().from(moderationActions).where(eq(moderationActions.userId, userId)),
    notes: await app.database.db.select().from(notifications).where(eq(notifications.userId, userId)),
  });
  const create = (ip: string) => new Client(app.url, ip, app.publicApiKey).post('/v1/portal/stranger', {});

  it('answers a warning 404 ERR_USER_NOT_FOUND, from the admin route and the chat route alike, and stores nothing', async () => {
    const { s, chatId } = await strangerInDirect();
    const byOperator = await operator(app).post('/v1/admin/punishments/warn', { user_id: s.id, reason: 'x' });
    expect([byOperator.status, byOperator.body.code]).toEqual([404, 'ERR_USER_NOT_FOUND']);
    const mod = await member(app, { level: 1 });
    const inChat = await mod.client.post(`/v1/portal/chats/${chatId}/warn`, { user_id: s.id, reason: 'x' });
    expect([inChat.status, inChat.body.code]).toEqual([404, 'ERR_USER_NOT_FOUND']);
    expect(await rowsOf(s.id)).toEqual({ records: [], notes: [] });
    const audit = (await operator(app).get(`/v1/admin/audit?target_user_id=${s.id}`)).body.entries;
    expect(audit).toEqual([]);
  });

  it("ends its direct chats on a ban as at its session's end (the peer told, its slot free) and bars its address for 24 hours, with no notification", async () => {
    const { ip, s, peer, chatId } = await strangerInDirect();
    const told = peer.socket.next('message:new', (m) => m.chat_id === chatId && m.system?.kind === 'leave');
    const res = await operator(app).post('/v1/admin/punishments/ban', { user_id: s.id, reason: 'abuse' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.punishment).toMatchObject({ action_type: 'PLATFORM_BAN' });
    // Done before the ban answers: the chat is archived and the peer's slot free.
    expect((await peer.client.get(`/v1/portal/chats/${chatId}`)).body.chat).toMatchObject({ archived: true });
    expect((await peer.client.get('/v1/portal/match/status')).body.state).toBe('idle');
    expect((await told).system).toEqual({ kind: 'leave', user_id: s.id });
    expect((await s.client.get('/v1/portal/chats')).status).toBe(401);
    const created = await create(ip);
    expect([created.status, created.body.code]).toEqual([403, 'ERR_STRANGER_BLOCKED']);
    // An unban lifts the record, and still notifies nothing.
    expect((await operator(app).post('/v1/admin/punishments/unban', { user_id: s.id })).status).toBe(200);
    const { records, notes } = await rowsOf(s.id);
    expect(records.map((r) => [r.actionType, r.isLifted])).toEqual([['PLATFORM_BAN', true]]);
    expect(notes).toEqual([]);
    if (MODE === 'embedded') {
      clock.advance(STRANGER_ADDRESS_BAR_MS);
      expect((await create(ip)).status).toBe(200);
    }
  });

  it('times it out as a user (403 ERR_TIMED_OUT, its search ended) with no notification; its session and direct chat stay', async () => {
    const { s, peer, chatId } = await strangerInDirect();
    const res = await operator(app).post('/v1/admin/punishments/timeout', { user_id: s.id, duration: 600 });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const refused = await s.client.get('/v1/portal/chats');
    expect([refused.status, refused.body.code]).toEqual([403, 'ERR_TIMED_OUT']);
    expect((await peer.client.get(`/v1/portal/chats/${chatId}`)).body.chat).toMatchObject({ archived: false });
    const { records, notes } = await rowsOf(s.id);
    expect(records.map((r) => r.actionType)).toEqual(['PLATFORM_TIMEOUT']);
    expect(notes).toEqual([]);
    // Its logout (served during a timeout) ends its direct chats as any stranger's session end does.
    expect((await s.client.post('/v1/authentication/logout', {})).status).toBe(200);
    expect((await peer.client.get(`/v1/portal/chats/${chatId}`)).body.chat).toMatchObject({ archived: true });
  });
});

describeApp('a direct chat its stranger ends keeps its epoch (docs/api.md Strangers, Keys)', () => {
  /** A stranger session with a registered key, in a direct chat with a registered peer who keyed its first epoch. */
  async function keyedDirect() {
    const s = await stranger();
    s.client.apiKey = null;
    const reg = await s.client.post('/v1/portal/keys', { public_key: publicKeyToBase64(generateKeyPair().publicKey) });
    expect(reg.status, JSON.stringify(reg.body)).toBe(200);
    const peer = await member(app);
    const made = await app.services.chats.createDirect([s.id, peer.user.id], [tag()]);
    if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
    const chatId = made.chat.id;
    expect((await join(peer, { chat_id: chatId })).ok).toBe(true);
    const keyed = await keyEpoch(peer, chatId);
    return { s, peer, chatId, keyed };
  }

  /**
   * Once the end has answered: the chat archived at the epoch the peer keyed, the peer still
   * served its envelope there (it reads the history with it), told of the leave, and never told
   * to rekey the chat (room:rekey would go out ahead of the leave's system message).
   */
  async function archivedAtItsEpoch({ s, peer, chatId, keyed }: Awaited<ReturnType<typeof keyedDirect>>) {
    const told = await peer.socket.next('message:new', (m) => m.chat_id === chatId && m.system?.kind === 'leave');
    expect(told.system).toEqual({ kind: 'leave', user_id: s.id });
    expect((await peer.client.get(`/v1/portal/chats/${chatId}`)).body.chat).toMatchObject({
      archived: true,
      epoch: keyed.epoch,
    });
    expect(await receiveKey(peer, chatId)).toEqual(keyed);
    const rekeys = peer.socket.received.filter((r) => r.event === 'room:rekey' && r.payload.chat_id === chatId);
    expect(rekeys).toEqual([]);
  }

  it('POST /v1/portal/match/leave archives it at its epoch', async () => {
    const direct = await keyedDirect();
    expect((await direct.s.client.post('/v1/portal/match/leave', {})).body).toEqual({
      ok: true,
      chat_id: direct.chatId,
    });
    await archivedAtItsEpoch(direct);
  });

  it('its logout ends it as a leave does: archived at its epoch, no rekey', async () => {
    const direct = await keyedDirect();
    expect((await direct.s.client.post('/v1/authentication/logout', {})).status).toBe(200);
    await archivedAtItsEpoch(direct);
  });

  it('a platform ban of it ends it as a leave does: archived at its epoch, no rekey', async () => {
    const direct = await keyedDirect();
    const res = await operator(app).post('/v1/admin/punishments/ban', { user_id: direct.s.id, reason: 'abuse' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await archivedAtItsEpoch(direct);
  });

  it('the expiry sweep ending its session ends it as a leave does: archived at its epoch, no rekey', async () => {
    const direct = await keyedDirect();
    // A stranger's session outlives its direct chats (30 days against 24 hours), so the chat would
    // expire first: the session's expiry is brought forward instead.
    await app.database.db.update(sessions).set({ expiresAt: clock.now() }).where(eq(sessions.userId, direct.s.id));
    expect(await app.services.sessions.sweepExpired()).toBeGreaterThanOrEqual(1);
    await archivedAtItsEpoch(direct);
  });
});

describeApp('a stranger block and the end of a stranger, across the nodes of a cluster', () => {
  let nodes: Nodes;
  beforeAll(async () => {
    nodes = await startNodes();
  });
  afterAll(async () => {
    await nodes?.close();
  });

  it('bars an IPv4 address by itself, on every node', async () => {
    const { a, b } = nodes;
    const ip = nextIp();
    const made = await new Client(a.url, ip, a.publicApiKey).post('/v1/portal/stranger', {});
    expect(made.status).toBe(200);
    const mod = await member(a, { level: 1 });
    expect((await mod.client.post('/v1/portal/strangers/block', { user_id: made.body.user.id })).status).toBe(200);
    const res = await new Client(b.url, ip, b.publicApiKey).post('/v1/portal/stranger', {});
    expect([res.status, res.body.code]).toEqual([403, 'ERR_STRANGER_BLOCKED']);
    expect((await new Client(b.url, nextIp(), b.publicApiKey).post('/v1/portal/stranger', {})).status).toBe(200);
  });

  it("ends a stranger's direct chats when it logs out on another node than its peer's: the peer is told there", async () => {
    const { a, b } = nodes;
    const peer = await member(a);
    const client = new Client(b.url, nextIp(), b.publicApiKey);
    const made = await client.post('/v1/portal/stranger', {});
    client.apiKey = null;
    const sid: number = made.body.user.id;
    const direct = await a.services.chats.createDirect([sid, peer.user.id], ['nodes']);
    if ('refused' in direct) throw new Error(`direct chat refused: ${JSON.stringify(direct.refused)}`);
    const chatId = direct.chat.id;
    expect((await join(peer, { chat_id: chatId })).ok).toBe(true);
    const told = peer.socket.next('message:new', (m) => m.chat_id === chatId && m.system?.kind === 'leave');
    expect((await client.post('/v1/authentication/logout', {})).status).toBe(200);
    expect((await told).system).toEqual({ kind: 'leave', user_id: sid });
    expect((await peer.client.get('/v1/portal/match/status')).body.state).toBe('idle');
  });
});

describeApp('every HTTP route to a stranger session (docs/api.md, Strangers)', () => {
  /** What a stranger may use, keyed by "METHOD path-template": matchmaking, its keys and direct chats, its blocks. */
  const allowed = new Set([
    'POST /v1/portal/match',
    'GET /v1/portal/match/status',
    'POST /v1/portal/match/dequeue',
    'POST /v1/portal/match/leave',
    'POST /v1/portal/keys',
    'GET /v1/portal/chats',
    'GET /v1/portal/chats/{chat_id}',
    'GET /v1/portal/chats/{chat_id}/messages',
    'POST /v1/portal/chats/{chat_id}/messages',
    'POST /v1/portal/chats/{chat_id}/messages/delete',
    'POST /v1/portal/chats/{chat_id}/messages/delete-mine',
    'GET /v1/portal/chats/{chat_id}/keys',
    'POST /v1/portal/chats/{chat_id}/keys/share',
    'GET /v1/users/me/blocks',
    'POST /v1/users/me/blocks/create',
    'POST /v1/users/me/blocks/delete',
    'GET /v1/health',
  ]);
  /** A refusal of the caller's credentials, before the route does anything. */
  const refused = (res: { status: number; body: any }) =>
    res.status === 401 ||
    res.status === 405 ||
    (res.status === 403 &&
      ['ERR_STRANGER_NOT_ALLOWED', 'ERR_FORBIDDEN', 'ERR_INVALID_API_KEY'].includes(res.body?.code));

  it('refuses it every route of the OpenAPI document but those, in its own direct chat as in a public one', async () => {
    const spec = (await new Client(app.url).get('/openapi.json')).body as {
      paths: Record<string, Record<string, unknown>>;
    };
    const peer = await member(app);
    const s = await stranger();
    s.client.apiKey = null;
    const own = await directChat([s.id, peer.user.id]);
    const pub = await keyedChat(app);
    // The session is live (the refusals below are not of a missing cookie).
    expect((await s.client.get(`/v1/portal/chats/${own}`)).status).toBe(200);
    const passed: string[] = [];
    for (const [path, methods] of Object.entries(spec.paths)) {
      for (const method of Object.keys(methods).map((m) => m.toUpperCase())) {
        const key = `${method} ${path}`;
        if (allowed.has(key) || method === 'HEAD' || method === 'OPTIONS') continue;
        if (key === 'POST /v1/authentication/logout' || key === 'POST /v1/portal/stranger') continue;
        for (const chat of [own, pub.chatId]) {
          const url = path
            .replace('{chat_id}', String(chat))
            .replace('{room_id}', String(chat))
            .replace('{user_id}', String(peer.user.id))
            .replace('{id}', String(peer.user.id))
            .replace('{guild_id}', '123456789012345678')
            .replace('{bot_id}', '1')
            .replace('{token_suffix}', 'abcdef')
            .replace('{notification_id}', '1')
            .replace('{code}', 'abcdefgh')
            .replace('{key}', 'platform_a_0');
          const res = await s.client.request(method, url, method === 'GET' ? {} : { body: {} });
          if (!refused(res))
            passed.push(`${key} (${chat === own ? 'own' : 'public'} chat) -> ${res.status} ${res.body?.code ?? ''}`);
        }
      }
    }
    expect(passed).toEqual([]);
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
