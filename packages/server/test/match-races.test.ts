import { Limits } from '@parlor/protocol';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { type Member, member } from './support/chat-flows.js';
import { countRows, failInserts } from './support/faults.js';
import { type LoggedIn, login } from './support/flows.js';
import { hold, lockWaiters } from './support/pg-locks.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
let sql: postgres.Sql;
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  app = await startApp({ clock });
  if (app.config.databaseUrl) sql = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await sql?.end({ timeout: 1 });
  await app?.close();
});

let tagCounter = 0;
/** A tag no other test uses, so tests do not pair across each other. */
const tag = () => `race${Date.now() % 1000}x${++tagCounter}`;
const match = (m: { client: Member['client'] }, interests: string[]) =>
  m.client.post('/v1/portal/match', { interests });
/** The match events a member's sockets got so far. */
const matchEvents = (m: Member) => m.socket.received.filter((r) => r.event.startsWith('match:'));

/** A matched direct chat of `a` and `b`, made as the pairing makes it. */
async function matched(a: LoggedIn, b: LoggedIn): Promise<number> {
  const made = await app.services.chats.createDirect([a.user.id, b.user.id], ['races']);
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
      const row = hold(sql, (tx) => tx`select id from chats where id = ${chatId} for update`);
      await row.ready;
      const both = [a.client.post('/v1/portal/match/leave', {}), a.client.post('/v1/portal/match/leave', {})];
      await lockWaiters(sql, 2);
      row.release();
      await row.done;
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
        sql,
        (tx) => tx`update chats set archived_at = ${archivedAt}, updated_at = ${archivedAt} where id = ${chatId}`,
      );
      await sweep.ready;
      const leaving = a.client.post('/v1/portal/match/leave', {});
      await lockWaiters(sql, 1);
      sweep.release();
      await sweep.done;
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
