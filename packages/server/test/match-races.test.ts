import { Limits } from '@parlor/protocol';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { STRANGER_BAR_MS } from '../src/modules/matchmaking/blocks.service.js';
import { MATCH_PRECHECK_MAX_MS, PEERS_ONLINE_REUSE_MS } from '../src/modules/matchmaking/matchmaking.service.js';
import { FakeClock } from '../src/platform/clock.js';
import { MemoryMatchQueue } from '../src/platform/state/match-queue.memory.js';
import { RedisMatchQueue } from '../src/platform/state/match-queue.redis.js';
import { describeApp, MODE, type Nodes, startApp, startNodes, type TestApp } from './support/app.js';
import { type Member, member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows, failInserts } from './support/faults.js';
import { type LoggedIn, login, operator } from './support/flows.js';
import { hold, lockWaiters, lockWaitersOr } from './support/pg-locks.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

let app: TestApp;
let db: postgres.Sql;
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  app = await startApp({ clock });
  if (app.config.databaseUrl) db = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await db?.end({ timeout: 1 });
  await app?.close();
});

let tagCounter = 0;
/** A tag no other test uses, so tests do not pair across each other. */
const tag = () => `race${Date.now() % 1000}x${++tagCounter}`;
const match = (m: { client: Member['client'] }, interests: string[]) =>
  m.client.post('/v1/portal/match', { interests });
/** The match events a member's sockets got so far. */
const matchEvents = (m: Member) => m.socket.received.filter((r) => r.event.startsWith('match:'));

/** Active direct chats of a user, as the slot limit counts them. */
const activeDirect = (app: TestApp, userId: number) =>
  countRows(
    app,
    `select count(*) as n from chat_members m join chats c on c.id = m.chat_id
     where m.user_id = ${userId} and m.left_at is null and c.deleted_at is null and c.type = 'direct' and c.archived_at is null`,
  );

/** Chats that both users are members of. */
const chatsOfPair = (app: TestApp, a: number, b: number) =>
  countRows(
    app,
    `select count(*) as n from chat_members m join chat_members n on n.chat_id = m.chat_id
     where m.user_id = ${a} and n.user_id = ${b}`,
  );

/** A matched direct chat of `a` and `b`, made as the pairing makes it. */
async function matched(a: LoggedIn, b: LoggedIn): Promise<number> {
  const made = await app.services.chats.createDirect([a.user.id, b.user.id], ['races']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  return made.chat.id;
}

/** What one leave of `chatId` writes: its system messages and its activity rows, and the archive time. */
async function leaveTrace(chatId: number) {
  const messages = await countRows(
    app,
    `select count(*) as n from messages where chat_id = ${chatId} and type = 'system' and system ->> 'kind' = 'leave'`,
  );
  const activity = await countRows(
    app,
    `select count(*) as n from chat_activity where chat_id = ${chatId} and action = 'leave'`,
  );
  return { messages, activity };
}

const leave = (who: LoggedIn, chatId?: number) => app.services.matchmaking.leave(who.user.id, chatId);
const outcome = (r: PromiseSettledResult<unknown>) =>
  r.status === 'fulfilled' ? 'ok' : (r.reason as { code?: string }).code;

describeApp('leaving a direct chat twice at once', () => {
  // PGlite runs one statement at a time, in the order asked: calls made in one turn interleave as
  // written (both reads, then the writes). PostgreSQL runs them at once; its tests hold locks below.
  it.skipIf(MODE === 'cluster')(
    'writes one leave: the second of two leaves in one turn answers 404 ERR_NO_DIRECT_CHAT',
    async () => {
      const [a, b] = [await login(app), await login(app)];
      const chatId = await matched(a, b);
      // Both read the chat as active before either archives it (one turn: the reads go first).
      const results = await Promise.allSettled([leave(a), leave(a, chatId)]);
      expect(results.map(outcome).sort()).toEqual(['ERR_NO_DIRECT_CHAT', 'ok']);
      expect(await leaveTrace(chatId)).toEqual({ messages: 1, activity: 1 });
      const refused = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      expect(refused.reason).toMatchObject({ status: 404 });
    },
  );

  it.skipIf(MODE === 'cluster')(
    'a leave that reads the chat before the expiry sweep archives it answers 404 and writes nothing',
    async () => {
      const [a, b] = [await login(app), await login(app)];
      const chatId = await matched(a, b);
      clock.advance(Limits.DIRECT_CHAT_TTL_MS);
      const [left, swept] = await Promise.allSettled([leave(a), app.services.chats.sweepDirect()]);
      expect(swept.status === 'fulfilled' && swept.value.archived).toBeGreaterThanOrEqual(1);
      expect(outcome(left)).toBe('ERR_NO_DIRECT_CHAT');
      expect(await leaveTrace(chatId)).toEqual({ messages: 0, activity: 0 });
      expect((await b.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(true);
    },
  );

  // On PostgreSQL the test holds the chat row so that both leaves have read it and wait to write.
  it.skipIf(MODE === 'embedded')(
    'over HTTP on PostgreSQL: two leaves waiting on the same chat row, one answers 200 and the other 404',
    async () => {
      const [a, b] = [await login(app), await login(app)];
      const chatId = await matched(a, b);
      const row = hold(db, (tx) => tx`select id from chats where id = ${chatId} for update`);
      await row.ready;
      const both = [a.client.post('/v1/portal/match/leave', {}), a.client.post('/v1/portal/match/leave', {})];
      await lockWaiters(db, 2);
      await row.end();
      const answers = await Promise.all(both);
      expect(answers.map((r) => r.status).sort()).toEqual([200, 404]);
      expect(answers.find((r) => r.status === 404)?.body.code).toBe('ERR_NO_DIRECT_CHAT');
      expect(answers.find((r) => r.status === 200)?.body).toEqual({ ok: true, chat_id: chatId });
      expect(await leaveTrace(chatId)).toEqual({ messages: 1, activity: 1 });
    },
  );

  it.skipIf(MODE === 'embedded')(
    'over HTTP on PostgreSQL: a leave waiting while the sweep archives the chat answers 404 and writes nothing',
    async () => {
      const [a, b] = [await login(app), await login(app)];
      const chatId = await matched(a, b);
      const archivedAt = new Date(clock.now().getTime() + 1).toISOString();
      // The sweep's archive as archiveDue writes it, not yet committed: the leave still reads the
      // chat as active, then waits for its row, and the archive commits first.
      const sweep = hold(
        db,
        (tx) => tx`update chats set archived_at = ${archivedAt}, updated_at = ${archivedAt} where id = ${chatId}`,
      );
      await sweep.ready;
      const leaving = a.client.post('/v1/portal/match/leave', {});
      await lockWaiters(db, 1);
      await sweep.end();
      const res = await leaving;
      expect(res.status).toBe(404);
      expect(res.body.code).toBe('ERR_NO_DIRECT_CHAT');
      expect(await leaveTrace(chatId)).toEqual({ messages: 0, activity: 0 });
      expect(
        await countRows(app, `select count(*) as n from chats where id = ${chatId} and archived_at = '${archivedAt}'`),
      ).toBe(1);
    },
  );
});

describeApp('a pairing that fails after the queue took the waiting peer', () => {
  it('puts the peer back as it was (same search and deadline), tells it nothing, and answers the caller the error', async () => {
    const t = tag();
    const [a, b, c] = [await member(app), await member(app), await member(app)];
    const searching = await match(a, [t]);
    expect(searching.body).toEqual({ state: 'searching', interests: [t], expires_at: expect.any(String) });
    const lift = await failInserts(app, 'chats', "new.type = 'direct'");
    let failed: Awaited<ReturnType<typeof match>>;
    try {
      failed = await match(b, ['other1', t]);
    } finally {
      await lift();
    }
    expect(failed.status).toBe(500);
    expect((await b.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual(searching.body);
    expect(matchEvents(a)).toEqual([]);
    // Still waiting: the next searcher on the tag pairs with it.
    expect((await match(c, [t])).status).toBe(200);
    const found = await a.socket.next('match:found');
    expect(found.peer.id).toBe(c.user.id);
    expect(
      await countRows(app, `select count(*) as n from chats where id = ${found.chat_id} and type = 'direct'`),
    ).toBe(1);
  });
});

/** A promise and what opens it. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => {
    open = r;
  });
  return { open, opened };
}

/** Gives the app's next call of `obj[name]` a pause: `entered` once it is called, it goes on at `release.open()`. */
function pauseNext<T extends object, K extends keyof T>(obj: T, name: K) {
  const original = obj[name] as (...args: unknown[]) => Promise<unknown>;
  const entered = gate();
  const release = gate();
  let first = true;
  obj[name] = async function (this: unknown, ...args: unknown[]) {
    if (first) {
      first = false;
      entered.open();
      await release.opened;
    }
    return original.apply(this, args);
  } as T[K];
  const restore = () => {
    obj[name] = original as T[K];
    release.open();
  };
  return { entered: entered.opened, release: release.open, restore, original };
}

/**
 * Runs `pairing` (an enqueue that pairs with a waiting user) with its chat creation on `node` held
 * at its start (as a slow transaction would hold it) while `meanwhile` runs; answers the enqueue.
 */
async function pairingHeldWhile<R>(node: TestApp, pairing: () => Promise<R>, meanwhile: () => Promise<unknown>) {
  const paused = pauseNext(node.services.chats, 'createDirect');
  try {
    const answer = pairing();
    await paused.entered;
    await meanwhile();
    paused.release();
    return await answer;
  } finally {
    paused.restore();
  }
}

/**
 * On PostgreSQL: `b` enqueues on `t` and pairs with the waiting `a`, its pairing held at the users'
 * locks (the test holds `b`'s row, as a slow transaction would); meanwhile `a` dequeues through
 * `via`, which waits for that pairing. Answers the dequeue's answer and `a`'s match:found.
 */
async function dequeueWhilePairingWaits(sql: postgres.Sql, a: Member, b: Member, t: string, via: Client) {
  const row = hold(sql, (tx) => tx`select id from users where id = ${b.user.id} for update`);
  await row.ready;
  const pairing = match(b, [t]);
  await lockWaiters(sql, 1);
  const dequeued = via.post('/v1/portal/match/dequeue', {});
  await lockWaitersOr(sql, 2, dequeued);
  await row.end();
  const answer = (await dequeued).body;
  expect((await pairing).body.state).toBe('searching');
  return { answer, found: await a.socket.next('match:found') };
}

describeApp('a search ended while a pairing has it out of the queue', () => {
  // Both stores: the pairing's chat creation is held at its start (as a slow transaction or the
  // per-user slot lock holds it); meanwhile the waiting user stops searching, and the pairing is
  // then refused because of the caller (its slots filled by a pairing of another tab).
  it('a user who dequeued meanwhile stays idle when the pairing is refused, and the search it cancelled never pairs', async () => {
    const t = tag();
    const [a, b, c, d] = [await member(app), await member(app), await member(app), await member(app)];
    expect((await match(a, [t])).body.state).toBe('searching');
    const paused = pauseNext(app.services.chats, 'createDirect');
    try {
      const pairing = match(b, [t]);
      await paused.entered;
      expect((await a.client.post('/v1/portal/match/dequeue', {})).body).toEqual({ state: 'idle' });
      const other = await app.services.chats.createDirect([b.user.id, d.user.id], ['elsewhere']);
      expect('refused' in other).toBe(false);
      paused.release();
      expect((await pairing).body.code).toBe('ERR_MATCH_SLOT_LIMIT');
    } finally {
      paused.restore();
    }
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    // The next searcher on the tag waits: the cancelled search is not in the queue.
    expect((await match(c, [t])).body.state).toBe('searching');
    expect((await c.client.get('/v1/portal/match/status')).body.state).toBe('searching');
    expect(matchEvents(a)).toEqual([]);
    expect(matchEvents(c)).toEqual([]);
    // A new search of the user is its own.
    expect((await match(a, [t])).body.state).toBe('searching');
    expect((await a.socket.next('match:found')).peer.id).toBe(c.user.id);
  });

  // Both stores: the pairing is held before it takes the users' locks, so the dequeue does not
  // wait for it and answers idle; the pairing then reads the dequeue's mark.
  it('a dequeue answered idle while the pair was being made is not followed by the match: no chat, no match:found; the caller searches on', async () => {
    const t = tag();
    const [a, b] = [await member(app), await member(app)];
    expect((await match(a, [t])).body.state).toBe('searching');
    const res = await pairingHeldWhile(
      app,
      () => match(b, [t]),
      async () => expect((await a.client.post('/v1/portal/match/dequeue', {})).body).toEqual({ state: 'idle' }),
    );
    expect(res.body.state).toBe('searching');
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    expect(await chatsOfPair(app, a.user.id, b.user.id)).toBe(0);
    // The caller queued instead; an ack on each socket comes after anything sent to it before.
    expect((await b.client.get('/v1/portal/match/status')).body).toEqual(res.body);
    for (const m of [a, b]) await m.socket.emitWithAck('vm:credentials', { chat_id: 0 } as never);
    expect(matchEvents(a)).toEqual([]);
    expect(matchEvents(b)).toEqual([]);
    await b.client.post('/v1/portal/match/dequeue', {});
  });

  it('the waiting user reads searching while the pairing has it out, and a second search of it is refused 409 ERR_MATCH_ALREADY_SEARCHING', async () => {
    const t = tag();
    const [a, b] = [await member(app), await member(app)];
    expect((await match(a, [t])).body.state).toBe('searching');
    const res = await pairingHeldWhile(
      app,
      () => match(b, [t]),
      async () => {
        expect((await a.client.get('/v1/portal/match/status')).body).toMatchObject({
          state: 'searching',
          interests: [t],
        });
        expect((await match(a, [tag()])).body.code).toBe('ERR_MATCH_ALREADY_SEARCHING');
      },
    );
    expect(res.body.state).toBe('searching');
    expect((await a.socket.next('match:found')).peer.id).toBe(b.user.id);
    // Matched, and searching no more (one search, one chat).
    expect((await a.client.get('/v1/portal/match/status')).body.state).toBe('matched');
  });

  it("a dequeue of the caller's own search while its pairing runs: idle and no chat; the enqueue answers its search, then match:timeout; the peer searches on", async () => {
    const t = tag();
    const [a, b] = [await member(app), await member(app)];
    const waiting = (await match(a, [t])).body;
    const res = await pairingHeldWhile(
      app,
      () => match(b, [t]),
      async () => {
        // Another tab of the caller stops its search.
        expect((await b.client.post('/v1/portal/match/dequeue', {})).body).toEqual({ state: 'idle' });
      },
    );
    expect(res.body).toEqual({ state: 'searching', interests: [t], expires_at: expect.any(String) });
    expect((await b.socket.next('match:timeout')).interests).toEqual([t]);
    expect((await b.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    expect(await chatsOfPair(app, a.user.id, b.user.id)).toBe(0);
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual(waiting);
    expect(matchEvents(a)).toEqual([]);
    await a.client.post('/v1/portal/match/dequeue', {});
  });

  // The pairing holds the users' locks and its statement waits on the caller's row, held by the
  // test: the dequeue waits for the pairing, whose chat commits, and answers it.
  it.skipIf(MODE === 'embedded')(
    "on PostgreSQL: a dequeue while the pairing holds the users' locks waits for it and answers matched, the chat the pair got",
    async () => {
      const t = tag();
      const [a, b] = [await member(app), await member(app)];
      expect((await match(a, [t])).body.state).toBe('searching');
      const { answer, found } = await dequeueWhilePairingWaits(db, a, b, t, a.client);
      expect(answer).toEqual({
        state: 'matched',
        token: found.token,
        chat_id: found.chat_id,
        expires_at: found.expires_at,
      });
      expect((await a.client.get('/v1/portal/match/status')).body).toEqual(answer);
      expect((await b.socket.next('match:found')).chat_id).toBe(found.chat_id);
    },
  );

  // The pairing's statement waits on the caller's row, held by the test as a ban holds it; the
  // waiting user dequeues meanwhile and waits for the pairing (it holds the users' locks); the ban
  // commits and refuses the pair because of the caller, and the dequeue answers idle.
  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: a dequeue while the pairing waits on the caller row, then the caller banned: the dequeued user stays idle',
    async () => {
      const t = tag();
      const [a, b, c] = [await member(app), await member(app), await member(app)];
      expect((await match(a, [t])).body.state).toBe('searching');
      const ban = hold(db, async (tx) => {
        await tx`select id from users where id = ${b.user.id} for update`;
        await tx`update users set state = 2 where id = ${b.user.id}`;
      });
      await ban.ready;
      const pairing = match(b, [t]);
      await lockWaiters(db, 1);
      const dequeued = a.client.post('/v1/portal/match/dequeue', {});
      await lockWaitersOr(db, 2, dequeued);
      await ban.end();
      expect((await dequeued).body).toEqual({ state: 'idle' });
      expect((await pairing).body.code).toBe('ERR_BANNED');
      expect((await a.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
      expect((await match(c, [t])).body.state).toBe('searching');
      expect((await c.client.get('/v1/portal/match/status')).body.state).toBe('searching');
      expect(matchEvents(a)).toEqual([]);
      await c.client.post('/v1/portal/match/dequeue', {});
    },
  );

  // Both stores: right after the pairing has read the users' marks (so it goes on), the waiting
  // user dequeues and its deadline passes; the pairing is then refused because of the caller
  // (its slots filled by a pairing of another tab), and the waiting user is not put back.
  it('a user who dequeued after the pairing read the marks is told nothing, even when its deadline passed meanwhile', async () => {
    const t = tag();
    const [a, b, d] = [await member(app), await member(app), await member(app)];
    expect((await match(a, [t])).body.state).toBe('searching');
    const chats = app.services.chats;
    const original = chats.createDirect;
    let dequeued: Promise<unknown> | undefined;
    chats.createDirect = (async (userIds, tags, searchesEnded) => {
      chats.createDirect = original;
      const other = await original([b.user.id, d.user.id], ['elsewhere']);
      expect('refused' in other).toBe(false);
      return original(userIds, tags, async () => {
        const ended = (await searchesEnded?.()) ?? [];
        // The queue call is sent at once (its mark set before the pairing puts anyone back).
        dequeued = app.services.matchmaking.dequeue(a.user.id);
        clock.advance(Limits.MATCH_QUEUE_WAIT_MS);
        return ended;
      });
    }) as typeof original;
    let res: Awaited<ReturnType<typeof match>>;
    try {
      res = await match(b, [t]);
    } finally {
      chats.createDirect = original;
    }
    expect(res.body.code).toBe('ERR_MATCH_SLOT_LIMIT');
    expect(await dequeued).toEqual({ state: 'idle' });
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    expect(await chatsOfPair(app, a.user.id, b.user.id)).toBe(0);
    await a.socket.emitWithAck('vm:credentials', { chat_id: 0 } as never);
    expect(matchEvents(a)).toEqual([]);
  });
});

describeApp('a block committed while an enqueue is in flight', () => {
  // Both stores: the enqueue's online count (run beside its SQL pre-check, which has read the
  // blocks) is held while the waiting user blocks the caller; the block is answered first.
  it('never pairs the two: no chat, no match:found; both search on and neither pairs with the other later', async () => {
    const t = tag();
    const [a, b] = [await member(app), await member(app)];
    expect((await match(a, [t])).body.state).toBe('searching');
    const searching = (await a.client.get('/v1/portal/match/status')).body;
    // Past the node's 1 s reuse of "two or more online", so the enqueue counts again.
    clock.advance(PEERS_ONLINE_REUSE_MS + 1);
    const paused = pauseNext(app.state, 'countExpiring');
    let res: Awaited<ReturnType<typeof match>>;
    try {
      const enqueuing = match(b, [t]);
      await paused.entered;
      expect((await a.client.post('/v1/users/me/blocks/create', { user_id: b.user.id })).body).toEqual({ ok: true });
      paused.release();
      res = await enqueuing;
    } finally {
      paused.restore();
    }
    expect(res.body.state).toBe('searching');
    expect(
      await countRows(
        app,
        `select count(*) as n from chat_members m join chat_members n on n.chat_id = m.chat_id
         where m.user_id = ${a.user.id} and n.user_id = ${b.user.id}`,
      ),
    ).toBe(0);
    // The waiting user went back as it was; the caller queued beside it.
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual(searching);
    expect((await b.client.get('/v1/portal/match/status')).body.state).toBe('searching');
    expect(matchEvents(a)).toEqual([]);
    expect(matchEvents(b)).toEqual([]);
    // Each is still paired with others: a third user takes the longest waiting one.
    const c = await member(app);
    expect((await match(c, [t])).body.state).toBe('searching');
    expect((await c.socket.next('match:found')).peer.id).toBe(a.user.id);
    await b.client.post('/v1/portal/match/dequeue', {});
  });
});

describeApp('parallel enqueues of one user (two tabs)', () => {
  /** Two online members waiting on fresh tags, and a searcher `a` (premium when asked). */
  async function twoWaiting(premium: boolean) {
    const [ta, tb] = [tag(), tag()];
    const [a, c, d] = [await member(app), await member(app), await member(app)];
    if (premium)
      await app.database.db.execute(
        `update users set subscription_tier = 2, subscription_expires_at = now() + interval '30 days' where id = ${a.user.id}` as never,
      );
    const waiting = { [c.user.id]: (await match(c, [ta])).body, [d.user.id]: (await match(d, [tb])).body };
    const searcher = { userId: a.user.id, sessionId: a.sessionId, stranger: false, matchBlocked: false };
    return { ta, tb, a, c, d, waiting, searcher };
  }

  // Spec 4.5: one search per user. A search pairing at once is still that user's search until its
  // pairing is over, as a waiting user's is: the other tab's enqueue is refused, not paired beside it.
  for (const premium of [false, true])
    it(`two enqueues of a ${premium ? 'premium' : 'free'} user in one turn, each able to pair with a different waiting peer: one chat, the other 409 ERR_MATCH_ALREADY_SEARCHING; its peer untouched`, async () => {
      const { ta, tb, a, c, d, waiting, searcher } = await twoWaiting(premium);
      // One turn: both read the same pre-check (no chat yet) and both reach the queue.
      const results = await Promise.allSettled([
        app.services.matchmaking.enqueue(searcher, [ta]),
        app.services.matchmaking.enqueue(searcher, [tb]),
      ]);
      expect(results.map(outcome).sort()).toEqual(['ERR_MATCH_ALREADY_SEARCHING', 'ok']);
      expect(await activeDirect(app, a.user.id)).toBe(1);
      // The peer of the refused search searches on as before, never taken; the other is matched with A.
      const [matched, other] = results[0]?.status === 'fulfilled' ? [c, d] : [d, c];
      expect((await other.client.get('/v1/portal/match/status')).body).toEqual(waiting[other.user.id]);
      expect(matchEvents(other)).toEqual([]);
      expect((await matched.client.get('/v1/portal/match/status')).body.state).toBe('matched');
      expect(await activeDirect(app, other.user.id)).toBe(0);
      await other.client.post('/v1/portal/match/dequeue', {});
    });
});

describeApp("the slots-filled mark of a pairing's chat", () => {
  // The queue of this mode, whose `release` (the pairing's last queue step before it marks the
  // users whose slots its chat filled) the test slows down.
  const Queue = (MODE === 'cluster' ? RedisMatchQueue : MemoryMatchQueue) as unknown as {
    prototype: { release: (entries: readonly { userId: number }[]) => Promise<void> };
  };

  it('a search begun after leaving the new chat, while the pairing still finishes, is not ended by it: it stays queued and pairs', async () => {
    const t = tag();
    const t2 = tag();
    const [a, b, e] = [await member(app), await member(app), await member(app)];
    expect((await match(a, [t])).body.state).toBe('searching');
    // The pairing's release has applied but its answer is slow (a busy node, a slow store): a
    // millisecond passes, and meanwhile A, which sees its new chat (the opening message), leaves
    // it and searches again. Its pre-check reads its free slot.
    const original = Queue.prototype.release;
    const released = gate();
    const resume = gate();
    Queue.prototype.release = async function (this: unknown, entries) {
      await original.call(this, entries);
      if (entries.some((x) => x.userId === a.user.id)) {
        Queue.prototype.release = original;
        released.open();
        await resume.opened;
      }
    };
    let again: Awaited<ReturnType<typeof match>>;
    try {
      const pairing = match(b, [t]);
      await released.opened;
      clock.advance(1);
      const opening = await a.socket.next('message:new', (m) => m.system?.kind === 'match');
      expect((await a.client.post('/v1/portal/match/leave', { chat_id: opening.chat_id })).status).toBe(200);
      again = await match(a, [t2]);
      resume.open();
      expect((await pairing).body.state).toBe('searching');
    } finally {
      Queue.prototype.release = original;
    }
    expect(again.body).toMatchObject({ state: 'searching', interests: [t2] });
    await b.socket.next('match:found');
    // The new search stands, whatever the pairing of the chat A left marks: E pairs with it.
    expect((await match(e, [t2])).body.state).toBe('searching');
    expect((await e.socket.next('match:found')).peer.id).toBe(a.user.id);
    expect(matchEvents(a).filter((r) => r.event === 'match:timeout')).toEqual([]);
  });
});

// Two nodes over one PostgreSQL and Redis: the direct-chat slot limit (the test holds the two
// waiting peers' user rows, so both pairings of the same user, one per node, reach the chat insert
// before either commits), and a dequeue on another node than the pairing.
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))('matchmaking on two nodes', () => {
  let nodes: Nodes;
  let shared: postgres.Sql;
  beforeAll(async () => {
    nodes = await startNodes();
    shared = postgres(nodes.a.config.databaseUrl ?? '', { max: 3, onnotice: () => {} });
  });
  afterAll(async () => {
    closeAllSockets();
    await shared?.end({ timeout: 1 });
    await nodes?.close();
  });

  it('a premium user enqueuing on node A and node B at once gets one direct chat; the other answer is 409 ERR_MATCH_ALREADY_SEARCHING', async () => {
    const { a: nodeA, b: nodeB } = nodes;
    const [ta, tb] = [tag(), tag()];
    const [user, c, d] = [await member(nodeA), await member(nodeA), await member(nodeB)];
    await shared`update users set subscription_tier = 2, subscription_expires_at = now() + interval '30 days' where id = ${user.user.id}`;
    const waiting = { [c.user.id]: (await match(c, [ta])).body, [d.user.id]: (await match(d, [tb])).body };
    // The peers' rows, as a user update would hold them: the first pairing's chat insert waits
    // for them (its members' key), its search out of the queue meanwhile.
    const peers = hold(shared, (tx) => tx`select id from users where id in (${c.user.id}, ${d.user.id}) for update`);
    await peers.ready;
    const both = [match(user, [ta]), match({ client: user.client.on(nodeB) }, [tb])];
    await lockWaiters(shared, 1);
    // The other search is refused while that pairing holds the first (it never waits on a lock).
    const refused = await Promise.race(both);
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('ERR_MATCH_ALREADY_SEARCHING');
    await peers.end();
    const answers = await Promise.all(both);
    expect(answers.map((r) => r.status).sort()).toEqual([200, 409]);
    expect(await activeDirect(nodeA, user.user.id)).toBe(1);
    const other = answers[0]?.status === 409 ? c : d;
    expect((await other.client.get('/v1/portal/match/status')).body).toEqual(waiting[other.user.id]);
    expect(await activeDirect(nodeA, other.user.id)).toBe(0);
  });

  // A dequeue on node B of a search node A is pairing.
  it('answered idle before the pairing took its locks: no chat follows; the caller searches on', async () => {
    const { a: nodeA, b: nodeB } = nodes;
    const t = tag();
    const [a, b] = [await member(nodeA), await member(nodeA)];
    expect((await match(a, [t])).body.state).toBe('searching');
    const res = await pairingHeldWhile(
      nodeA,
      () => match(b, [t]),
      async () =>
        expect((await a.client.on(nodeB).post('/v1/portal/match/dequeue', {})).body).toEqual({ state: 'idle' }),
    );
    expect(res.body.state).toBe('searching');
    expect((await a.client.on(nodeB).get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    expect(await chatsOfPair(nodeA, a.user.id, b.user.id)).toBe(0);
    await b.client.post('/v1/portal/match/dequeue', {});
  });

  it("waiting while the pairing holds the users' locks: answers matched, the chat the pair got", async () => {
    const { a: nodeA, b: nodeB } = nodes;
    const t = tag();
    const [a, b] = [await member(nodeA), await member(nodeA)];
    expect((await match(a, [t])).body.state).toBe('searching');
    const { answer, found } = await dequeueWhilePairingWaits(shared, a, b, t, a.client.on(nodeB));
    expect(answer).toEqual({
      state: 'matched',
      token: found.token,
      chat_id: found.chat_id,
      expires_at: found.expires_at,
    });
  });
});

describeApp('a stranger block racing an enqueue in flight', () => {
  // The enqueue's pre-check (one statement reading the account, its blocks and session) waits on
  // the test's lock on user_blocks while the block commits: it read the session before the block.
  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: an enqueue whose pre-check runs while the block commits answers 403 ERR_STRANGER_BLOCKED and leaves nobody queued',
    async () => {
      const client = new Client(app.url, nextIp(), app.publicApiKey);
      const created = await client.post('/v1/portal/stranger', {});
      expect(created.status).toBe(200);
      const strangerId: number = created.body.user.id;
      await connectSocket(app.url, client);
      const [mod, peer] = [await member(app, { level: 1 }), await member(app)];
      const t = tag();
      const blocks = hold(db, (tx) => tx`lock table user_blocks in access exclusive mode`);
      await blocks.ready;
      const enqueuing = client.post('/v1/portal/match', { interests: [t] });
      await lockWaiters(db, 1);
      expect((await mod.client.post('/v1/portal/strangers/block', { user_id: strangerId })).body).toEqual({ ok: true });
      await blocks.end();
      const res = await enqueuing;
      expect(res.status).toBe(403);
      expect(res.body.code).toBe('ERR_STRANGER_BLOCKED');
      expect((await client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
      // Nobody can meet it: the next searcher on its tag waits.
      expect((await match(peer, [t])).body.state).toBe('searching');
      expect(matchEvents(peer)).toEqual([]);
    },
  );

  // The queue checks a bar at the time the enqueue began; the test's clock stands in for minutes
  // that a stalled database (DATABASE_STATEMENT_TIMEOUT_MS=0) could take.
  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: a block whose transaction outlasts its bar bars again from its commit, taking out a stranger that queued meanwhile',
    async () => {
      const client = new Client(app.url, nextIp(), app.publicApiKey);
      const strangerId: number = (await client.post('/v1/portal/stranger', {})).body.user.id;
      await connectSocket(app.url, client);
      const mod = await member(app, { level: 1 });
      const t = tag();
      // The block's update waits behind the test's lock on the stranger's row.
      const row = hold(db, (tx) => tx`select id from users where id = ${strangerId} for update`);
      await row.ready;
      const blocking = mod.client.post('/v1/portal/strangers/block', { user_id: strangerId });
      await lockWaiters(db, 1);
      clock.advance(STRANGER_BAR_MS + 60_000);
      // Online marks from before the jump have run out: two users come online now.
      const [peer] = [await member(app), await member(app)];
      // The first bar has ended and the block is not committed: the stranger may queue.
      expect((await client.post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
      await row.end();
      expect((await blocking).body).toEqual({ ok: true });
      expect((await client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
      expect((await match(peer, [t])).body.state).toBe('searching');
      expect(matchEvents(peer)).toEqual([]);
      expect((await client.post('/v1/portal/match', { interests: [t] })).body.code).toBe('ERR_STRANGER_BLOCKED');
    },
  );

  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: an enqueue whose pre-check reads took more than MATCH_PRECHECK_MAX_MS answers 503 ERR_SERVICE_UNAVAILABLE and queues nobody',
    async () => {
      const [searcher] = [await member(app), await member(app)];
      const t = tag();
      const blocks = hold(db, (tx) => tx`lock table user_blocks in access exclusive mode`);
      await blocks.ready;
      const enqueuing = match(searcher, [t]);
      await lockWaiters(db, 1);
      clock.advance(MATCH_PRECHECK_MAX_MS + 1);
      await blocks.end();
      const res = await enqueuing;
      expect(res.status).toBe(503);
      expect(res.body.code).toBe('ERR_SERVICE_UNAVAILABLE');
      expect((await searcher.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
      // Online marks from before the jump have run out: two users come online now.
      const [peer] = [await member(app), await member(app)];
      expect((await match(peer, [t])).body.state).toBe('searching');
    },
  );
});

describeApp('a stranger block committed while a pairing has the stranger', () => {
  async function connectedStranger() {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const id: number = (await client.post('/v1/portal/stranger', {})).body.user.id;
    const socket = await connectSocket(app.url, client);
    return { client, id, socket };
  }
  const block = async (mod: Member, id: number) =>
    expect((await mod.client.post('/v1/portal/strangers/block', { user_id: id })).body).toEqual({ ok: true });

  // Both stores: the pairing is held before its chat statement while a moderator blocks the
  // waiting stranger (the queue's bar finds no entry: the pairing has it out).
  it('out of the queue as the waiting peer: no chat, it leaves silently; the caller searches on', async () => {
    const t = tag();
    const s = await connectedStranger();
    const [mod, b] = [await member(app, { level: 1 }), await member(app)];
    expect((await s.client.post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
    const res = await pairingHeldWhile(
      app,
      () => match(b, [t]),
      () => block(mod, s.id),
    );
    expect(res.body.state).toBe('searching');
    expect(await chatsOfPair(app, s.id, b.user.id)).toBe(0);
    expect((await s.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    expect((await b.client.get('/v1/portal/match/status')).body).toEqual(res.body);
    for (const socket of [s.socket, b.socket]) await socket.emitWithAck('vm:credentials', { chat_id: 0 } as never);
    expect(s.socket.received.filter((r) => r.event.startsWith('match:'))).toEqual([]);
    expect(matchEvents(b)).toEqual([]);
    expect((await s.client.post('/v1/portal/match', { interests: [t] })).body.code).toBe('ERR_STRANGER_BLOCKED');
    await b.client.post('/v1/portal/match/dequeue', {});
  });

  it('pairing as the caller: 403 ERR_STRANGER_BLOCKED, no chat; the waiting user goes back as it was', async () => {
    const t = tag();
    const s = await connectedStranger();
    const [mod, a] = [await member(app, { level: 1 }), await member(app)];
    const waiting = (await match(a, [t])).body;
    const res = await pairingHeldWhile(
      app,
      () => s.client.post('/v1/portal/match', { interests: [t] }),
      () => block(mod, s.id),
    );
    expect([res.status, res.body.code]).toEqual([403, 'ERR_STRANGER_BLOCKED']);
    expect(await chatsOfPair(app, s.id, a.user.id)).toBe(0);
    expect((await s.client.get('/v1/portal/match/status')).body).toEqual({ state: 'idle' });
    expect((await a.client.get('/v1/portal/match/status')).body).toEqual(waiting);
    expect(matchEvents(a)).toEqual([]);
    await a.client.post('/v1/portal/match/dequeue', {});
  });
});

describeApp('a ban committing while a pairing reads the waiting user', () => {
  // The pairing's statement holds the users' rows as it reads them: it waits behind the test's
  // transaction, which bans the waiting user as a ban does (its row lock, then the state).
  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: the pairing sees the ban once it commits: no chat, the caller searches on, the banned user is out of the queue',
    async () => {
      const t = tag();
      const [a, b] = [await member(app), await member(app)];
      expect((await match(a, [t])).body.state).toBe('searching');
      const ban = hold(db, async (tx) => {
        await tx`select id from users where id = ${a.user.id} for update`;
        await tx`update users set state = 2 where id = ${a.user.id}`;
      });
      await ban.ready;
      const pairing = match(b, [t]);
      await lockWaiters(db, 1);
      await ban.end();
      expect((await pairing).body.state).toBe('searching');
      expect((await b.client.get('/v1/portal/match/status')).body.state).toBe('searching');
      expect(await activeDirect(app, b.user.id)).toBe(0);
      expect(matchEvents(b)).toEqual([]);
      expect((await app.services.matchmaking.status(a.user.id)).state).toBe('idle');
      await b.client.post('/v1/portal/match/dequeue', {});
    },
  );
});

describeApp('POST /v1/users/me/blocks/create racing an account deletion', () => {
  const block = (who: LoggedIn, userId: number) => who.client.post('/v1/users/me/blocks/create', { user_id: userId });
  const blocksOf = async (userId: number) =>
    countRows(app, `select count(*) as n from user_blocks where blocker_id = ${userId} or blocked_id = ${userId}`);

  it('answers 404 ERR_USER_NOT_FOUND for a user deleted before the block', async () => {
    const [blocker, target] = [await login(app), await login(app)];
    expect((await operator(app).post(`/v1/admin/users/${target.user.id}/delete`, {})).status).toBe(200);
    const res = await block(blocker, target.user.id);
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 404, code: 'ERR_USER_NOT_FOUND' });
  });

  // The block checks the target, then waits in its transaction on the blocker's row (held by the
  // test) while an admin deletes the target: it must find the target gone, not hit the foreign key.
  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: a target deleted while the block waits answers 404 ERR_USER_NOT_FOUND, nothing stored',
    async () => {
      const [blocker, target] = [await login(app), await login(app)];
      const held = hold(db, (tx) => tx`select id from users where id = ${blocker.user.id} for update`);
      await held.ready;
      const pending = block(blocker, target.user.id);
      await lockWaiters(db, 1);
      expect((await operator(app).post(`/v1/admin/users/${target.user.id}/delete`, {})).status).toBe(200);
      await held.end();
      const res = await pending;
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 404, code: 'ERR_USER_NOT_FOUND' });
      expect(await blocksOf(blocker.user.id)).toBe(0);
    },
  );

  // The deletion of the blocker itself commits while the block waits on the blocker's row.
  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: a blocker deleted while its block waits answers 401 ERR_UNAUTHENTICATED, nothing stored',
    async () => {
      const [blocker, target] = [await login(app), await login(app)];
      const deletion = hold(db, (tx) => tx`delete from users where id = ${blocker.user.id}`);
      await deletion.ready;
      const pending = block(blocker, target.user.id);
      await lockWaiters(db, 1);
      await deletion.end();
      const res = await pending;
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 401, code: 'ERR_UNAUTHENTICATED' });
      expect(await blocksOf(target.user.id)).toBe(0);
    },
  );

  // A's block of B is held in flight after taking its locks (its insert waits on the same row,
  // inserted by the test and not committed); B's block of A must not wait for it: the two blocks'
  // locks never conflict, so two users blocking each other at once cannot deadlock.
  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: a block of A by B completes while a block of B by A is in flight',
    async () => {
      const [a, b] = [await login(app), await login(app)];
      const row = hold(
        db,
        (tx) =>
          tx`insert into user_blocks (blocker_id, blocked_id, created_at) values (${a.user.id}, ${b.user.id}, now())`,
      );
      await row.ready;
      const first = block(a, b.user.id);
      await lockWaiters(db, 1);
      expect((await block(b, a.user.id)).body).toEqual({ ok: true });
      await row.end();
      expect((await first).body).toEqual({ ok: true });
      expect(
        await countRows(app, `select count(*) as n from user_blocks where blocker_id in (${a.user.id}, ${b.user.id})`),
      ).toBe(2);
    },
  );
});

// docs/api.md Governance, Users: once a deletion commits, "as a ban does … it leaves the match
// queue", and a caller whose own account is deleted while its request runs answers 401 (its
// sessions ended with it), never a 404.
describeApp('a search racing its own account’s deletion', () => {
  it.skipIf(MODE !== 'embedded')(
    'an enqueue in flight when the account is deleted is refused by the queue: no entry is left for the account',
    async () => {
      const gone = await member(app);
      await member(app); // another user online, so the pre-check finds a peer
      const original = MemoryMatchQueue.prototype.enqueue;
      let queue: MemoryMatchQueue | undefined;
      let deletion: { status: number } | undefined;
      // The deletion commits after the enqueue's pre-check read the account, before its queue step.
      MemoryMatchQueue.prototype.enqueue = async function (this: MemoryMatchQueue, entry, now) {
        if (entry.userId === gone.user.id && !deletion) {
          queue = this;
          deletion = await operator(app).post(`/v1/admin/users/${gone.user.id}/delete`, {});
        }
        return original.call(this, entry, now);
      };
      try {
        await match(gone, [tag()]);
      } finally {
        MemoryMatchQueue.prototype.enqueue = original;
      }
      expect(deletion?.status).toBe(200);
      expect(queue).toBeDefined();
      expect((await queue?.get(gone.user.id, clock.now().getTime())) ?? null).toBeNull();
    },
  );

  it('an enqueue whose own account is gone by its pre-check answers 401 ERR_UNAUTHENTICATED, not 404', async () => {
    const gone = await member(app);
    await member(app);
    // The session is in the node's cache, as on a node whose invalidation is still on its way.
    expect((await gone.client.get('/v1/users/me')).status).toBe(200);
    await app.database.db.execute(`delete from users where id = ${gone.user.id}` as never);
    const res = await match(gone, [tag()]);
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 401, code: 'ERR_UNAUTHENTICATED' });
  });
});
