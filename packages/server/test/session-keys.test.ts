import { Limits } from '@parlor/protocol';
import { generateKeyPair, publicKeyToBase64 } from '@parlor/sdk';
import { eq, sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { schema } from '../src/platform/db/index.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { join, keyedChat, type Member, member, sessionIdOf } from './support/chat-flows.js';
import { login, operator, setLevel } from './support/flows.js';
import { hold, lockWaiters, lockWaitersOr } from './support/pg-locks.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
let pg: postgres.Sql;
beforeAll(async () => {
  app = await startApp();
  if (app.config.databaseUrl) pg = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await pg?.end({ timeout: 1 });
  await app?.close();
});

/**
 * DESIGN.md 9: a 2xx on a mutation means it is committed and its events are published. Ending a
 * session removes its key and moves its chats to a new epoch in the same transaction, so right
 * after the answer, with no waiting: the chat is at a new epoch, the ring lacks the session, and
 * its key row is gone.
 */
async function expectRekeyedWithout(chat: { owner: Member; chatId: number }, before: number, gone: Member) {
  const state = await chat.owner.client.get(`/v1/portal/chats/${chat.chatId}/keys`);
  expect(state.status).toBe(200);
  expect(state.body.epoch).toBe(before + 1);
  expect(Object.keys(state.body.key_ring[String(gone.user.id)] ?? {})).not.toContain(String(gone.sessionId));
  const rows = await app.database.db
    .select()
    .from(schema.sessionKeys)
    .where(eq(schema.sessionKeys.sessionId, gone.sessionId));
  expect(rows).toEqual([]);
}

/** A keyed chat with `m` (and, being one user, every session of it) as a member; the current epoch. */
async function chatWith(m: Member) {
  const chat = await keyedChat(app);
  expect((await join(m, { chat_id: chat.chatId })).ok).toBe(true);
  const ring = (await chat.owner.client.get(`/v1/portal/chats/${chat.chatId}/keys`)).body.key_ring;
  expect(Object.keys(ring[String(m.user.id)] ?? {})).toContain(String(m.sessionId));
  return chat;
}

describeApp('ending a session rekeys its chats before the answer', () => {
  it('POST /v1/authentication/logout', async () => {
    const guest = await member(app);
    const chat = await chatWith(guest);
    const res = await guest.client.post('/v1/authentication/logout', {});
    expect(res.status).toBe(200);
    await expectRekeyedWithout(chat, chat.epoch, guest);
  });

  it('POST /v1/users/me/sessions/{token_suffix}/destroy', async () => {
    const a = await member(app);
    const b = await member(app, { platformUserId: a.platformUserId });
    const chat = await chatWith(a);
    const res = await a.client.post(`/v1/users/me/sessions/${b.client.cookie?.slice(-6)}/destroy`);
    expect(res.body).toEqual({ destroyed: true });
    await expectRekeyedWithout(chat, chat.epoch, b);
  });

  it('POST /v1/users/me/sessions/destroy', async () => {
    const a = await member(app);
    const b = await member(app, { platformUserId: a.platformUserId });
    const chat = await chatWith(a);
    const res = await a.client.post('/v1/users/me/sessions/destroy', {});
    expect(res.body).toEqual({ destroyed: 1 });
    await expectRekeyedWithout(chat, chat.epoch, b);
  });

  it(`the eviction at login ${Limits.MAX_SESSIONS_PER_USER + 1}`, async () => {
    const oldest = await member(app);
    const chat = await chatWith(oldest);
    for (let i = 1; i < Limits.MAX_SESSIONS_PER_USER; i++) await login(app, { platformUserId: oldest.platformUserId });
    // Those logins registered no key: nothing changed for the chat yet.
    expect((await chat.owner.client.get(`/v1/portal/chats/${chat.chatId}/keys`)).body.epoch).toBe(chat.epoch);
    await login(app, { platformUserId: oldest.platformUserId });
    expect((await oldest.client.get('/v1/users/me')).status).toBe(401);
    await expectRekeyedWithout(chat, chat.epoch, oldest);
  });

  it('a platform ban', async () => {
    const target = await member(app);
    const chat = await chatWith(target);
    const res = await operator(app).post('/v1/admin/punishments/ban', { user_id: target.user.id });
    expect(res.status).toBe(200);
    await expectRekeyedWithout(chat, chat.epoch, target);
  });
});

/**
 * The `portal:key_removed` events of the chat about `userId` that `m` received, read after a
 * barrier: a new member joins the chat, and its `portal:key_added`, sent to the chat's room after
 * anything sent there before, has reached `m`.
 */
async function removalsHeard(m: Member, chatId: number, userId: number): Promise<(number | null)[]> {
  const later = await member(app);
  expect((await join(later, { chat_id: chatId })).ok).toBe(true);
  await m.socket.next('portal:key_added', (p) => p.chat_id === chatId && p.session_id === later.sessionId);
  return m.socket.received
    .filter((r) => r.event === 'portal:key_removed' && r.payload.chat_id === chatId && r.payload.user_id === userId)
    .map((r) => r.payload.session_id);
}

// Spec 6: `portal:key_removed` carries the session id; null means every session of that user
// ("ban or full disconnect"). A user whose last live session ends is fully disconnected.
describeApp('portal:key_removed when a user has no live session left', () => {
  it('names a session that ends while another (keyed or not) is live; says null when the last one ends', async () => {
    const a = await member(app);
    const b = await member(app, { platformUserId: a.platformUserId });
    const chat = await chatWith(a);
    // A session without a key: in no ring, but the user is still signed in with it.
    const keyless = await login(app, { platformUserId: a.platformUserId });
    expect((await a.client.post('/v1/authentication/logout', {})).status).toBe(200);
    expect((await b.client.post('/v1/authentication/logout', {})).status).toBe(200);
    const c = await member(app, { platformUserId: a.platformUserId });
    // The end of a session without a key removes no key: no announcement.
    expect((await keyless.client.post('/v1/authentication/logout', {})).status).toBe(200);
    expect((await c.client.post('/v1/authentication/logout', {})).status).toBe(200);
    await chat.owner.socket.next('portal:key_removed', (p) => p.chat_id === chat.chatId && p.session_id === null);
    expect(await removalsHeard(chat.owner, chat.chatId, a.user.id)).toEqual([a.sessionId, b.sessionId, null]);
    expect((await chat.owner.client.get(`/v1/portal/chats/${chat.chatId}/keys`)).body.epoch).toBe(chat.epoch + 3);
  });

  it('says null when the last session expires', async () => {
    const guest = await member(app);
    const chat = await chatWith(guest);
    await app.database.db.execute(
      sql.raw(`update sessions set expires_at = now() - interval '1 second' where id = ${guest.sessionId}`),
    );
    guest.socket.close();
    await app.services.sessions.sweepExpired();
    await chat.owner.socket.next('portal:key_removed', (p) => p.chat_id === chat.chatId && p.user_id === guest.user.id);
    expect(await removalsHeard(chat.owner, chat.chatId, guest.user.id)).toEqual([null]);
  });

  it(`never for the eviction at login ${Limits.MAX_SESSIONS_PER_USER + 1}: the new session is live`, async () => {
    const oldest = await member(app);
    const chat = await chatWith(oldest);
    for (let i = 0; i < Limits.MAX_SESSIONS_PER_USER; i++) await login(app, { platformUserId: oldest.platformUserId });
    await chat.owner.socket.next(
      'portal:key_removed',
      (p) => p.chat_id === chat.chatId && p.user_id === oldest.user.id,
    );
    expect(await removalsHeard(chat.owner, chat.chatId, oldest.user.id)).toEqual([oldest.sessionId]);
  });
});

describeApp('ending a session and removing its key are one transaction', () => {
  it('a logout whose key removal fails ends nothing: 500, the session stays live, the epoch stays', async () => {
    const guest = await member(app);
    const chat = await chatWith(guest);
    const db = app.database.db;
    // The key removal fails for this session only (a trigger of this test's database).
    await db.execute(
      sql.raw(`create function test_refuse_key_delete() returns trigger language plpgsql as $$
        begin
          if old.session_id = ${guest.sessionId} then raise exception 'key removal refused by the test'; end if;
          return old;
        end $$`),
    );
    await db.execute(
      sql.raw(`create trigger test_refuse_key_delete before delete on session_keys
        for each row execute function test_refuse_key_delete()`),
    );
    try {
      const res = await guest.client.post('/v1/authentication/logout', {});
      expect(res.status).toBe(500);
      expect(res.body.code).toBe('ERR_INTERNAL');
    } finally {
      await db.execute(sql.raw('drop trigger test_refuse_key_delete on session_keys'));
      await db.execute(sql.raw('drop function test_refuse_key_delete()'));
    }
    expect((await guest.client.get('/v1/users/me')).status).toBe(200);
    const state = await chat.owner.client.get(`/v1/portal/chats/${chat.chatId}/keys`);
    expect(state.body.epoch).toBe(chat.epoch);
    expect(Object.keys(state.body.key_ring[String(guest.user.id)] ?? {})).toContain(String(guest.sessionId));
  });
});

// DESIGN.md 7: a member session's key replaced raises its chats' epochs. Two tabs share one
// session (its cookie); PGlite runs one transaction at a time, so only PostgreSQL interleaves
// their registrations.
describeApp('two key registrations for one session at once (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')(
    'the second replaces the first and raises the epoch of the session’s chats exactly once',
    async () => {
      const owner = await login(app);
      await setLevel(app, owner.user.id, 2);
      // The creator is the chat's first member; this session has no key yet.
      const created = await owner.client.post('/v1/portal/chats/create', { name: 'Two tabs', type: 'public' });
      expect(created.status).toBe(200);
      const chatId: number = created.body.chat.id;
      const sessionId = await sessionIdOf(app, owner.client);
      const epochOf = async () =>
        (await pg<{ epoch: number }[]>`select epoch from chats where id = ${chatId}`)[0]?.epoch;
      const before = await epochOf();
      const [first, second] = [generateKeyPair(), generateKeyPair()].map((k) => publicKeyToBase64(k.publicKey));
      // The session row, held here: both registrations queue behind it, in the order sent (without
      // the registration's own lock on it, both would have read "no key" first, then waited for
      // their inserts' foreign key check).
      const session = hold(pg, (tx) => tx`select id from sessions where id = ${sessionId} for update`);
      await session.ready;
      const one = owner.client.post('/v1/portal/keys', { public_key: first });
      await Promise.race([one, lockWaiters(pg, 1)]);
      const two = owner.client.post('/v1/portal/keys', { public_key: second });
      await Promise.race([two, lockWaiters(pg, 2)]);
      await session.end();
      expect((await one).body).toEqual({ status: 'registered', session_id: sessionId });
      expect((await two).body).toEqual({ status: 'registered', session_id: sessionId });
      expect(await epochOf()).toBe((before ?? 0) + 1);
      const keys = await pg<
        { public_key: string }[]
      >`select public_key from session_keys where session_id = ${sessionId}`;
      expect(keys.map((k) => k.public_key)).toEqual([second]);
    },
  );
});

const ADVISORY = 4_242_019;

// docs/api.md "Keys": a session's end removes its key and rekeys its user's chats in one
// transaction. A join by the same user that commits while the end commits must not fall between
// the two: the end reads the user's chats before the join commits, and the join announces the
// ring it reads after its own commit. Only PostgreSQL interleaves them.
describeApp('a session end racing a join by the same user (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')(
    'the join waits for the end: the joined chat never hears of the ended session’s key',
    async () => {
      const chat = await keyedChat(app);
      // User U: session S2 (in no chat) holds a key; session S1 of U is about to join the chat.
      const s2 = await member(app);
      const s1 = await member(app, { platformUserId: s2.platformUserId });
      expect(s2.sessionId).toBeLessThan(s1.sessionId);
      // The logout of S2 waits at COMMIT, after all its statements (its read of the user's chats
      // included), on an advisory lock held here: a deferred constraint trigger, a slow commit.
      await pg.unsafe(
        `create or replace function test_slow_end() returns trigger language plpgsql as $$
         begin perform pg_advisory_xact_lock(${ADVISORY}); return null; end $$`,
      );
      await pg.unsafe(
        `create constraint trigger test_slow_end after update on sessions
         deferrable initially deferred for each row when (new.id = ${s2.sessionId} and new.ended_at is not null)
         execute function test_slow_end()`,
      );
      const gate = hold(pg, (tx) => tx`select pg_advisory_xact_lock(${ADVISORY})`);
      await gate.ready;
      const out = s2.client.post('/v1/authentication/logout', {});
      let joined: Promise<any> | undefined;
      try {
        await lockWaitersOr(pg, 1, out);
        // Meanwhile S1 makes U a member (it may wait for the logout, then the gate opens).
        joined = join(s1, { chat_id: chat.chatId });
        await lockWaitersOr(pg, 2, joined);
      } finally {
        await gate.end();
        await pg.unsafe('drop trigger if exists test_slow_end on sessions');
      }
      expect((await out).status).toBe(200);
      const ack = await joined;
      expect(ack.ok).toBe(true);
      expect(Object.keys(ack.key_ring[String(s1.user.id)] ?? {})).toEqual([String(s1.sessionId)]);
      // The join announces U's ring in session order: once S1's key is heard, so is any of S2's.
      await chat.owner.socket.next(
        'portal:key_added',
        (p) => p.chat_id === chat.chatId && p.session_id === s1.sessionId,
      );
      // Announced without a removal at a new epoch, holders would give the current key to an
      // ended session's key (which may be someone else's by now).
      const announced = chat.owner.socket.received.filter(
        (r) => r.event === 'portal:key_added' && r.payload.chat_id === chat.chatId && r.payload.user_id === s1.user.id,
      );
      expect(announced.map((r) => r.payload.session_id)).toEqual([s1.sessionId]);
    },
  );
});
