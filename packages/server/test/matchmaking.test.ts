import { randomBytes } from 'node:crypto';
import { Limits } from '@parlor/protocol';
import { decryptMessage } from '@parlor/sdk';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MATCH_SWEEP_BATCH } from '../src/modules/matchmaking/matchmaking.service.js';
import { makeMatchmakingStore } from '../src/modules/matchmaking/matchmaking.store.js';
import { FakeClock } from '../src/platform/clock.js';
import { schema } from '../src/platform/db/index.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyEpoch, type Member, member, receiveKey } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows, failInserts } from './support/faults.js';
import { login } from './support/flows.js';
import { closeAllSockets, connectSocket, disconnected } from './support/sockets.js';

let app: TestApp;
const clock = new FakeClock(Date.now());
let tagCounter = 0;
/** A tag no other test uses, so tests do not pair across each other. */
const tag = () => `tag${Date.now() % 1000}x${++tagCounter}`;

beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

const match = (m: { client: Client }, interests: unknown) => m.client.post('/v1/portal/match', { interests });

/** The match events a member's sockets got so far. */
const matchEvents = (m: Member) => m.socket.received.filter((r) => r.event.startsWith('match:'));
/** An ack on the socket arrives after anything the server sent it before. */
const flush = (m: Member) => m.socket.emitWithAck('vm:credentials', { chat_id: 0 } as never);
/** Chats that both users are members of. */
const chatsOfPair = (a: Member, b: Member) =>
  countRows(
    app,
    `select count(*) as n from chat_members m join chat_members n on n.chat_id = m.chat_id
     where m.user_id = ${a.user.id} and n.user_id = ${b.user.id}`,
  );

/**
 * Enqueues a member who pairs with a waiting peer: the answer is still the search (spec 4.5), and
 * the caller's match:found follows; resolves with that event.
 */
async function matchAndFind(m: Member, interests: string[]): Promise<any> {
  const earlier = new Set(m.socket.received.map((r) => r.payload));
  const res = await match(m, interests);
  expect(res.body).toEqual({
    state: 'searching',
    interests,
    expires_at: new Date(clock.now().getTime() + Limits.MATCH_QUEUE_WAIT_MS).toISOString(),
  });
  return m.socket.next('match:found', (f) => !earlier.has(f));
}

/** Two online members searching the same fresh tag: the second enqueue pairs them. */
async function pair(): Promise<{ a: Member; b: Member; t: string; chatId: number; token: string }> {
  const t = tag();
  const [a, b] = [await member(app), await member(app)];
  const first = await match(a, [t]);
  expect(first.body).toEqual({ state: 'searching', interests: [t], expires_at: expect.any(String) });
  const found = await matchAndFind(b, ['other1', t]);
  return { a, b, t, chatId: found.chat_id, token: found.token };
}

describeApp('POST /v1/portal/match', () => {
  it('pairs two users on a shared tag: direct chat, opening message, match:found to both with the peer', async () => {
    const { a, b, t, chatId, token } = await pair();
    const foundA = await a.socket.next('match:found');
    const foundB = await b.socket.next('match:found');
    const bGeo = (await b.client.get('/v1/users/me/sessions')).body.sessions[0].geo.country_code || null;
    expect(foundA).toEqual({
      chat_id: chatId,
      token,
      interests: [t],
      expires_at: expect.any(String),
      peer: { id: b.user.id, username: b.user.username, stranger: false, country_code: bGeo },
    });
    expect(foundB.peer.id).toBe(a.user.id);
    expect(Date.parse(foundA.expires_at) - clock.now().getTime()).toBe(Limits.DIRECT_CHAT_TTL_MS);
    const opening = await a.socket.next('message:new', (m) => m.chat_id === chatId);
    expect(opening).toMatchObject({
      type: 'system',
      system: { kind: 'match', tags: [t], user_ids: [a.user.id, b.user.id] },
    });
    const status = await a.client.get('/v1/portal/match/status');
    expect(status.body).toEqual({ state: 'matched', token, chat_id: chatId, expires_at: foundA.expires_at });
    const chats = await b.client.get('/v1/portal/chats');
    expect(chats.body.chats.find((c: any) => c.id === chatId)).toMatchObject({
      type: 'direct',
      archived: false,
      member_count: 2,
    });
  });

  it('names the pair as stored when it pairs (a rename while searching counts), shares every common tag, answers the new chat', async () => {
    const [t1, t2] = [tag(), tag()];
    const [a, b] = [await member(app), await member(app)];
    expect((await match(a, [t2, t1])).body.state).toBe('searching');
    const renamed = `ren${a.user.id}x${tagCounter}`.slice(0, 32);
    expect((await a.client.post('/v1/users/me/update', { username: renamed })).status).toBe(200);
    // A rename drops the user's sockets (they carry the name their handshake read): A comes back.
    await disconnected(a.socket);
    const aSocket = await connectSocket(app.url, a.client);
    const foundB = await matchAndFind(b, [t1, 'other2', t2]);
    const foundA = await aSocket.next('match:found');
    expect(foundB.peer).toMatchObject({ id: a.user.id, username: renamed, stranger: false });
    expect(foundA.peer).toMatchObject({ id: b.user.id, username: b.user.username });
    expect(foundA.interests).toEqual([t1, t2]);
    expect((await b.client.get('/v1/portal/match/status')).body).toEqual({
      state: 'matched',
      token: foundB.token,
      chat_id: foundB.chat_id,
      expires_at: foundB.expires_at,
    });
    const { chat } = (await a.client.get(`/v1/portal/chats/${foundA.chat_id}`)).body;
    expect(chat).toMatchObject({ type: 'direct', name: `${renamed} & ${b.user.username}`, member_count: 2 });
    expect(chat.expires_at).toBe(foundA.expires_at);
  });

  it('never pairs a searcher with a waiting user who blocked it (exclusion both ways)', async () => {
    const t = tag();
    const [waiting, blocked, other] = [await member(app), await member(app), await member(app)];
    await waiting.client.post('/v1/users/me/blocks/create', { user_id: blocked.user.id });
    expect((await match(waiting, [t])).body.state).toBe('searching');
    // The blocked user's own exclusions come from the waiting user's block.
    expect((await match(blocked, [t])).body.state).toBe('searching');
    expect((await matchAndFind(other, [t])).peer.id).toBe(waiting.user.id);
  });

  it('refuses bad interests with 400 ERR_MATCH_UNSUPPORTED_INTEREST, at the boundaries', async () => {
    const m = await member(app);
    for (const interests of [
      [],
      ['ab'],
      ['a'.repeat(13)],
      ['Music'],
      ['has space'],
      ['ok1', 'ok2', 'ok3', 'ok4'],
      Array.from({ length: 17 }, (_, i) => `tag${i}`),
      ['dup', 'dup'],
      ['a'.repeat(65)],
      [42],
      [null],
      [['abc']],
    ]) {
      const res = await match(m, interests);
      expect(res.status, JSON.stringify(interests)).toBe(400);
      expect(res.body.code).toBe('ERR_MATCH_UNSUPPORTED_INTEREST');
    }
    // The longest tag (12 characters, unique to this run) and two of the shortest (3) are accepted
    // (with someone else online, so this test does not lean on the sockets of earlier ones).
    await member(app);
    const longest = tag().padEnd(12, 'z');
    expect(longest).toMatch(/^[a-z0-9]{12}$/);
    const ok = await match(m, [longest, 'abc', 'x12']);
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body.interests).toEqual([longest, 'abc', 'x12']);
    expect((await match(m, 'music')).body.code).toBe('ERR_VALIDATION');
  });

  it('answers 409 ERR_MATCH_ALREADY_SEARCHING, also from another session of the same user', async () => {
    const t = tag();
    const a = await member(app);
    expect((await match(a, [t])).status).toBe(200);
    const again = await match(a, [tag()]);
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('ERR_MATCH_ALREADY_SEARCHING');
    const otherSession = await member(app, { platformUserId: a.platformUserId });
    expect((await match(otherSession, [t])).body.code).toBe('ERR_MATCH_ALREADY_SEARCHING');
    expect((await a.client.post('/v1/portal/match/dequeue', {})).body).toEqual({ state: 'idle' });
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
  });

  it(`answers 409 ERR_MATCH_SLOT_LIMIT at ${Limits.DIRECT_SLOTS_FREE} active direct chat for a free account`, async () => {
    const { a } = await pair();
    const res = await match(a, [tag()]);
    expect(res.status).toBe(409);
    expect(res.body.code).toBe('ERR_MATCH_SLOT_LIMIT');
    expect((await a.client.post('/v1/portal/match/leave', {})).status).toBe(200);
    // A search must begin after the pairing that filled the slots (the queue's mark, by the clock).
    clock.advance(1);
    expect((await match(a, [tag()])).status).toBe(200);
  });

  it(`lets a premium account hold ${Limits.DIRECT_SLOTS_PREMIUM} direct chats`, async () => {
    const p = await member(app);
    await app.database.db.execute(
      `update users set subscription_tier = 2, subscription_expires_at = now() + interval '30 days' where id = ${p.user.id}` as never,
    );
    for (let i = 0; i < Limits.DIRECT_SLOTS_PREMIUM; i++) {
      const t = tag();
      const peer = await member(app);
      await match(peer, [t]);
      expect((await matchAndFind(p, [t])).peer.id).toBe(peer.user.id);
    }
    expect((await match(p, [tag()])).body.code).toBe('ERR_MATCH_SLOT_LIMIT');
  });

  it('tells a searching user ERR_MATCH_ALREADY_SEARCHING before ERR_MATCH_SLOT_LIMIT (premium lapsed while it searched)', async () => {
    const p = await member(app);
    const setTier = (tier: number) =>
      app.database.db.execute(
        `update users set subscription_tier = ${tier}, subscription_expires_at = now() + interval '30 days' where id = ${p.user.id}` as never,
      );
    await setTier(2);
    const t = tag();
    const peer = await member(app);
    await match(peer, [t]);
    expect((await matchAndFind(p, [t])).peer.id).toBe(peer.user.id);
    expect((await match(p, [tag()])).body.state).toBe('searching');
    await setTier(0);
    const again = await match(p, [tag()]);
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('ERR_MATCH_ALREADY_SEARCHING');
    await p.client.post('/v1/portal/match/dequeue', {});
    expect((await match(p, [tag()])).body.code).toBe('ERR_MATCH_SLOT_LIMIT');
  });

  it('never pairs two users when only one blocked the other, whichever of them waits first', async () => {
    for (const blockerWaits of [true, false]) {
      const t = tag();
      const [a, b, c] = [await member(app), await member(app), await member(app)];
      expect((await a.client.post('/v1/users/me/blocks/create', { user_id: b.user.id })).body).toEqual({ ok: true });
      // Only A's search holds the block (a search carries its own user's blocks): the placing
      // reads it whether A is the one waiting or the one arriving.
      const [first, second] = blockerWaits ? [a, b] : [b, a];
      expect((await match(first, [t])).body.state).toBe('searching');
      // Later in line (Redis orders equal enqueue times by user id).
      clock.advance(1);
      expect((await match(second, [t])).body.state).toBe('searching');
      expect((await first.client.get('/v1/portal/match/status')).body.state).toBe('searching');
      expect((await second.client.get('/v1/portal/match/status')).body.state).toBe('searching');
      expect((await matchAndFind(c, [t])).peer.id).toBe(first.user.id);
      expect(await chatsOfPair(a, b)).toBe(0);
      await second.client.post('/v1/portal/match/dequeue', {});
    }
  });

  it('never pairs a waiting user with one it blocked after it queued: the chat statement refuses them, both wait, neither is told', async () => {
    const t = tag();
    const [a, b, c] = [await member(app), await member(app), await member(app)];
    const searching = (await match(a, [t])).body;
    expect((await a.client.post('/v1/users/me/blocks/create', { user_id: b.user.id })).body).toEqual({ ok: true });
    // Neither search holds the block: A's was read before it, B's holds only B's own blocks.
    expect((await match(b, [t])).body.state).toBe('searching');
    expect((await b.client.get('/v1/portal/match/status')).body.state).toBe('searching');
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual(searching);
    expect(await chatsOfPair(a, b)).toBe(0);
    for (const m of [a, b]) await flush(m);
    expect(matchEvents(a)).toEqual([]);
    expect(matchEvents(b)).toEqual([]);
    // A went back to its place, now excluding B: the next searcher takes A, and B waits on.
    expect((await matchAndFind(c, [t])).peer.id).toBe(a.user.id);
    expect((await b.client.get('/v1/portal/match/status')).body.state).toBe('searching');
    await b.client.post('/v1/portal/match/dequeue', {});
  });

  it(`a search carries only its own user's blocks (at most ${Limits.BLOCKS_PER_USER}), however many users blocked that user`, async () => {
    const [a, mine] = [await member(app), await member(app)];
    expect((await a.client.post('/v1/users/me/blocks/create', { user_id: mine.user.id })).body).toEqual({ ok: true });
    // Anyone may block a user, a stranger too, so more users may block one user than it may block.
    const stranger = new Client(app.url, nextIp(), app.publicApiKey);
    expect((await stranger.post('/v1/portal/stranger', {})).status).toBe(200);
    expect((await stranger.post('/v1/users/me/blocks/create', { user_id: a.user.id })).body).toEqual({ ok: true });
    // The rest seeded in SQL, each an account of its own (a POST each would meet the write limit).
    await app.database.db.execute(
      `with seeded as (
         insert into users (username, is_stranger, last_activity_at, created_at, updated_at)
         select 'blockedby_' || ${a.user.id} || '_' || g, true, now(), now(), now()
         from generate_series(1, ${Limits.BLOCKS_PER_USER}) g
         returning id
       )
       insert into user_blocks (blocker_id, blocked_id, created_at) select id, ${a.user.id}, now() from seeded` as never,
    );
    // What the enqueue's pre-check reads into the user's queue entry (its exclusions).
    const [facts] = await makeMatchmakingStore(app.database.db).searcherFacts(
      [{ userId: a.user.id, sessionId: 0 }],
      clock.now(),
    );
    expect(facts?.exclude).toEqual([mine.user.id]);
    expect((await match(a, [tag()])).body.state).toBe('searching');
    await a.client.post('/v1/portal/match/dequeue', {});
  });

  it('an unblock takes effect from the next search: a waiting search keeps the blocks read when it began', async () => {
    const t = tag();
    const [a, c] = [await member(app), await member(app)];
    expect((await a.client.post('/v1/users/me/blocks/create', { user_id: c.user.id })).body).toEqual({ ok: true });
    expect((await match(a, [t])).body.state).toBe('searching');
    expect((await a.client.post('/v1/users/me/blocks/delete', { user_id: c.user.id })).body).toEqual({ ok: true });
    // Again: no block left to delete, nothing changes.
    expect((await a.client.post('/v1/users/me/blocks/delete', { user_id: c.user.id })).body).toEqual({ ok: false });
    // A's search still excludes C: C waits beside it.
    expect((await match(c, [t])).body.state).toBe('searching');
    expect((await c.client.get('/v1/portal/match/status')).body.state).toBe('searching');
    // A's next search reads the blocks again and pairs with C.
    await a.client.post('/v1/portal/match/dequeue', {});
    const found = await matchAndFind(a, [t]);
    expect(found.peer.id).toBe(c.user.id);
  });

  it('answers 400 ERR_VALIDATION naming body/user_id to a block of oneself, and stores nothing', async () => {
    const a = await member(app);
    const res = await a.client.post('/v1/users/me/blocks/create', { user_id: a.user.id });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      code: 'ERR_VALIDATION',
      errors: [{ path: 'body/user_id', message: expect.any(String) }],
    });
    expect((await a.client.get('/v1/users/me/blocks')).body.blocks).toEqual([]);
  });

  it('never pairs with a waiting user who may no longer use the platform (banned, timed out, a stranger whose session is over), counting the state that applies now', async () => {
    const at = (ms: number) => `'${new Date(clock.now().getTime() + ms).toISOString()}'`;
    // Written straight to the row, as a punishment that commits while the user's enqueue is still
    // in flight leaves it: queued after the punishment took its searches out.
    const cases: [string, (id: number) => string, boolean][] = [
      ['banned', (id) => `update users set state = 2 where id = ${id}`, false],
      ['timed out', (id) => `update users set state = 1, state_expires_at = ${at(3600_000)} where id = ${id}`, false],
      [
        'a timeout that ran out',
        (id) => `update users set state = 1, state_expires_at = ${at(-1000)} where id = ${id}`,
        true,
      ],
      [
        'a temporary ban that ran out, with a timeout still running after it',
        (id) =>
          `update users set state = 2, state_expires_at = ${at(-1000)}, then_state = 1, then_state_expires_at = ${at(3600_000)} where id = ${id}`,
        false,
      ],
      [
        'a stranger whose session is over',
        (id) => `update sessions set ended_at = ${at(0)} where user_id = ${id}`,
        false,
      ],
    ];
    for (const [what, write, pairs] of cases) {
      const t = tag();
      const waiting =
        what === 'a stranger whose session is over'
          ? await (async () => {
              const client = new Client(app.url, nextIp(), app.publicApiKey);
              const user = (await client.post('/v1/portal/stranger', {})).body.user;
              await connectSocket(app.url, client);
              return { client, user };
            })()
          : await member(app);
      const next = await member(app);
      expect((await match(waiting, [t])).body.state, what).toBe('searching');
      await app.database.db.execute(write(waiting.user.id) as never);
      expect((await match(next, [t])).body.state, what).toBe('searching');
      const now = (await next.client.get('/v1/portal/match/status')).body;
      if (pairs) {
        expect(now.state, what).toBe('matched');
      } else {
        // The pairing was refused: the caller searches on (queued), the waiting user is out.
        expect(now.state, what).toBe('searching');
        expect((await app.services.matchmaking.status(waiting.user.id)).state, what).toBe('idle');
        await next.client.post('/v1/portal/match/dequeue', {});
      }
    }
  });

  // An app of its own starts inside the test: that may take tens of seconds on a loaded machine.
  it('answers 409 ERR_MATCH_NO_PEERS_ONLINE when nobody else has a socket', async () => {
    const lone = await startApp({ clock });
    try {
      const who = await login(lone);
      const res = await who.client.post('/v1/portal/match', { interests: ['alone'] });
      expect(res.status).toBe(409);
      expect(res.body.code).toBe('ERR_MATCH_NO_PEERS_ONLINE');
      // Online alone (the only one with a socket): still nobody to meet.
      await connectSocket(lone.url, who.client);
      expect((await who.client.post('/v1/portal/match', { interests: ['alone'] })).body.code).toBe(
        'ERR_MATCH_NO_PEERS_ONLINE',
      );
      const other = await login(lone);
      await connectSocket(lone.url, other.client);
      expect((await who.client.post('/v1/portal/match', { interests: ['alone'] })).status).toBe(200);
    } finally {
      closeAllSockets();
      await lone.close();
    }
  }, 90_000);
});

describeApp('queue deadline, leave and the direct chat lifecycle', () => {
  it('drops a lone user at the deadline and tells it (match:timeout)', async () => {
    const t = tag();
    const a = await member(app);
    expect((await match(a, [t])).body.state).toBe('searching');
    // Entries other tests left behind may expire at any time; this user's is what counts.
    clock.advance(Limits.MATCH_QUEUE_WAIT_MS - 1);
    await app.services.matchmaking.sweepQueue();
    expect((await a.client.get('/v1/portal/match/status')).body.state).toBe('searching');
    clock.advance(1);
    expect(await app.services.matchmaking.sweepQueue()).toBeGreaterThanOrEqual(1);
    expect(await a.socket.next('match:timeout')).toEqual({ interests: [t] });
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
  });

  it('tells a user whose deadline passed when an enqueue meets its entry before the deadline sweep does (match:timeout)', async () => {
    const t = tag();
    const [a, b] = [await member(app), await member(app)];
    expect((await match(a, [t])).body.state).toBe('searching');
    clock.advance(Limits.MATCH_QUEUE_WAIT_MS);
    // Still online (the refresh every 30 s keeps connected users so).
    await app.services.matchmaking.markOnline([a.user.id, b.user.id]);
    expect((await match(b, [t])).body.state).toBe('searching');
    expect(await a.socket.next('match:timeout', (e) => e.interests[0] === t)).toEqual({ interests: [t] });
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    await b.client.post('/v1/portal/match/dequeue', {});
  });

  it('tells nothing to a user who dequeues its expired search before the sweep: the dequeue answers idle', async () => {
    const t = tag();
    const a = await member(app);
    expect((await match(a, [t])).body.state).toBe('searching');
    clock.advance(Limits.MATCH_QUEUE_WAIT_MS);
    expect((await a.client.post('/v1/portal/match/dequeue', {})).body).toEqual({ state: 'idle' });
    // The dequeue took the entry out: the sweep does not meet it.
    await app.services.matchmaking.sweepQueue();
    await flush(a);
    expect(matchEvents(a)).toEqual([]);
  });

  it('one deadline-sweep run drains a backlog of more than one batch (after an outage): statistics stop counting it', async () => {
    const own = new FakeClock(Date.now());
    const other = await startApp({ clock: own });
    try {
      const now = own.now();
      const n = 2 * MATCH_SWEEP_BATCH + 100;
      const stamp = randomBytes(2).toString('hex');
      // Written straight to the database: nothing but the queue needs them.
      const ids = (
        await other.database.db
          .insert(schema.users)
          .values(
            Array.from({ length: n }, (_, i) => ({
              username: `sweep_${stamp}_${i}`,
              lastActivityAt: now,
              createdAt: now,
              updatedAt: now,
            })),
          )
          .returning({ id: schema.users.id })
      ).map((r) => r.id);
      await other.services.matchmaking.markOnline(ids);
      // Each on a tag of its own, so nobody pairs.
      for (let i = 0; i < n; i += 100) {
        const answers = await Promise.all(
          ids
            .slice(i, i + 100)
            .map((id, k) =>
              other.services.matchmaking.enqueue({ userId: id, sessionId: 0, stranger: false, matchBlocked: false }, [
                `${stamp}x${i + k}`,
              ]),
            ),
        );
        for (const a of answers) expect(a.answer.state).toBe('searching');
      }
      // The app's own task runs the sweep every 5 s: stopped, so this run is the only one.
      await other.tasks.stopAll();
      own.advance(Limits.MATCH_QUEUE_WAIT_MS);
      expect(await other.services.matchmaking.sweepQueue()).toBe(n);
      expect((await other.services.matchmaking.statistics()).top_tags).toEqual([]);
    } finally {
      await other.close();
    }
  }, 120_000);

  it('leave archives the chat read-only with a system message; 404 ERR_NO_DIRECT_CHAT without one', async () => {
    const { a, b, chatId } = await pair();
    const left = await a.client.post('/v1/portal/match/leave', {});
    expect(left.body).toEqual({ ok: true, chat_id: chatId });
    const system = await b.socket.next('message:new', (m) => m.chat_id === chatId && m.system?.kind === 'leave');
    expect(system.system).toEqual({ kind: 'leave', user_id: a.user.id });
    const listed = (await b.client.get('/v1/portal/chats')).body.chats.find((c: any) => c.id === chatId);
    expect(listed.archived).toBe(true);
    const none = await a.client.post('/v1/portal/match/leave', {});
    expect(none.status).toBe(404);
    expect(none.body.code).toBe('ERR_NO_DIRECT_CHAT');
    // Read-only: history is readable, sending is refused.
    expect((await b.client.get(`/v1/portal/chats/${chatId}/messages`)).status).toBe(200);
    const send = await b.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: `{"v":2,"epoch":1,"ct":"${Buffer.alloc(40).toString('base64')}"}`,
    });
    expect(send.body.code).toBe('ERR_CHAT_READ_ONLY');
  });

  it('answers matched until 1 ms before the direct chat expires and idle at its expiry, before the sweep: a new search is allowed then', async () => {
    const { a, b, chatId, token } = await pair();
    const expiresAt = new Date(clock.now().getTime() + Limits.DIRECT_CHAT_TTL_MS).toISOString();
    clock.advance(Limits.DIRECT_CHAT_TTL_MS - 1);
    await app.services.matchmaking.markOnline([a.user.id, b.user.id]);
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual({
      state: 'matched',
      token,
      chat_id: chatId,
      expires_at: expiresAt,
    });
    expect((await match(a, [tag()])).body.code).toBe('ERR_MATCH_SLOT_LIMIT');
    clock.advance(1);
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    const t = tag();
    expect((await match(a, [t])).body).toEqual({
      state: 'searching',
      interests: [t],
      expires_at: new Date(clock.now().getTime() + Limits.MATCH_QUEUE_WAIT_MS).toISOString(),
    });
    expect((await a.client.post('/v1/portal/match/dequeue', {})).body).toEqual({ state: 'idle' });
  });

  it('archives a direct chat 24 h after the match and removes it 24 h later', async () => {
    const { a, chatId } = await pair();
    clock.advance(Limits.DIRECT_CHAT_TTL_MS - 1);
    await app.services.chats.sweepDirect();
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(false);
    clock.advance(1);
    await app.services.chats.sweepDirect();
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(true);
    clock.advance(Limits.DIRECT_ARCHIVE_TTL_MS - 1);
    await app.services.chats.sweepDirect();
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(true);
    expect((await a.client.get('/v1/portal/chats')).body.chats.map((c: any) => c.id)).toContain(chatId);
    clock.advance(1);
    await app.services.chats.sweepDirect();
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).status).toBe(404);
    expect((await a.client.get('/v1/portal/chats')).body.chats.map((c: any) => c.id)).not.toContain(chatId);
  });
});

describeApp('strangers', () => {
  const stranger = async () => {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const res = await client.post('/v1/portal/stranger', {});
    expect(res.status).toBe(200);
    expect(res.body.user).toEqual({
      id: expect.any(Number),
      username: expect.stringMatching(/^stranger_/),
      stranger: true,
    });
    return { client, user: res.body.user };
  };

  it('lets one address create STRANGERS_PER_IP anonymous accounts per window and answers 429 to the next', async () => {
    const ip = nextIp();
    const create = () => new Client(app.url, ip, app.publicApiKey).post('/v1/portal/stranger', {});
    for (let i = 0; i < Limits.STRANGERS_PER_IP; i++) expect((await create()).status).toBe(200);
    const refused = await create();
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ code: 'ERR_RATE_LIMITED', retry_after: expect.any(Number) });
    expect(refused.body.retry_after).toBeGreaterThan(0);
    expect(refused.body.retry_after).toBeLessThanOrEqual(Limits.STRANGER_WINDOW_MS / 1000);
    expect((await stranger()).user.stranger).toBe(true); // another address still may
  });

  it('may match, register a key and chat end to end in its direct chat, and nothing else', async () => {
    const s = await stranger();
    const socket = await connectSocket(app.url, s.client);
    const t = tag();
    const peer = await member(app);
    const queued = await match(s, [t]);
    expect(queued.body, JSON.stringify(queued.body)).toMatchObject({ state: 'searching' });
    expect((await matchAndFind(peer, [t])).peer).toMatchObject({ id: s.user.id, stranger: true });
    const found = await socket.next('match:found');
    expect(found.peer.id).toBe(peer.user.id);
    for (const path of ['/v1/users/me', '/v1/portal/match/statistics', '/v1/notifications']) {
      expect((await s.client.get(path)).status, path).toBe(401);
    }
    expect((await s.client.post('/v1/portal/chats/create', { name: 'x', type: 'public' })).status).toBe(401);
    // End to end in the direct chat: the stranger keys the epoch, the peer receives the key.
    const { generateKeyPair, publicKeyToBase64 } = await import('@parlor/sdk');
    const keys = generateKeyPair();
    expect(
      (await s.client.post('/v1/portal/keys', { public_key: publicKeyToBase64(keys.publicKey) })).body.status,
    ).toBe('registered');
    const { sessionIdOf } = await import('./support/chat-flows.js');
    const strangerMember: Member = {
      client: s.client,
      user: s.user,
      platformUserId: '',
      keys,
      socket: socket as never,
      sessionId: await sessionIdOf(app, s.client),
    };
    expect((await join(strangerMember, { token: found.token } as never)).ok).toBe(true);
    expect((await join(peer, { chat_id: found.chat_id })).ok).toBe(true);
    const { chatKey, epoch } = await keyEpoch(strangerMember, found.chat_id);
    const received = await receiveKey(peer, found.chat_id);
    const sent = await peer.client.post(`/v1/portal/chats/${found.chat_id}/messages`, {
      content: bundle(received.chatKey, found.chat_id, received.epoch, 'hello stranger'),
    });
    expect(sent.status).toBe(200);
    const msg = await socket.next('message:new', (m) => m.id === sent.body.id);
    expect(decryptMessage({ chatKey, chatId: found.chat_id, content: msg.content }).plaintext).toBe('hello stranger');
    expect(epoch).toBe(received.epoch);
  });

  it('a stranger block that fails to commit leaves the stranger unblocked, and one that commits leaves the queue', async () => {
    const s = await stranger();
    await connectSocket(app.url, s.client);
    await member(app);
    const mod = await member(app, { level: 1 });
    const t = tag();
    expect((await match(s, [t])).body.state).toBe('searching');
    const lift = await failInserts(app, 'audit_log', "new.action = 'block-stranger'");
    try {
      expect((await mod.client.post('/v1/portal/strangers/block', { user_id: s.user.id })).status).toBe(500);
    } finally {
      await lift();
    }
    // Nothing of the block stands: the stranger only left the queue, and may search again.
    expect((await s.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    expect((await match(s, [t])).body.state).toBe('searching');
    expect((await mod.client.post('/v1/portal/strangers/block', { user_id: s.user.id })).body).toEqual({ ok: true });
    expect((await s.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    expect((await match(s, [t])).body.code).toBe('ERR_STRANGER_BLOCKED');
  });

  it('tells a stranger blocked while searching that its search ended (match:timeout)', async () => {
    const s = await stranger();
    const socket = await connectSocket(app.url, s.client);
    await member(app);
    const mod = await member(app, { level: 1 });
    const t = tag();
    expect((await match(s, [t])).body.state).toBe('searching');
    expect((await mod.client.post('/v1/portal/strangers/block', { user_id: s.user.id })).body).toEqual({ ok: true });
    expect(await socket.next('match:timeout', (e) => e.interests[0] === t)).toEqual({ interests: [t] });
    expect((await s.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
  });

  it('is blocked from matchmaking by a moderator (403 ERR_STRANGER_BLOCKED), and cannot join public chats', async () => {
    const s = await stranger();
    const mod = await member(app, { level: 1 });
    const plain = await member(app);
    expect((await plain.client.post('/v1/portal/strangers/block', { user_id: s.user.id })).status).toBe(403);
    expect((await mod.client.post('/v1/portal/strangers/block', { user_id: plain.user.id })).status).toBe(403);
    expect((await mod.client.post('/v1/portal/strangers/block', { user_id: s.user.id })).body).toEqual({ ok: true });
    const res = await match(s, [tag()]);
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('ERR_STRANGER_BLOCKED');
    const admin = await member(app, { level: 2 });
    const chatId = (await admin.client.post('/v1/portal/chats/create', { name: 'Public', type: 'public' })).body.chat
      .id;
    const socket = await connectSocket(app.url, s.client);
    expect(await socket.emitWithAck('room:join', { chat_id: chatId })).toMatchObject({
      ok: false,
      code: 'ERR_STRANGER_NOT_ALLOWED',
    });
  });
});

describeApp('POST /v1/users/me/blocks/create', () => {
  it(`keeps up to ${Limits.BLOCKS_PER_USER} blocks per user and answers 409 ERR_BLOCK_LIMIT to the next`, async () => {
    const who = await login(app);
    const [last, over] = [await login(app), await login(app)];
    // All but one block seeded in SQL, on accounts made there (a POST each would meet the write limit).
    await app.database.db.execute(
      `with seeded as (
         insert into users (username, last_activity_at, created_at, updated_at)
         select 'blockseed_' || ${who.user.id} || '_' || g, now(), now(), now()
         from generate_series(1, ${Limits.BLOCKS_PER_USER - 1}) g
         returning id
       )
       insert into user_blocks (blocker_id, blocked_id, created_at) select ${who.user.id}, id, now() from seeded` as never,
    );
    const block = (user_id: number) => who.client.post('/v1/users/me/blocks/create', { user_id });
    expect((await block(last.user.id)).body).toEqual({ ok: true });
    expect((await who.client.get('/v1/users/me/blocks')).body.blocks).toHaveLength(Limits.BLOCKS_PER_USER);
    const refused = await block(over.user.id);
    expect(refused.status).toBe(409);
    expect(refused.body).toEqual({ code: 'ERR_BLOCK_LIMIT', message: expect.any(String) });
    // Blocking someone already blocked changes nothing and is fine at the limit; unblocking frees a place.
    expect((await block(last.user.id)).body).toEqual({ ok: true });
    expect((await who.client.post('/v1/users/me/blocks/delete', { user_id: last.user.id })).body).toEqual({ ok: true });
    expect((await block(over.user.id)).body).toEqual({ ok: true });
    expect((await who.client.get('/v1/users/me/blocks')).body.blocks).toHaveLength(Limits.BLOCKS_PER_USER);
  });
});

describeApp('GET /v1/portal/match/statistics', () => {
  it('counts online users and the top 5 tags by queue depth', async () => {
    const tags = Array.from({ length: 6 }, () => tag());
    const searchers = [];
    for (const [i, t] of tags.entries()) {
      const group: Member[] = [];
      for (let k = 0; k <= i; k++) {
        const m = await member(app);
        // Everyone in a group blocks the others, so they wait side by side instead of pairing.
        for (const other of group) await m.client.post('/v1/users/me/blocks/create', { user_id: other.user.id });
        expect((await match(m, [t])).body.state).toBe('searching');
        group.push(m);
      }
      searchers.push(...group);
    }
    const stats = await searchers[0]?.client.get('/v1/portal/match/statistics');
    expect(stats?.body.online).toBeGreaterThanOrEqual(searchers.length);
    expect(stats?.body.top_tags).toHaveLength(5);
    expect(stats?.body.top_tags.slice(0, 5).map((x: any) => x.tag)).toEqual(tags.slice(1).reverse());
    expect(stats?.body.top_tags[0].searching).toBe(6);
  });
});
