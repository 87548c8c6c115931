import { Limits } from '@parlor/protocol';
import { generateKeyPair, publicKeyToBase64, unwrapChatKey, wrapChatKey } from '@parlor/sdk';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { deadlockVictimRuns } from '../src/platform/db/after-commit.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { join, keyedChat, type Member, member, sessionIdOf } from './support/chat-flows.js';
import { login } from './support/flows.js';
import {
  gateInserts,
  hold,
  lockWaiters,
  lockWaitersOr,
  loginUpToVerify,
  whileHeldAdvancing,
} from './support/pg-locks.js';
import { closeAllSockets, type TestSocket } from './support/sockets.js';

/** Moved by the tests whose deadline passes while a request waits for a row. */
const clock = new FakeClock(Date.now());
let app: TestApp;
let pg: postgres.Sql;
beforeAll(async () => {
  app = await startApp({ clock });
  if (app.config.databaseUrl) pg = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await pg?.end({ timeout: 1 });
  await app?.close();
});

// PGlite runs one transaction at a time, so nothing interleaves there; on PostgreSQL the test holds
// the session row as a logout in another tab does and waits on pg_stat_activity.
describeApp('a key registration that waits on a session end', () => {
  it.skipIf(MODE === 'embedded')(
    'stores no key for a session that ended while the registration waited (spec 2.9: removed when the session ends)',
    async () => {
      const who = await login(app);
      const sessionId = await sessionIdOf(app, who.client);
      const publicKey = publicKeyToBase64(generateKeyPair().publicKey);
      // What a logout of this session (another tab with the same cookie) writes, held open: the
      // session row ended, its keys removed (none yet).
      const logout = hold(pg, async (tx) => {
        await tx`update sessions set ended_at = now(), end_reason = 'logout' where id = ${sessionId}`;
        await tx`delete from session_keys where session_id = ${sessionId}`;
      });
      await logout.ready;
      // The registration passed its guard (the session was live) and waits on the session row.
      const reg = who.client.post('/v1/portal/keys', { public_key: publicKey });
      await Promise.race([reg, lockWaiters(pg, 1)]);
      await logout.end();
      const answer = await reg;
      expect(answer.status).toBe(401);
      expect(answer.body.code).toBe('ERR_UNAUTHENTICATED');
      const rows = await pg<
        { n: number }[]
      >`select count(*)::int as n from session_keys where session_id = ${sessionId}`;
      const held = await pg<
        { n: number }[]
      >`select count(*)::int as n from session_keys where public_key = ${publicKey}`;
      // The ended session holds no key row, nor reserves the key for 30 days (unique index).
      expect({ keyRowsOfEndedSession: rows[0]?.n, rowsHoldingKey: held[0]?.n }).toEqual({
        keyRowsOfEndedSession: 0,
        rowsHoldingKey: 0,
      });
    },
  );
});

/** Sets the session's expiry `ms` from now on the app's clock. */
async function expireIn(sessionId: number, ms: number): Promise<void> {
  const expiresAt = new Date(clock.now().getTime() + ms).toISOString();
  await pg`update sessions set expires_at = ${expiresAt} where id = ${sessionId}`;
}

// docs/api.md Keys: a registration whose session ends while it runs answers 401 and stores nothing;
// its expiry too. PostgreSQL re-checks a locked row's WHERE after the wait with the values the
// statement was given, so a time read before the wait let a session that expired meanwhile through.
describeApp('a key registration that waits for its session row past the session expiry (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')('answers 401 ERR_UNAUTHENTICATED and stores no key', async () => {
    const who = await login(app);
    const sessionId = await sessionIdOf(app, who.client);
    const publicKey = publicKeyToBase64(generateKeyPair().publicKey);
    // The session expires in 5 s; 10 s pass while another node's transaction holds its row.
    await expireIn(sessionId, 5_000);
    const res = await whileHeldAdvancing(
      pg,
      `select id from sessions where id = ${sessionId} for no key update`,
      clock,
      10_000,
      () => who.client.post('/v1/portal/keys', { public_key: publicKey }),
    );
    const [row] = await pg<
      { n: number }[]
    >`select count(*)::int as n from session_keys where session_id = ${sessionId}`;
    expect({ status: res.status, code: res.body?.code ?? res.body, keyRows: row?.n }).toEqual({
      status: 401,
      code: 'ERR_UNAUTHENTICATED',
      keyRows: 0,
    });
  });
});

// docs/api.md Keys: a share naming a session not in the current key ring (one whose expiry passed
// before the sweep ended it) is refused whole. The ring is read under the chat's row: as of a time
// read before the share waited for that row, a session that expired meanwhile was still in it.
describeApp('a share that waits for the chat row past a recipient session expiry (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')('refuses it whole (409 ERR_KEY_RING_CHANGED), storing nothing', async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    // A second keyed session of the guest (no socket): in the ring, lacking an envelope.
    const late = await login(app, { platformUserId: guest.platformUserId });
    const registered = await late.client.post('/v1/portal/keys', {
      public_key: publicKeyToBase64(generateKeyPair().publicKey),
    });
    expect(registered.status).toBe(200);
    const lateId = await sessionIdOf(app, late.client);
    const ring = (await owner.client.get(`/v1/portal/chats/${chatId}/keys`)).body.key_ring;
    expect(Object.keys(ring[String(guest.user.id)] ?? {})).toContain(String(lateId));
    // It expires in 5 s; 10 s pass while another node's transaction (a kick, a join, another share)
    // holds the chat row.
    await expireIn(lateId, 5_000);
    const res = await whileHeldAdvancing(
      pg,
      `select id from chats where id = ${chatId} for update`,
      clock,
      10_000,
      () =>
        owner.client.post(`/v1/portal/chats/${chatId}/keys/share`, {
          epoch,
          envelopes: [{ session_id: lateId, wrapped: Buffer.alloc(104, 9).toString('base64') }],
        }),
    );
    const [row] = await pg<{ n: number }[]>`
      select count(*)::int as n from key_envelopes
      where chat_id = ${chatId} and epoch = ${epoch} and recipient_session_id = ${lateId}`;
    expect({ status: res.status, code: res.body?.code ?? res.body, storedForExpired: row?.n }).toEqual({
      status: 409,
      code: 'ERR_KEY_RING_CHANGED',
      storedForExpired: 0,
    });
  });
});

const ADVISORY = 4_242_017;

/**
 * Runs `write` (a key registration of `sessionId`) with a slow commit: a deferred constraint
 * trigger makes it wait at COMMIT, after all its statements (its read of the user's chats
 * included), on an advisory lock the test holds, as a busy database would. `meanwhile` (a join by
 * the same user) runs then; it may wait for the registration (then the gate opens once it does).
 */
async function withSlowKeyCommit<T, U>(sessionId: number, write: () => Promise<T>, meanwhile: () => Promise<U>) {
  await pg.unsafe(
    `create or replace function test_slow_key_commit() returns trigger language plpgsql as $$
     begin perform pg_advisory_xact_lock(${ADVISORY}); return null; end $$`,
  );
  await pg.unsafe(
    `create constraint trigger test_slow_key_commit after insert or update on session_keys
     deferrable initially deferred for each row when (new.session_id = ${sessionId})
     execute function test_slow_key_commit()`,
  );
  const gate = hold(pg, (tx) => tx`select pg_advisory_xact_lock(${ADVISORY})`);
  await gate.ready;
  const written = write();
  let other: Promise<U> | undefined;
  try {
    await lockWaitersOr(pg, 1, written);
    other = meanwhile();
    await lockWaitersOr(pg, 2, other);
  } finally {
    await gate.end();
    await pg.unsafe('drop trigger if exists test_slow_key_commit on session_keys');
  }
  return [await written, await other] as const;
}

/** The `portal:key_added` of `sessionId` that `socket` heard in the chat, up to `upTo`'s (awaited). */
async function keysAnnounced(socket: TestSocket, chatId: number, sessionId: number, upTo: number) {
  // A join announces the ring of its user in session order, from one node: once the later
  // session's event is in, so is any of the earlier one.
  await socket.next('portal:key_added', (p) => p.chat_id === chatId && p.session_id === upTo);
  return socket.received
    .filter((r) => r.event === 'portal:key_added' && r.payload.chat_id === chatId && r.payload.session_id === sessionId)
    .map((r) => r.payload.public_key as string);
}

// docs/api.md "Keys": a new or replaced key reaches every chat of the user. A join that makes the
// user a member of a chat while a key registration of another session of theirs commits must not
// fall between the two: the registration reads the user's chats before the join commits, and the
// join announces the ring it reads after its own commit. Only PostgreSQL interleaves them.
describeApp('a key registration racing a join by the same user (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')(
    'a replaced key: the joined chat hears only the new key, and the holder’s envelope opens with it',
    async () => {
      const { owner, chatId, chatKey, epoch } = await keyedChat(app);
      // User U: session S2 (in no chat) holds K1; session S1 of U is about to join the chat.
      const s2 = await login(app);
      const s2Id = await sessionIdOf(app, s2.client);
      const k1 = publicKeyToBase64(generateKeyPair().publicKey);
      expect((await s2.client.post('/v1/portal/keys', { public_key: k1 })).status).toBe(200);
      const s1 = await member(app, { platformUserId: s2.platformUserId });
      expect(s1.user.id).toBe(s2.user.id);
      expect(s2Id).toBeLessThan(s1.sessionId);

      const k2 = generateKeyPair();
      const [replaced, joined] = await withSlowKeyCommit(
        s2Id,
        () => s2.client.post('/v1/portal/keys', { public_key: publicKeyToBase64(k2.publicKey) }),
        () => join(s1, { chat_id: chatId }),
      );
      expect(replaced.body).toEqual({ status: 'registered', session_id: s2Id });
      expect(joined.ok).toBe(true);
      expect(joined.key_ring[String(s2.user.id)]?.[String(s2Id)]).toBe(publicKeyToBase64(k2.publicKey));
      // The holder was told of S2 with its new key only (never the replaced one).
      expect(await keysAnnounced(owner.socket, chatId, s2Id, s1.sessionId)).toEqual([publicKeyToBase64(k2.publicKey)]);

      // What a holder does on portal:key_added (the SDK's keyAdded): wrap the current key to it.
      const wrapped = wrapChatKey({
        chatKey,
        recipientPublicKey: k2.publicKey,
        chatId,
        epoch: joined.epoch,
        recipientSessionId: s2Id,
      });
      const topUp = await owner.client.post(`/v1/portal/chats/${chatId}/keys/share`, {
        epoch: joined.epoch,
        envelopes: [{ session_id: s2Id, wrapped }],
      });
      expect({ epoch: joined.epoch, topUp: topUp.status }).toEqual({ epoch, topUp: 200 });
      const state = await s2.client.get(`/v1/portal/chats/${chatId}/keys`);
      const opened = unwrapChatKey({
        envelope: state.body.envelope,
        recipientPrivateKey: k2.privateKey,
        chatId,
        epoch: state.body.epoch,
        recipientSessionId: s2Id,
      });
      expect(Buffer.from(opened).equals(Buffer.from(chatKey))).toBe(true);
    },
  );

  it.skipIf(MODE === 'embedded')('a first key: the joined chat hears of it (portal:key_added)', async () => {
    const { owner, chatId } = await keyedChat(app);
    // User U: session S2 has no key yet; session S1 of U is about to join the chat.
    const s2 = await login(app);
    const s2Id = await sessionIdOf(app, s2.client);
    const s1 = await member(app, { platformUserId: s2.platformUserId });
    const k1 = publicKeyToBase64(generateKeyPair().publicKey);
    const [registered, joined] = await withSlowKeyCommit(
      s2Id,
      () => s2.client.post('/v1/portal/keys', { public_key: k1 }),
      () => join(s1, { chat_id: chatId }),
    );
    expect(registered.body).toEqual({ status: 'registered', session_id: s2Id });
    expect(joined.ok).toBe(true);
    // The holder hears of S2's key (from the join's ring or the registration, whichever came last).
    const heard = await owner.socket.next('portal:key_added', (p) => p.chat_id === chatId && p.session_id === s2Id);
    expect(heard.public_key).toBe(k1);
    const ring = (await owner.client.get(`/v1/portal/chats/${chatId}/keys`)).body.key_ring;
    expect(ring[String(s2.user.id)]?.[String(s2Id)]).toBe(k1);
  });
});

// docs/api.md Moderation, lock order: the user's chat rows, then the user's row, then session rows.
// A key replacement and a login that evicts a keyed session both raise the user's chats' epochs:
// the replacement took its session row, the chats, then the user's row; the login the user's row,
// then (at the eviction) the chats, so the two deadlocked (PostgreSQL's 1 s check, then one ran
// again). The test holds the login at its new session's insert (a trigger it gates), with what it
// has locked by then, while the replacement starts. PGlite runs one transaction at a time.
describeApp('a key replacement racing a login that evicts a keyed session (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')('both answer 200 without a deadlock; the new key stands', async () => {
    const { owner: oldest, chatId } = await keyedChat(app);
    const sessions = [oldest];
    for (let i = 1; i < Limits.MAX_SESSIONS_PER_USER; i++)
      sessions.push(await member(app, { platformUserId: oldest.platformUserId }));
    const replacing = sessions[2] as Member;
    const next = await loginUpToVerify(app, oldest.platformUserId);
    const newKey = publicKeyToBase64(generateKeyPair().publicKey);
    const before = deadlockVictimRuns();
    const gate = await gateInserts(pg, 'sessions', `new.user_id = ${oldest.user.id}`);
    let answers: Awaited<ReturnType<typeof next.verify>>[];
    try {
      const verify = next.verify();
      await lockWaiters(pg, 1);
      const reg = replacing.client.post('/v1/portal/keys', { public_key: newKey });
      await lockWaiters(pg, 2);
      await gate.open();
      answers = await Promise.all([verify, reg]);
    } finally {
      await gate.close();
    }
    expect({
      login: answers[0]?.status,
      registration: answers[1]?.body,
      deadlocks: deadlockVictimRuns() - before,
    }).toEqual({
      login: 200,
      registration: { status: 'registered', session_id: replacing.sessionId },
      deadlocks: 0,
    });
    const keyOf = async (id: number) =>
      (await pg<{ k: string }[]>`select public_key as k from session_keys where session_id = ${id}`)[0]?.k ?? null;
    const [evicted] = await pg<
      { r: string | null }[]
    >`select end_reason as r from sessions where id = ${oldest.sessionId}`;
    expect({
      evicted: evicted?.r,
      evictedKey: await keyOf(oldest.sessionId),
      replaced: await keyOf(replacing.sessionId),
    }).toEqual({
      evicted: 'evicted',
      evictedKey: null,
      replaced: newKey,
    });
    const ring = (await replacing.client.get(`/v1/portal/chats/${chatId}/keys`)).body.key_ring;
    expect(ring[String(oldest.user.id)]?.[String(replacing.sessionId)]).toBe(newKey);
  });
});
