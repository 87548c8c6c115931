import { Limits } from '@parlor/protocol';
import { and, eq } from 'drizzle-orm';
import { Redis } from 'ioredis';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { chatActivity } from '../src/platform/db/schema.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyedChat, member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows } from './support/faults.js';
import { login, operator, setLevel } from './support/flows.js';
import {
  gateInserts,
  hold,
  lockWaiters,
  lockWaitersOr,
  racingUserRow,
  whileHeldAdvancing,
} from './support/pg-locks.js';
import { closeAllSockets, connectSocket, disconnected } from './support/sockets.js';
import { eventually } from './support/vm-browser.js';

let app: TestApp;
/** A connection of the test's own to PostgreSQL (cluster project), to fix interleavings with locks. */
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

const create = (client: { post: (p: string, b: unknown) => Promise<any> }, type = 'public', name = 'A chat') =>
  client.post('/v1/portal/chats/create', { name, type });

/** A matched direct chat of two users, made as matchmaking makes it. */
async function directChat(userIds: number[]): Promise<number> {
  const made = await app.services.chats.createDirect(userIds, ['chats']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  return made.chat.id;
}

describeApp('POST /v1/portal/chats/create', () => {
  it('refuses Basic users with 403 ERR_CHAT_CREATE_FORBIDDEN', async () => {
    const { client } = await login(app);
    const res = await create(client);
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('ERR_CHAT_CREATE_FORBIDDEN');
  });

  it('gives a Premium user 1 slot: the second chat answers 409 ERR_CHAT_SLOT_LIMIT', async () => {
    const { client, user } = await login(app);
    await app.database.db.execute(
      `update users set subscription_tier = 2, subscription_expires_at = now() + interval '7 days' where id = ${user.id}` as never,
    );
    const first = await create(client, 'private', 'Mine');
    expect(first.status).toBe(200);
    expect(first.body.chat).toMatchObject({
      type: 'private',
      name: 'Mine',
      owner_id: user.id,
      epoch: 1,
      member_count: 1,
      archived: false,
    });
    const second = await create(client);
    expect(second.status).toBe(409);
    expect(second.body.code).toBe('ERR_CHAT_SLOT_LIMIT');
    // Deleting frees the slot.
    expect((await client.post(`/v1/portal/chats/${first.body.chat.id}/delete`, {})).status).toBe(200);
    expect((await create(client)).status).toBe(200);
  });

  it(`gives an Admin ${Limits.CHAT_SLOTS_ADMIN} slots and an Owner more`, async () => {
    const admin = await login(app);
    await setLevel(app, admin.user.id, 2);
    const results = await Promise.all(Array.from({ length: Limits.CHAT_SLOTS_ADMIN + 1 }, () => create(admin.client)));
    expect(results.filter((r) => r.status === 200)).toHaveLength(Limits.CHAT_SLOTS_ADMIN);
    expect(results.filter((r) => r.status === 409)).toHaveLength(1);
    const owner = await login(app);
    await setLevel(app, owner.user.id, 3);
    for (let i = 0; i < Limits.CHAT_SLOTS_ADMIN + 1; i++) expect((await create(owner.client)).status).toBe(200);
  });

  it('gives Trial and Lifetime 1 slot, none to a lapsed Premium or a Moderator without Premium, 1 to a Moderator with Premium and 5 to an Admin with Premium', async () => {
    const tier = (id: number, t: number, expires: string) =>
      app.database.db.execute(
        `update users set subscription_tier = ${t}, subscription_expires_at = ${expires} where id = ${id}` as never,
      );
    const trial = await login(app);
    await tier(trial.user.id, 1, `now() + interval '7 days'`);
    expect((await create(trial.client)).status).toBe(200);
    expect((await create(trial.client)).body.code).toBe('ERR_CHAT_SLOT_LIMIT');
    const lifetime = await login(app);
    await tier(lifetime.user.id, 3, 'null');
    expect((await create(lifetime.client)).status).toBe(200);
    expect((await create(lifetime.client)).body.code).toBe('ERR_CHAT_SLOT_LIMIT');
    // Premium past its expiry, the downgrade sweep not run yet: Basic already.
    const lapsed = await login(app);
    await tier(lapsed.user.id, 2, `now() - interval '1 second'`);
    expect((await create(lapsed.client)).body.code).toBe('ERR_CHAT_CREATE_FORBIDDEN');
    // A Moderator's level gives no slot of its own (spec 2.11); Premium gives it one.
    const mod = await login(app);
    await setLevel(app, mod.user.id, 1);
    expect((await create(mod.client)).body.code).toBe('ERR_CHAT_CREATE_FORBIDDEN');
    await tier(mod.user.id, 2, `now() + interval '7 days'`);
    expect((await create(mod.client)).status).toBe(200);
    expect((await create(mod.client)).body.code).toBe('ERR_CHAT_SLOT_LIMIT');
    // An Admin's slots do not add up with Premium's.
    const admin = await login(app);
    await setLevel(app, admin.user.id, 2);
    await tier(admin.user.id, 2, `now() + interval '7 days'`);
    for (let i = 0; i < Limits.CHAT_SLOTS_ADMIN; i++) expect((await create(admin.client)).status).toBe(200);
    expect((await create(admin.client)).body.code).toBe('ERR_CHAT_SLOT_LIMIT');
  });

  it('validates name and type', async () => {
    const admin = await login(app);
    await setLevel(app, admin.user.id, 2);
    for (const body of [
      { name: '', type: 'public' },
      { name: '   ', type: 'public' },
      { name: 'x'.repeat(65), type: 'public' },
      { name: 'x', type: 'direct' },
      { name: 'x' },
    ]) {
      const res = await admin.client.post('/v1/portal/chats/create', body);
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('ERR_VALIDATION');
    }
    expect((await create(admin.client, 'public', 'x'.repeat(64))).status).toBe(200);
  });

  // The creation waits in its transaction on its slot lock (held by the test) while an admin
  // deletes the creator: it must find its account gone, not hit the chats/chat_members foreign keys.
  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: a creator deleted while the creation waits answers 401 ERR_UNAUTHENTICATED and creates nothing',
    async () => {
      const creator = await login(app);
      await setLevel(app, creator.user.id, 3);
      const slot = hold(pg, (tx) => tx`select pg_advisory_xact_lock(7243, ${creator.user.id})`);
      await slot.ready;
      const pending = create(creator.client, 'public', 'Orphan');
      await lockWaiters(pg, 1);
      expect((await operator(app).post(`/v1/admin/users/${creator.user.id}/delete`, {})).status).toBe(200);
      await slot.end();
      const res = await pending;
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 401, code: 'ERR_UNAUTHENTICATED' });
      expect((await pg`select id from chats where name = 'Orphan'`).length).toBe(0);
    },
  );

  // The answer is the chat as the creation wrote it. The creation is stopped at its last insert
  // (holding its new membership, so a lock of chat_members the test asks for queues behind it and is
  // granted at its commit); a read of the chat after the commit would then wait while the test
  // deletes the chat, and answer 404 for a chat that was made.
  it.skipIf(MODE === 'embedded')(
    'on PostgreSQL: a creation whose chat is deleted right after its commit answers 200 with the chat it made',
    async () => {
      const creator = await login(app);
      await setLevel(app, creator.user.id, 3);
      const gate = await gateInserts(pg, 'chat_activity', `new.user_id = ${creator.user.id}`);
      let members: ReturnType<typeof hold> | undefined;
      try {
        const pending = create(creator.client, 'public', 'Short-lived');
        await lockWaiters(pg, 1);
        members = hold(pg, (tx) => tx`lock table chat_members in access exclusive mode`);
        await lockWaiters(pg, 2);
        await gate.open();
        await members.ready;
        // Committed; anything that reads the chat's members from now on waits for `members`.
        await lockWaitersOr(pg, 1, pending);
        await pg`update chats set deleted_at = now() where owner_user_id = ${creator.user.id}`;
        await members.end();
        const res = await pending;
        expect({ status: res.status, code: res.body.code }).toEqual({ status: 200, code: undefined });
        expect(res.body.chat).toMatchObject({ name: 'Short-lived', owner_id: creator.user.id, member_count: 1 });
      } finally {
        await members?.end();
        await gate.close();
      }
    },
  );
});

/** The chats a user owns, as stored. */
const ownedBy = (on: TestApp, userId: number) =>
  countRows(on, `select count(*) as n from chats where owner_user_id = ${userId}`);

describeApp('POST /v1/portal/chats/create: the slots follow the creator as stored', () => {
  // An app of its own whose time stands still, so no cached session reaches its TTL: only the
  // stored row can tell the creation about a change this node has not heard of.
  let timed: TestApp;
  const clock = new FakeClock(Date.now());
  beforeAll(async () => {
    timed = await startApp({ clock });
  });
  afterAll(async () => {
    await timed?.close();
  });

  it('answers 403 ERR_CHAT_CREATE_FORBIDDEN to an Admin demoted to Basic by a write the node’s session cache has not heard of, and creates nothing', async () => {
    const admin = await login(timed);
    await setLevel(timed, admin.user.id, 2);
    expect((await admin.client.get('/v1/users/me')).body.user.permission_level).toBe(2);
    // Written behind the stores' back (as another node's commit whose invalidation is on its way).
    await timed.database.db.execute(`update users set permission_level = 0 where id = ${admin.user.id}` as never);
    const res = await create(admin.client, 'public', 'Demoted');
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'ERR_CHAT_CREATE_FORBIDDEN' });
    expect(await ownedBy(timed, admin.user.id)).toBe(0);
  });

  it('answers 403 ERR_BANNED and 403 ERR_TIMED_OUT to a Premium user Banned or timed out by a write the node’s session cache has not heard of, and creates nothing', async () => {
    const anHourOn = new Date(clock.now().getTime() + 3_600_000).toISOString();
    const answers = [];
    for (const state of ['state = 2', `state = 1, state_expires_at = '${anHourOn}'`]) {
      const who = await login(timed);
      await timed.database.db.execute(
        `update users set subscription_tier = 2, subscription_expires_at = now() + interval '7 days' where id = ${who.user.id}` as never,
      );
      expect((await who.client.get('/v1/users/me')).status).toBe(200);
      // Written behind the stores' back (as another node's commit whose invalidation is on its way).
      await timed.database.db.execute(`update users set ${state} where id = ${who.user.id}` as never);
      expect((await who.client.get('/v1/users/me')).status).toBe(200);
      const res = await create(who.client, 'private', 'Restricted');
      answers.push({ status: res.status, code: res.body.code, owned: await ownedBy(timed, who.user.id) });
    }
    expect(answers).toEqual([
      { status: 403, code: 'ERR_BANNED', owned: 0 },
      { status: 403, code: 'ERR_TIMED_OUT', owned: 0 },
    ]);
  });
});

// PostgreSQL: the creation meets a change of the creator that another transaction (a revoke or a
// demotion on another node) has not committed yet; it must decide its slots on the committed row.
describeApp('POST /v1/portal/chats/create racing a change of the creator (PostgreSQL)', () => {
  const racing = <T>(userId: number, work: string, run: () => Promise<T>) => racingUserRow(pg, userId, work, run);

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_CHAT_CREATE_FORBIDDEN when a Premium revoke commits while the creation waits for the creator’s row, and creates nothing',
    async () => {
      const who = await login(app);
      const grant = await operator(app).post('/v1/admin/subscriptions/grant', {
        user_id: who.user.id,
        tier: 'PREMIUM',
        duration_days: 5,
      });
      expect(grant.status).toBe(200);
      const res = await racing(
        who.user.id,
        `update users set subscription_tier = 0, subscription_expires_at = null where id = ${who.user.id}`,
        () => create(who.client, 'public', 'Revoked'),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'ERR_CHAT_CREATE_FORBIDDEN' });
      expect(await ownedBy(app, who.user.id)).toBe(0);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_CHAT_CREATE_FORBIDDEN when a demotion to Basic commits while the creation waits for the creator’s row, and creates nothing',
    async () => {
      const admin = await login(app);
      await setLevel(app, admin.user.id, 2);
      const res = await racing(admin.user.id, `update users set permission_level = 0 where id = ${admin.user.id}`, () =>
        create(admin.client, 'public', 'Demoted'),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'ERR_CHAT_CREATE_FORBIDDEN' });
      expect(await ownedBy(app, admin.user.id)).toBe(0);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_BANNED when a ban commits while the creation waits for the creator’s row, and creates nothing',
    async () => {
      const who = await login(app);
      await premium(who.user.id);
      const res = await racing(who.user.id, `update users set state = 2 where id = ${who.user.id}`, () =>
        create(who.client, 'public', 'Banned'),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'ERR_BANNED' });
      expect(await ownedBy(app, who.user.id)).toBe(0);
    },
  );
});

// PostgreSQL, fake clock: a deadline (the creator's Premium, a member's invite) passes while the
// write waits for a row another node's transaction holds; the write decides, and stamps what it
// writes, at the time it holds the row, never at the time the request began (docs/api.md, Chats).
describeApp('chat writes waiting for a row while a deadline passes (PostgreSQL, fake clock)', () => {
  let timed: TestApp;
  let timedPg: postgres.Sql | undefined;
  const clock = new FakeClock(Date.now());
  beforeAll(async () => {
    // Its tests need a transaction of the test's own beside the app's: PostgreSQL only.
    if (MODE !== 'cluster') return;
    timed = await startApp({ clock });
    if (timed.config.databaseUrl) timedPg = postgres(timed.config.databaseUrl, { max: 3, onnotice: () => {} });
  });
  afterAll(async () => {
    await timedPg?.end({ timeout: 1 });
    await timed?.close();
  });

  const whileWaitingAdvance = <T>(lock: string, advanceMs: number, run: () => Promise<T>) => {
    if (!timedPg) throw new Error('PostgreSQL only');
    return whileHeldAdvancing(timedPg, lock, clock, advanceMs, run);
  };
  const rowOf = (table: string, id: number) => `select id from ${table} where id = ${id} for update`;
  const at = async (query: string) => {
    const rows = await (timedPg as postgres.Sql).unsafe(query);
    return rows.map((r) => (r.at as Date).toISOString());
  };

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_CHAT_CREATE_FORBIDDEN when the creator’s Premium expires while the creation waits for its row, and creates nothing',
    async () => {
      const who = await login(timed);
      const grant = await operator(timed).post('/v1/admin/subscriptions/grant', {
        user_id: who.user.id,
        tier: 'PREMIUM',
        duration_days: 1,
      });
      expect(grant.status).toBe(200);
      clock.advance(24 * 3600 * 1000 - 5_000);
      const res = await whileWaitingAdvance(rowOf('users', who.user.id), 10_000, () =>
        create(who.client, 'public', 'Late'),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'ERR_CHAT_CREATE_FORBIDDEN' });
      expect(await ownedBy(timed, who.user.id)).toBe(0);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'making a chat private revokes nothing of a member’s invite that expired while the update waited for the chat’s row, and stamps the update then',
    async () => {
      const { owner, chatId } = await keyedChat(timed);
      const plain = await member(timed);
      expect((await join(plain, { chat_id: chatId })).ok).toBe(true);
      const made = await plain.client.post(`/v1/portal/chats/${chatId}/invites/create`, { expires_in_seconds: 60 });
      expect(made.status, JSON.stringify(made.body)).toBe(200);
      clock.advance(55_000);
      const res = await whileWaitingAdvance(rowOf('chats', chatId), 10_000, () =>
        owner.client.post(`/v1/portal/chats/${chatId}/config/update`, { type: 'private' }),
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      // It ended at its expiry, before the chat was made private: no longer live, so not revoked.
      const revoked = `select revoked_at as at from chat_invites where code = '${made.body.invite.code}' and revoked_at is not null`;
      expect(await at(revoked)).toEqual([]);
      expect(res.body.chat).toMatchObject({ type: 'private', updated_at: clock.now().toISOString() });
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'a deletion that waits for the chat’s row stamps the deletion and its members’ leaving at the time it holds the row',
    async () => {
      const { owner, chatId } = await keyedChat(timed);
      const res = await whileWaitingAdvance(rowOf('chats', chatId), 10_000, () =>
        owner.client.post(`/v1/portal/chats/${chatId}/delete`, {}),
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const now = clock.now().toISOString();
      expect(await at(`select deleted_at as at from chats where id = ${chatId}`)).toEqual([now]);
      expect(await at(`select left_at as at from chat_members where chat_id = ${chatId}`)).toEqual([now]);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'an official chat’s creation that waits for its Owner’s row is stamped at the time it holds the row',
    async () => {
      const actor = await login(timed);
      await setLevel(timed, actor.user.id, 3);
      const res = await whileWaitingAdvance(rowOf('users', actor.user.id), 10_000, () =>
        actor.client.post('/v1/admin/chats/create', { name: 'Stamped' }),
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.chat).toMatchObject({
        created_at: clock.now().toISOString(),
        updated_at: clock.now().toISOString(),
      });
    },
  );
});

describeApp('private chats, invites and membership history', () => {
  it('hides a private chat from non-members; an invite lets one in and is recorded', async () => {
    const { owner, chatId } = await keyedChat(app, 'private');
    const outsider = await member(app);
    const get = await outsider.client.get(`/v1/portal/chats/${chatId}`);
    expect(get.status).toBe(403);
    expect(get.body.code).toBe('ERR_CANNOT_BROWSE_PRIVATE');
    const denied = await join(outsider, { chat_id: chatId });
    expect(denied).toEqual({ ok: false, code: 'ERR_CANNOT_BROWSE_PRIVATE', message: expect.any(String) });
    const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, { max_uses: 1 });
    expect(invite.status).toBe(200);
    const code: string = invite.body.invite.code;
    const joined = await join(outsider, { invite: code });
    expect(joined).toMatchObject({ ok: true, chat: { id: chatId, member_count: 2 }, epoch: 1 });
    expect(
      Object.keys(joined.key_ring)
        .map(Number)
        .sort((a, b) => a - b),
    ).toEqual([owner.user.id, outsider.user.id].sort((a, b) => a - b));
    // The invite is used up.
    const third = await member(app);
    expect(await join(third, { invite: code })).toMatchObject({ ok: false, code: 'ERR_INVITE_NOT_FOUND' });
    const activity = await owner.client.get(`/v1/portal/chats/${chatId}/activity`);
    expect(activity.body.activity.map((a: any) => [a.user_id, a.action, a.method, a.invite_code])).toEqual([
      [outsider.user.id, 'join', 'invite', code],
      [owner.user.id, 'join', 'direct', null],
    ]);
    expect((await outsider.client.get(`/v1/portal/chats/${chatId}/activity`)).status).toBe(403);
  });

  it('lists membership history back 90 days by the clock, whether or not the sweep has deleted older entries', async () => {
    const owner = await member(app, { level: 2 });
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'History', type: 'public' });
    const chatId: number = created.body.chat.id;
    const other = await member(app);
    expect(await join(other, { chat_id: chatId })).toMatchObject({ ok: true });
    const list = async () =>
      (await owner.client.get(`/v1/portal/chats/${chatId}/activity`)).body.activity.map((a: any) => a.user_id);
    expect(await list()).toEqual([other.user.id, owner.user.id]);
    // The owner's join, written 90 days and a second ago; the other's, 90 days less a minute ago.
    const ago = (ms: number) => new Date(Date.now() - ms);
    const DAYS_90 = 90 * 24 * 60 * 60 * 1000;
    await app.database.db
      .update(chatActivity)
      .set({ createdAt: ago(DAYS_90 + 1000) })
      .where(and(eq(chatActivity.chatId, chatId), eq(chatActivity.userId, owner.user.id)));
    await app.database.db
      .update(chatActivity)
      .set({ createdAt: ago(DAYS_90 - 60_000) })
      .where(and(eq(chatActivity.chatId, chatId), eq(chatActivity.userId, other.user.id)));
    expect(await list()).toEqual([other.user.id]);
  });

  it('lists, revokes and validates invites', async () => {
    const { owner, chatId } = await keyedChat(app, 'private');
    const a = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, { expires_in_seconds: 3600 });
    expect(a.body.invite.expires_at).toEqual(expect.any(String));
    const list = await owner.client.get(`/v1/portal/chats/${chatId}/invites`);
    expect(list.body.invites.map((i: any) => i.code)).toEqual([a.body.invite.code]);
    expect(
      (await owner.client.post(`/v1/portal/chats/${chatId}/invites/${a.body.invite.code}/delete`, {})).body,
    ).toEqual({ ok: true });
    expect((await owner.client.get(`/v1/portal/chats/${chatId}/invites`)).body.invites).toEqual([]);
    const outsider = await member(app);
    expect((await join(outsider, { invite: a.body.invite.code })).code).toBe('ERR_INVITE_NOT_FOUND');
    for (const body of [
      { max_uses: 0 },
      { max_uses: Limits.INVITE_MAX_USES + 1 },
      { expires_in_seconds: 59 },
      { other: 1 },
    ]) {
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, body)).status).toBe(400);
    }
    expect((await outsider.client.post(`/v1/portal/chats/${chatId}/invites/create`, {})).status).toBe(403);
  });

  it('takes invites to an official chat from Admins and above, not from its members', async () => {
    const made = await operator(app).post('/v1/admin/chats/create', { name: 'Official invites' });
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    const chatId: number = made.body.chat.id;
    const plain = await member(app);
    expect((await join(plain, { chat_id: chatId })).ok).toBe(true);
    const refused = await plain.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('ERR_FORBIDDEN');
    const admin = await member(app, { level: 2 });
    const invite = await admin.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
    expect(invite.status, JSON.stringify(invite.body)).toBe(200);
    expect((await admin.client.get(`/v1/portal/chats/${chatId}/invites`)).body.invites).toHaveLength(1);
  });

  it('lists only live invites: a used-up one is neither listed nor deletable', async () => {
    const { owner, chatId } = await keyedChat(app, 'private');
    const once = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, { max_uses: 1 })).body.invite;
    const twice = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, { max_uses: 2 })).body.invite;
    const guest = await member(app);
    expect((await join(guest, { invite: once.code })).ok).toBe(true);
    expect((await join(await member(app), { invite: twice.code })).ok).toBe(true);
    // `once` is used up (a join refuses it); `twice` has a use left, with its count.
    const list = await owner.client.get(`/v1/portal/chats/${chatId}/invites`);
    expect(list.body.invites.map((i: any) => [i.code, i.uses])).toEqual([[twice.code, 1]]);
    const del = await owner.client.post(`/v1/portal/chats/${chatId}/invites/${once.code}/delete`, {});
    expect([del.status, del.body.code]).toEqual([404, 'ERR_INVITE_NOT_FOUND']);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/invites/${twice.code}/delete`, {})).body).toEqual({
      ok: true,
    });
    expect((await owner.client.get(`/v1/portal/chats/${chatId}/invites`)).body.invites).toEqual([]);
  });

  it('answers ok to the one delete that revokes an invite; deletes racing it answer 404 ERR_INVITE_NOT_FOUND', async () => {
    const { owner, chatId } = await keyedChat(app, 'private');
    for (let round = 0; round < 5; round++) {
      const code = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {})).body.invite.code;
      const answers = await Promise.all(
        [0, 1, 2].map(() => owner.client.post(`/v1/portal/chats/${chatId}/invites/${code}/delete`, {})),
      );
      expect(answers.map((a) => [a.status, a.body.code ?? null]).sort()).toEqual([
        [200, null],
        [404, 'ERR_INVITE_NOT_FOUND'],
        [404, 'ERR_INVITE_NOT_FOUND'],
      ]);
    }
  });

  it('spends no use of an invite on a member joining again by it', async () => {
    const { owner, chatId } = await keyedChat(app, 'private');
    const invite = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, { max_uses: 2 })).body.invite;
    const guest = await member(app);
    expect((await join(guest, { invite: invite.code })).ok).toBe(true);
    expect((await join(guest, { invite: invite.code })).ok).toBe(true);
    const list = await owner.client.get(`/v1/portal/chats/${chatId}/invites`);
    expect(list.body.invites.map((i: { uses: number }) => i.uses)).toEqual([1]);
  });

  it('pages the membership history newest first, and refuses bad paging with 400 ERR_VALIDATION', async () => {
    const { owner, chatId } = await keyedChat(app);
    const guests = [await member(app), await member(app), await member(app)];
    for (const g of guests) expect((await join(g, { chat_id: chatId })).ok).toBe(true);
    expect(await guests[0]?.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    const page = (q: string) => owner.client.get(`/v1/portal/chats/${chatId}/activity${q}`);
    const all: { id: number; action: string }[] = (await page('')).body.activity;
    expect(all.map((a) => a.action)).toEqual(['leave', 'join', 'join', 'join', 'join']);
    const first: { id: number }[] = (await page('?limit=2')).body.activity;
    const second: { id: number }[] = (await page('?limit=2&offset=2')).body.activity;
    expect([...first, ...second].map((a) => a.id)).toEqual(all.slice(0, 4).map((a) => a.id));
    // Numbers in plain decimal only (`02`, `0x2`, `2e0` name 2 to JavaScript).
    for (const q of [
      '?limit=0',
      '?limit=101',
      '?offset=-1',
      '?limit=x',
      '?foo=1',
      '?limit=1.5',
      '?limit=02',
      '?limit=0x2',
      '?limit=2e0',
    ]) {
      const res = await page(q);
      expect([q, res.status, res.body.code]).toEqual([q, 400, 'ERR_VALIDATION']);
    }
  });

  it('shows the history of private and direct chats to their owner and Admins only; Moderators read public chats', async () => {
    // A private chat of a plain user (Premium, for the slot), with a live invite used once.
    const owner = await member(app);
    await app.database.db.execute(
      `update users set subscription_tier = 2, subscription_expires_at = now() + interval '7 days' where id = ${owner.user.id}` as never,
    );
    const chatId: number = (await create(owner.client, 'private', 'Private')).body.chat.id;
    const code: string = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, { max_uses: 5 })).body
      .invite.code;
    const guest = await member(app);
    expect((await join(guest, { invite: code })).ok).toBe(true);
    const [mod, admin] = [await member(app, { level: 1 }), await member(app, { level: 2 })];
    const history = (m: { client: Client }, id: number) => m.client.get(`/v1/portal/chats/${id}/activity`);
    const refused = { status: 403, code: 'ERR_CANNOT_BROWSE_PRIVATE' };
    const answer = async (m: { client: Client }, id: number) => {
      const res = await history(m, id);
      return res.status === 200
        ? { status: 200, codes: res.body.activity.map((a: any) => a.invite_code) }
        : { status: res.status, code: res.body.code };
    };
    // Neither a Moderator nor a plain member reads it (its invite codes would let the Moderator in).
    expect(await answer(mod, chatId)).toEqual(refused);
    expect(await answer(guest, chatId)).toEqual(refused);
    expect(await join(mod, { chat_id: chatId })).toMatchObject({ ok: false, code: 'ERR_CANNOT_BROWSE_PRIVATE' });
    for (const reader of [owner, admin]) {
      expect(await answer(reader, chatId)).toEqual({ status: 200, codes: [code, null] });
    }
    // A direct chat (no owner): Admins only, its members and Moderators not.
    const [a, b] = [await member(app), await member(app)];
    const direct = await directChat([a.user.id, b.user.id]);
    expect(await answer(mod, direct)).toEqual(refused);
    expect(await answer(a, direct)).toEqual(refused);
    expect((await history(admin, direct)).status).toBe(200);
    // A public chat: Moderators read it as before; a plain member does not.
    const pub = await keyedChat(app);
    expect(await join(guest, { chat_id: pub.chatId })).toMatchObject({ ok: true });
    expect((await history(mod, pub.chatId)).status).toBe(200);
    expect((await history(guest, pub.chatId)).body.code).toBe('ERR_FORBIDDEN');
  });

  it('lists my chats and sends chat:list on connection', async () => {
    const { owner, chatId } = await keyedChat(app);
    const list = await owner.client.get('/v1/portal/chats');
    expect(list.body.chats.map((c: any) => c.id)).toContain(chatId);
    const again = await connectSocket(app.url, owner.client);
    const pushed = await again.next('chat:list');
    expect(pushed.chats.map((c: any) => c.id)).toContain(chatId);
    // The socket is told which login session it belongs to (the one its key registration named).
    expect(pushed.session_id).toBe(owner.sessionId);
  });

  it.skipIf(MODE !== 'cluster')(
    'sends chat:list and room:members to the socket alone, not through the cluster adapter',
    async () => {
      const { owner, chatId } = await keyedChat(app);
      const redis = new Redis(app.config.redisUrl as string);
      const stream = `${app.config.redisPrefix}socket.io`;
      try {
        // Another session of the owner's (a second tab of one session would announce no presence).
        const { client } = await login(app, { platformUserId: owner.platformUserId });
        const [last] = await redis.xrevrange(stream, '+', '-', 'COUNT', 1);
        const socket = await connectSocket(app.url, client);
        expect((await socket.next('chat:list')).chats.map((c: any) => c.id)).toContain(chatId);
        expect((await socket.emitWithAck('room:join', { chat_id: chatId })).ok).toBe(true);
        expect((await socket.next('room:members')).chat_id).toBe(chatId);
        // What went through the adapter's stream since: the presence delta for the chat's room
        // (every node must see it), and neither snapshot.
        const events = async () =>
          (await redis.xrange(stream, last ? `(${last[0]}` : '-', '+')).map(([, fields]) => fields.join(' '));
        await eventually(async () => (await events()).some((e) => e.includes('portal:presence')));
        const passed = await events();
        expect(passed.filter((e) => e.includes('chat:list') || e.includes('room:members'))).toEqual([]);
      } finally {
        redis.disconnect();
      }
    },
  );

  it('gives each of many sockets connecting at once its own user’s chat:list', async () => {
    const owners = await Promise.all([1, 2, 3, 4].map(() => keyedChat(app)));
    // All connect in one burst, so their lists are read together; each sees its own chat only.
    const sockets = await Promise.all(owners.map((o) => connectSocket(app.url, o.owner.client)));
    const lists = await Promise.all(sockets.map((s) => s.next('chat:list')));
    lists.forEach((list, i) => {
      const ids = list.chats.map((c: any) => c.id);
      expect(ids).toContain(owners[i]?.chatId);
      for (const [j, o] of owners.entries()) if (j !== i) expect(ids).not.toContain(o.chatId);
    });
  });

  it('lets the owner rename and delete; members get chat:updated and room:left', async () => {
    const { owner, chatId } = await keyedChat(app);
    const guest = await member(app);
    await join(guest, { chat_id: chatId });
    const renamed = await owner.client.post(`/v1/portal/chats/${chatId}/config/update`, { name: 'Renamed' });
    expect(renamed.body.chat.name).toBe('Renamed');
    expect((await guest.socket.next('chat:updated')).chat.name).toBe('Renamed');
    expect((await guest.client.post(`/v1/portal/chats/${chatId}/config/update`, { name: 'Mine now' })).status).toBe(
      403,
    );
    expect((await guest.client.post(`/v1/portal/chats/${chatId}/delete`, {})).status).toBe(403);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/delete`, {})).status).toBe(200);
    expect(await guest.socket.next('room:left')).toEqual({ chat_id: chatId, reason: 'deleted' });
    expect((await guest.client.get(`/v1/portal/chats/${chatId}`)).status).toBe(404);
  });
  it('tells every socket of every member of a deleted chat, in its room or not (another tab), once', async () => {
    const { owner, chatId } = await keyedChat(app);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    // Another tab of the member: connected, the chat in its list, its room not entered.
    const tab = await connectSocket(app.url, guest.client);
    expect((await tab.next('chat:list')).chats.map((c: any) => c.id)).toContain(chatId);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/delete`, {})).status).toBe(200);
    const deleted = { chat_id: chatId, reason: 'deleted' };
    expect(await guest.socket.next('room:left', (e) => e.chat_id === chatId)).toEqual(deleted);
    expect(await tab.next('room:left', (e) => e.chat_id === chatId)).toEqual(deleted);
    expect(await owner.socket.next('room:left', (e) => e.chat_id === chatId)).toEqual(deleted);
    // Once each socket has the room:left of a chat deleted later (events from one node arrive in
    // order), a second one of the first chat would be there too.
    const later = (await create(owner.client, 'public', 'Later')).body.chat.id;
    expect((await join(guest, { chat_id: later })).ok).toBe(true);
    expect((await owner.client.post(`/v1/portal/chats/${later}/delete`, {})).status).toBe(200);
    for (const socket of [guest.socket, tab, owner.socket]) {
      await socket.next('room:left', (e) => e.chat_id === later);
      expect(socket.received.filter((r) => r.event === 'room:left' && r.payload.chat_id === chatId)).toHaveLength(1);
    }
  });

  // PGlite runs one transaction at a time: the update cannot wait for a deletion there.
  it.skipIf(MODE === 'embedded')(
    'an admin update that finds the chat deleted meanwhile answers 404 and records no audit entry (PostgreSQL)',
    async () => {
      const { chatId } = await keyedChat(app);
      const op = operator(app);
      // The deletion holds the chat row; the update (having read the chat live) waits for it.
      const deletion = hold(pg, (tx) => tx`update chats set deleted_at = now() where id = ${chatId}`);
      await deletion.ready;
      const updating = op.post(`/v1/admin/chats/${chatId}/update`, { name: 'After delete' });
      await Promise.race([updating, lockWaiters(pg, 1)]);
      await deletion.end();
      const res = await updating;
      expect(res.status, JSON.stringify(res.body)).toBe(404);
      expect(res.body.code).toBe('ERR_CHAT_NOT_FOUND');
      const audit = (await op.get('/v1/admin/audit?code=602&limit=100')).body.entries;
      expect(audit.filter((e: any) => e.data?.chat_id === chatId)).toEqual([]);
    },
  );
});

/** Premium for a plain user, for a creation slot. */
const premium = (id: number) =>
  app.database.db.execute(
    `update users set subscription_tier = 2, subscription_expires_at = now() + interval '7 days' where id = ${id}` as never,
  );
const inviteOf = async (who: { client: Client }, chatId: number) => {
  const made = await who.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
  expect(made.status, JSON.stringify(made.body)).toBe(200);
  return made.body.invite.code as string;
};
const usesOf = async (code: string) =>
  countRows(app, `select uses as n from chat_invites where code = '${code.replace(/'/g, "''")}'`);
const listed = async (owner: { client: Client }, chatId: number) =>
  (await owner.client.get(`/v1/portal/chats/${chatId}/invites`)).body.invites.map((i: any) => i.code).sort();

describeApp('invites of a private chat: its owner’s and Admins’ only (docs/api.md, Chats)', () => {
  it('making a chat private revokes the invites its members made while it was public, for good: nobody gets in with them, their kicked creator neither', async () => {
    const owner = await member(app);
    await premium(owner.user.id);
    const chatId: number = (await create(owner.client, 'public', 'Club')).body.chat.id;
    const plain = await member(app);
    expect((await join(plain, { chat_id: chatId })).ok).toBe(true);
    const admin = await member(app, { level: 2 });
    const byMember = await inviteOf(plain, chatId);
    const byOwner = await inviteOf(owner, chatId);
    const byAdmin = await inviteOf(admin, chatId);

    const closed = await owner.client.post(`/v1/portal/chats/${chatId}/config/update`, { type: 'private' });
    expect(closed.status).toBe(200);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: plain.user.id })).status).toBe(200);
    expect(await listed(owner, chatId)).toEqual([byOwner, byAdmin].sort());
    // Neither an outsider nor the kicked member gets in with the member's invite, and no use is spent.
    const outsider = await member(app);
    expect(await join(outsider, { invite: byMember })).toMatchObject({ ok: false, code: 'ERR_INVITE_NOT_FOUND' });
    expect(await join(plain, { invite: byMember })).toMatchObject({ ok: false, code: 'ERR_INVITE_NOT_FOUND' });
    expect(await usesOf(byMember)).toBe(0);
    // Made public again, the chat does not bring the revoked invite back.
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/config/update`, { type: 'public' })).status).toBe(200);
    expect(await join(outsider, { invite: byMember })).toMatchObject({ ok: false, code: 'ERR_INVITE_NOT_FOUND' });
    // The owner’s and the Admin’s invites outlived the change, and still open it once private again.
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/config/update`, { type: 'private' })).status).toBe(200);
    expect(await join(outsider, { invite: byOwner })).toMatchObject({ ok: true, chat: { id: chatId } });
    expect(await join(await member(app), { invite: byAdmin })).toMatchObject({ ok: true, chat: { id: chatId } });
  });

  it('a config update that repeats a private chat’s type revokes nothing: a demoted Admin’s invite comes back, listed and honoured, once its creator is promoted again', async () => {
    const owner = await member(app);
    await premium(owner.user.id);
    const chatId: number = (await create(owner.client, 'private', 'Kept')).body.chat.id;
    const admin = await member(app, { level: 2 });
    const byAdmin = await inviteOf(admin, chatId);
    await setLevel(app, admin.user.id, 0);
    // A client sending its full settings: the type is the one the chat already has.
    const renamed = await owner.client.post(`/v1/portal/chats/${chatId}/config/update`, {
      name: 'Renamed',
      type: 'private',
    });
    expect([renamed.status, renamed.body.chat?.name]).toEqual([200, 'Renamed']);
    await setLevel(app, admin.user.id, 2);
    expect(await listed(owner, chatId)).toEqual([byAdmin]);
    expect(await join(await member(app), { invite: byAdmin })).toMatchObject({ ok: true, chat: { id: chatId } });
  });

  it('an Admin’s invite stops opening a private chat once its creator is demoted or deleted, and is no longer listed; no use is spent', async () => {
    const owner = await member(app);
    await premium(owner.user.id);
    const chatId: number = (await create(owner.client, 'private', 'Closed')).body.chat.id;
    const demoted = await member(app, { level: 2 });
    const deleted = await member(app, { level: 2 });
    const byDemoted = await inviteOf(demoted, chatId);
    const byDeleted = await inviteOf(deleted, chatId);
    const byOwner = await inviteOf(owner, chatId);
    await setLevel(app, demoted.user.id, 0);
    expect((await operator(app).post(`/v1/admin/users/${deleted.user.id}/delete`, {})).status).toBe(200);
    const guest = await member(app);
    for (const code of [byDemoted, byDeleted]) {
      expect(await join(guest, { invite: code })).toMatchObject({ ok: false, code: 'ERR_INVITE_NOT_FOUND' });
      expect(await usesOf(code)).toBe(0);
    }
    expect(await listed(owner, chatId)).toEqual([byOwner]);
    expect(await join(guest, { invite: byOwner })).toMatchObject({ ok: true, chat: { id: chatId, member_count: 2 } });
  });

  // PostgreSQL: the other side of each race holds the chat's row in a transaction of the test's own
  // (another node's change, not committed yet); the invite's creation must wait for it and decide on
  // the chat as committed. PGlite runs one transaction at a time.
  it.skipIf(MODE === 'embedded')(
    'a member’s invite asked for while the chat is being made private waits for it and answers 403, storing nothing',
    async () => {
      const { chatId } = await keyedChat(app, 'public');
      const plain = await member(app);
      expect((await join(plain, { chat_id: chatId })).ok).toBe(true);
      const closing = hold(pg, (tx) => tx`update chats set type = 'private' where id = ${chatId}`);
      await closing.ready;
      const creating = plain.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
      await lockWaitersOr(pg, 1, creating);
      await closing.end();
      const res = await creating;
      const stored = await countRows(app, `select count(*) as n from chat_invites where chat_id = ${chatId}`);
      expect({ status: res.status, code: res.body.code, stored }).toEqual({
        status: 403,
        code: 'ERR_FORBIDDEN',
        stored: 0,
      });
    },
  );

  it.skipIf(MODE === 'embedded')(
    'an invite asked for while its chat is being deleted waits for the deletion and answers 404 ERR_CHAT_NOT_FOUND, storing nothing',
    async () => {
      const { owner, chatId } = await keyedChat(app, 'private');
      const deletion = hold(pg, (tx) => tx`update chats set deleted_at = now() where id = ${chatId}`);
      await deletion.ready;
      const creating = owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
      await lockWaitersOr(pg, 1, creating);
      await deletion.end();
      const res = await creating;
      const stored = await countRows(app, `select count(*) as n from chat_invites where chat_id = ${chatId}`);
      expect({ status: res.status, code: res.body.code, stored }).toEqual({
        status: 404,
        code: 'ERR_CHAT_NOT_FOUND',
        stored: 0,
      });
    },
  );
});

describeApp(`POST /v1/portal/chats/{chat_id}/invites/create: ${Limits.INVITES_PER_CHAT} live invites per chat`, () => {
  const createInvite = (who: { client: Client }, chatId: number, body: object = {}) =>
    who.client.post(`/v1/portal/chats/${chatId}/invites/create`, body);
  /** The chat's invites as stored, live or not. */
  const storedOf = (chatId: number) =>
    countRows(app, `select count(*) as n from chat_invites where chat_id = ${chatId}`);
  /** A public chat with a plain member, and `live` live invites of its owner seeded in SQL (a POST each would meet the write limit). */
  const chatWithInvites = async (live: number) => {
    const { owner, chatId } = await keyedChat(app);
    const plain = await member(app);
    expect((await join(plain, { chat_id: chatId })).ok).toBe(true);
    await app.database.db.execute(
      `insert into chat_invites (code, chat_id, created_by, created_at)
       select 'seed_' || ${chatId} || '_' || g, ${chatId}, ${owner.user.id}, now() from generate_series(1, ${live}) g` as never,
    );
    return { owner, plain, chatId };
  };

  it(`keeps up to ${Limits.INVITES_PER_CHAT} live invites and answers 409 ERR_INVITE_LIMIT to the next, storing nothing; one used up, expired or deleted frees a place`, async () => {
    const { owner, plain, chatId } = await chatWithInvites(Limits.INVITES_PER_CHAT - 1);
    // Dead invites beside them count for nothing: expired, used up, revoked.
    await app.database.db.execute(
      `insert into chat_invites (code, chat_id, created_by, max_uses, uses, expires_at, revoked_at, created_at) values
         ('dead_expired_${chatId}', ${chatId}, ${owner.user.id}, null, 0, now() - interval '1 minute', null, now() - interval '2 minutes'),
         ('dead_used_${chatId}', ${chatId}, ${owner.user.id}, 1, 1, null, null, now()),
         ('dead_revoked_${chatId}', ${chatId}, ${owner.user.id}, null, 0, null, now(), now())` as never,
    );
    const last = await createInvite(plain, chatId, { max_uses: 1 });
    expect(last.status, JSON.stringify(last.body)).toBe(200);
    expect((await owner.client.get(`/v1/portal/chats/${chatId}/invites`)).body.invites).toHaveLength(
      Limits.INVITES_PER_CHAT,
    );
    const stored = await storedOf(chatId);
    for (const who of [plain, owner]) {
      const refused = await createInvite(who, chatId);
      expect({ status: refused.status, body: refused.body }).toEqual({
        status: 409,
        body: { code: 'ERR_INVITE_LIMIT', message: expect.any(String) },
      });
    }
    expect(await storedOf(chatId)).toBe(stored);
    // Used up by a join: its place is free, for one invite.
    expect((await join(await member(app), { invite: last.body.invite.code })).ok).toBe(true);
    expect((await createInvite(plain, chatId)).status).toBe(200);
    expect((await createInvite(plain, chatId)).body.code).toBe('ERR_INVITE_LIMIT');
    // Expired.
    await app.database.db.execute(
      `update chat_invites set expires_at = now() - interval '1 second' where code = 'seed_${chatId}_1'` as never,
    );
    expect((await createInvite(plain, chatId)).status).toBe(200);
    expect((await createInvite(plain, chatId)).body.code).toBe('ERR_INVITE_LIMIT');
    // Deleted.
    const deleted = await owner.client.post(`/v1/portal/chats/${chatId}/invites/seed_${chatId}_2/delete`, {});
    expect(deleted.body).toEqual({ ok: true });
    expect((await createInvite(plain, chatId)).status).toBe(200);
    expect((await createInvite(plain, chatId)).body.code).toBe('ERR_INVITE_LIMIT');
    expect((await owner.client.get(`/v1/portal/chats/${chatId}/invites`)).body.invites).toHaveLength(
      Limits.INVITES_PER_CHAT,
    );
  });

  it('counts a private chat’s invites its list leaves out (their creator demoted), which come back when the chat is made public', async () => {
    const owner = await member(app);
    await premium(owner.user.id);
    const chatId: number = (await owner.client.post('/v1/portal/chats/create', { name: 'Capped', type: 'private' }))
      .body.chat.id;
    const admin = await member(app, { level: 2 });
    const byAdmin = await createInvite(admin, chatId);
    expect(byAdmin.status, JSON.stringify(byAdmin.body)).toBe(200);
    await app.database.db.execute(
      `insert into chat_invites (code, chat_id, created_by, created_at)
       select 'seed_' || ${chatId} || '_' || g, ${chatId}, ${owner.user.id}, now()
       from generate_series(1, ${Limits.INVITES_PER_CHAT - 1}) g` as never,
    );
    const listed = async () => (await owner.client.get(`/v1/portal/chats/${chatId}/invites`)).body.invites.length;
    // Demoted, the Admin's invite is neither listed nor honoured while the chat is private, but
    // still counts: it is not revoked.
    await setLevel(app, admin.user.id, 0);
    expect(await listed()).toBe(Limits.INVITES_PER_CHAT - 1);
    const refused = await createInvite(owner, chatId);
    expect([refused.status, refused.body.code]).toEqual([409, 'ERR_INVITE_LIMIT']);
    expect(await storedOf(chatId)).toBe(Limits.INVITES_PER_CHAT);
    // Made public, it is listed and honoured again: still no more than the cap.
    const opened = await owner.client.post(`/v1/portal/chats/${chatId}/config/update`, { type: 'public' });
    expect(opened.status, JSON.stringify(opened.body)).toBe(200);
    expect(await listed()).toBe(Limits.INVITES_PER_CHAT);
    expect((await join(await member(app), { invite: byAdmin.body.invite.code })).ok).toBe(true);
  });

  // PostgreSQL: the first creation is stopped at its insert, its count taken; the second, asked
  // for meanwhile (on this node or another: they meet in the database), must wait for it and count
  // its invite. PGlite runs one transaction at a time.
  it.skipIf(MODE === 'embedded')(
    'two invites asked for at once for the last place: one is stored, the other answers 409 ERR_INVITE_LIMIT',
    async () => {
      const { owner, plain, chatId } = await chatWithInvites(Limits.INVITES_PER_CHAT - 1);
      const gate = await gateInserts(pg, 'chat_invites', `new.chat_id = ${chatId}`);
      try {
        const first = createInvite(owner, chatId);
        await lockWaiters(pg, 1);
        const second = createInvite(plain, chatId);
        await lockWaitersOr(pg, 2, second);
        await gate.open();
        const [a, b] = await Promise.all([first, second]);
        expect([a.status, b.status, b.body.code]).toEqual([200, 409, 'ERR_INVITE_LIMIT']);
      } finally {
        await gate.close();
      }
      expect(await storedOf(chatId)).toBe(Limits.INVITES_PER_CHAT);
    },
  );
});

/** Resolves once some backend waits for a lock on `table` (PostgreSQL). */
async function lockWaiterOn(table: string): Promise<void> {
  for (;;) {
    const [row] = await pg<{ n: number }[]>`
      select count(*)::int as n from pg_locks where not granted and relation = ${table}::regclass`;
    if ((row?.n ?? 0) >= 1) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

// A config update whose change committed answers it, whatever comes after its commit. The update
// waits for the chat's row (held here), then stops where it counts the chat's members (chat_members
// locked here); a deletion of the chat is then started, and lets it go. An answer built in the
// update's transaction holds the row then, so the deletion waits for it; one read after the commit
// would wait for the members while the deletion commits, and answer 404.
describeApp('a chat config update and a deletion right after its commit (PostgreSQL)', () => {
  const updateThenDelete = async (chatId: number, send: () => Promise<any>) => {
    const row = hold(pg, (tx) => tx`select id from chats where id = ${chatId} for update`);
    await row.ready;
    const updating = send();
    await lockWaiters(pg, 1);
    const members = hold(pg, (tx) => tx`lock table chat_members in access exclusive mode`);
    await members.ready;
    await row.end();
    await lockWaiterOn('chat_members');
    const deleting = pg`update chats set deleted_at = now() where id = ${chatId}`.execute();
    await lockWaitersOr(pg, 2, deleting);
    await members.end();
    await deleting;
    return updating;
  };

  it.skipIf(MODE === 'embedded')(
    'the owner’s rename answers 200 with the renamed chat, and members get chat:updated',
    async () => {
      const { owner, chatId } = await keyedChat(app);
      const res = await updateThenDelete(chatId, () =>
        owner.client.post(`/v1/portal/chats/${chatId}/config/update`, { name: 'Renamed' }),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 200, code: undefined });
      expect(res.body.chat).toMatchObject({ id: chatId, name: 'Renamed', member_count: 1 });
      expect((await owner.socket.next('chat:updated', (e) => e.chat.id === chatId)).chat.name).toBe('Renamed');
    },
  );

  it.skipIf(MODE === 'embedded')(
    'an admin update whose change and audit entry 602 committed answers 200, never 404',
    async () => {
      const { chatId } = await keyedChat(app);
      const op = operator(app);
      const res = await updateThenDelete(chatId, () =>
        op.post(`/v1/admin/chats/${chatId}/update`, { name: 'Committed' }),
      );
      const [stored] = await pg<{ name: string }[]>`select name from chats where id = ${chatId}`;
      const audit = (await op.get('/v1/admin/audit?code=602&limit=100')).body.entries.filter(
        (e: any) => e.data?.chat_id === chatId,
      );
      expect({ name: stored?.name, audit: audit.length }).toEqual({ name: 'Committed', audit: 1 });
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 200, code: undefined });
      expect(res.body.chat).toMatchObject({ id: chatId, name: 'Committed' });
    },
  );
});

/** Whether the chat is still live and of this type (nothing changed it, nothing deleted it). */
const liveAs = (on: TestApp, chatId: number, type: string) =>
  countRows(on, `select count(*) as n from chats where id = ${chatId} and type = '${type}' and deleted_at is null`);

// A chat's settings, its deletion, its invites and an official chat's creation are decided on the
// caller's level and state as stored when the write runs, as creations are, never on the session's
// view of them (docs/api.md, Chats): the session's level is only a quick refusal.
describeApp('official chat creation, chat settings, deletion and invites follow the caller as stored', () => {
  // An app of its own whose time stands still, so no cached session reaches its TTL: only the
  // stored row can tell the write about a change this node has not heard of.
  let timed: TestApp;
  const clock = new FakeClock(Date.now());
  beforeAll(async () => {
    timed = await startApp({ clock });
  });
  afterAll(async () => {
    await timed?.close();
  });

  /** An Admin (neither owner nor member of the private chat) demoted to Basic behind the session cache's back. */
  const demotedAdmin = async () => {
    const { owner, chatId } = await keyedChat(timed, 'private');
    const actor = await login(timed);
    await setLevel(timed, actor.user.id, 2);
    expect((await actor.client.get('/v1/users/me')).body.user.permission_level).toBe(2);
    // Written behind the stores' back (as another node's commit whose invalidation is on its way).
    await timed.database.db.execute(`update users set permission_level = 0 where id = ${actor.user.id}` as never);
    return { owner, chatId, actor };
  };

  it('answers 403 ERR_FORBIDDEN to a config update by an Admin demoted by a write the node’s session cache has not heard of (the admin route too), and changes nothing', async () => {
    const { chatId, actor } = await demotedAdmin();
    const own = await actor.client.post(`/v1/portal/chats/${chatId}/config/update`, { type: 'public' });
    const admin = await actor.client.post(`/v1/admin/chats/${chatId}/update`, { name: 'Taken' });
    expect([own.status, own.body.code, admin.status, admin.body.code]).toEqual([
      403,
      'ERR_FORBIDDEN',
      403,
      'ERR_FORBIDDEN',
    ]);
    expect(await liveAs(timed, chatId, 'private')).toBe(1);
    expect(await countRows(timed, `select count(*) as n from chats where id = ${chatId} and name = 'Taken'`)).toBe(0);
  });

  it('answers 403 ERR_FORBIDDEN to a deletion by an Admin demoted by a write the node’s session cache has not heard of (the admin route too), and deletes nothing', async () => {
    const { chatId, actor } = await demotedAdmin();
    const own = await actor.client.post(`/v1/portal/chats/${chatId}/delete`, {});
    const admin = await actor.client.post(`/v1/admin/chats/${chatId}/delete`, {});
    expect([own.status, own.body.code, admin.status, admin.body.code]).toEqual([
      403,
      'ERR_FORBIDDEN',
      403,
      'ERR_FORBIDDEN',
    ]);
    expect(await liveAs(timed, chatId, 'private')).toBe(1);
  });

  it('answers 403 ERR_FORBIDDEN to the revocation of the owner’s invite by an Admin demoted by a write the node’s session cache has not heard of, and the invite stays live', async () => {
    const { owner, chatId, actor } = await demotedAdmin();
    const { code } = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {})).body.invite;
    const res = await actor.client.post(`/v1/portal/chats/${chatId}/invites/${code}/delete`, {});
    expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    const listed = (await owner.client.get(`/v1/portal/chats/${chatId}/invites`)).body.invites;
    expect(listed.map((i: any) => i.code)).toEqual([code]);
  });

  /** Writes `set` to the user's row behind the stores' back; the session still reads it Active at its level. */
  const changedBehind = async (who: { client: Client; user: { id: number } }, set: string) => {
    expect((await who.client.get('/v1/users/me')).status).toBe(200);
    await timed.database.db.execute(`update users set ${set} where id = ${who.user.id}` as never);
    expect((await who.client.get('/v1/users/me')).status).toBe(200);
  };
  const anHourOn = () => new Date(clock.now().getTime() + 3_600_000).toISOString();

  it('answers 403 ERR_FORBIDDEN to an official chat’s creation by an Owner demoted to Admin by a write the node’s session cache has not heard of, and creates nothing', async () => {
    const actor = await login(timed);
    await setLevel(timed, actor.user.id, 3);
    expect((await actor.client.get('/v1/users/me')).body.user.permission_level).toBe(3);
    await changedBehind(actor, 'permission_level = 2');
    const res = await actor.client.post('/v1/admin/chats/create', { name: 'Stale official' });
    expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect(await countRows(timed, `select count(*) as n from chats where name = 'Stale official'`)).toBe(0);
  });

  it('answers 403 ERR_TIMED_OUT to a deletion by an Admin timed out by a write the node’s session cache has not heard of (the admin route too), and deletes nothing', async () => {
    const { chatId } = await keyedChat(timed, 'private');
    const actor = await login(timed);
    await setLevel(timed, actor.user.id, 2);
    await changedBehind(actor, `state = 1, state_expires_at = '${anHourOn()}'`);
    const own = await actor.client.post(`/v1/portal/chats/${chatId}/delete`, {});
    const admin = await actor.client.post(`/v1/admin/chats/${chatId}/delete`, {});
    expect([own.status, own.body.code, admin.status, admin.body.code]).toEqual([
      403,
      'ERR_TIMED_OUT',
      403,
      'ERR_TIMED_OUT',
    ]);
    expect(await liveAs(timed, chatId, 'private')).toBe(1);
  });

  it('answers 403 ERR_BANNED to a config update and an invite’s creation by a chat’s owner banned by a write the node’s session cache has not heard of, and changes nothing', async () => {
    const { owner, chatId } = await keyedChat(timed, 'private');
    await changedBehind(owner, 'state = 2');
    const update = await owner.client.post(`/v1/portal/chats/${chatId}/config/update`, { type: 'public' });
    const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
    expect([update.status, update.body.code, invite.status, invite.body.code]).toEqual([
      403,
      'ERR_BANNED',
      403,
      'ERR_BANNED',
    ]);
    expect(await liveAs(timed, chatId, 'private')).toBe(1);
    expect(await countRows(timed, `select count(*) as n from chat_invites where chat_id = ${chatId}`)).toBe(0);
  });

  it('answers 403 ERR_TIMED_OUT to the revocation of the owner’s invite by an Admin timed out by a write the node’s session cache has not heard of, and the invite stays live', async () => {
    const { owner, chatId } = await keyedChat(timed, 'private');
    const actor = await login(timed);
    await setLevel(timed, actor.user.id, 2);
    const { code } = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {})).body.invite;
    await changedBehind(actor, `state = 1, state_expires_at = '${anHourOn()}'`);
    const res = await actor.client.post(`/v1/portal/chats/${chatId}/invites/${code}/delete`, {});
    expect([res.status, res.body.code]).toEqual([403, 'ERR_TIMED_OUT']);
    const listed = (await owner.client.get(`/v1/portal/chats/${chatId}/invites`)).body.invites;
    expect(listed.map((i: any) => i.code)).toEqual([code]);
  });
});

// PostgreSQL: the write waits for the chat's row (held here) while the caller's demotion commits
// and reaches every node's session cache; it must decide on the level as stored once it has the row.
describeApp('chat settings and deletion racing a demotion of the caller (PostgreSQL)', () => {
  const whileDemoted = async (chatId: number, userId: number, send: () => Promise<any>) => {
    const row = hold(pg, (tx) => tx`select id from chats where id = ${chatId} for update`);
    await row.ready;
    const pending = send();
    await lockWaiters(pg, 1);
    await setLevel(app, userId, 0);
    await row.end();
    return pending;
  };

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN to a config update that waits for the chat’s row while its Admin caller is demoted, and changes nothing',
    async () => {
      // A private chat of another Admin; the caller is an Admin who is neither its owner nor a member.
      const { chatId } = await keyedChat(app, 'private');
      const actor = await member(app, { level: 2 });
      const res = await whileDemoted(chatId, actor.user.id, () =>
        actor.client.post(`/v1/portal/chats/${chatId}/config/update`, { type: 'public' }),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'ERR_FORBIDDEN' });
      expect(await liveAs(app, chatId, 'private')).toBe(1);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN to a deletion that waits for the chat’s row while its Admin caller is demoted, and deletes nothing',
    async () => {
      const { chatId } = await keyedChat(app, 'private');
      const actor = await member(app, { level: 2 });
      const res = await whileDemoted(chatId, actor.user.id, () =>
        actor.client.post(`/v1/portal/chats/${chatId}/delete`, {}),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'ERR_FORBIDDEN' });
      expect(await liveAs(app, chatId, 'private')).toBe(1);
    },
  );
});

describeApp('the socket', () => {
  it('refuses a connection without a valid session, and from a foreign origin', async () => {
    const { client } = await login(app);
    await expect(connectSocket(app.url, { ...client, cookie: null } as never)).rejects.toThrow(/ERR_UNAUTHENTICATED/);
    await expect(connectSocket(app.url, client, { origin: 'https://evil.example' })).rejects.toThrow();
    const ok = await connectSocket(app.url, client, { origin: app.config.allowedOrigins[0] });
    expect(ok.connected).toBe(true);
  });

  it('answers bad payloads with an error ack and stays up', async () => {
    const m = await member(app);
    for (const payload of [null, 42, 'x', {}, { chat_id: 'a' }, { chat_id: 1, extra: true }, { invite: '' }, [1]]) {
      const ack: any = await m.socket.emitWithAck('room:join', payload as never);
      expect(ack).toMatchObject({ ok: false, code: 'ERR_VALIDATION' });
    }
    expect(await join(m, { chat_id: 999999 })).toMatchObject({ ok: false, code: 'ERR_CHAT_NOT_FOUND' });
    expect(m.socket.connected).toBe(true);
  });

  it('answers an event with no payload, or arguments after it, with ERR_VALIDATION and does nothing', async () => {
    const { chatId } = await keyedChat(app);
    const m = await member(app);
    // The ack is the last argument, whatever comes before it (an unanswered event fails the wait).
    const ask = (...args: unknown[]) => (m.socket.timeout(10_000) as any).emitWithAck(...args);
    const invalid = { ok: false, code: 'ERR_VALIDATION', message: expect.any(String) };
    for (const event of [
      'room:join',
      'room:leave',
      'vm:credentials',
      'vm:watch',
      'vm:unwatch',
      'vm:frame:ack',
      'vm:control:request',
      'vm:control:grant',
      'vm:control:release',
      'vm:input',
    ]) {
      expect(await ask(event), event).toEqual(invalid);
    }
    const chatsOf = async () => (await m.client.get('/v1/portal/chats')).body.chats.map((c: any) => c.id);
    expect(await ask('room:join', { chat_id: chatId }, 'extra')).toEqual(invalid);
    expect(await ask('room:join', { chat_id: chatId }, { chat_id: chatId })).toEqual(invalid);
    expect(await chatsOf()).not.toContain(chatId);
    expect(await ask('room:join', { chat_id: chatId })).toMatchObject({ ok: true });
    expect(await ask('room:leave', { chat_id: chatId }, 'extra')).toEqual(invalid);
    expect(await chatsOf()).toContain(chatId);
    expect(await ask('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    expect(m.socket.connected).toBe(true);
  });

  it('answers an event no module serves, when the client waits for its ack, with ERR_NOT_FOUND', async () => {
    const m = await member(app);
    const ask = (...args: unknown[]) => (m.socket.timeout(10_000) as any).emitWithAck(...args);
    const unknown = { ok: false, code: 'ERR_NOT_FOUND', message: expect.any(String) };
    expect(await ask('room:joinx', { chat_id: 1 })).toEqual(unknown);
    expect(await ask('message:new', { content: 'x' })).toEqual(unknown);
    expect(await ask('nothing')).toEqual(unknown);
    // Names of what every object inherits are no events either.
    for (const name of ['toString', 'constructor', '__proto__'])
      expect(await ask(name, { chat_id: 1 }), name).toEqual(unknown);
    // Without an ack it is dropped, and the socket serves the next event.
    (m.socket as any).emit('room:joinx', { chat_id: 1 });
    expect(await ask('room:join', { chat_id: 999999 })).toMatchObject({ ok: false, code: 'ERR_CHAT_NOT_FOUND' });
    expect(m.socket.connected).toBe(true);
  });

  it('drops the socket of a session that logs out, or is destroyed from another session', async () => {
    const a = await member(app);
    const b = await member(app, { platformUserId: a.platformUserId });
    const gone = disconnected(b.socket);
    const destroyed = await a.client.post(`/v1/users/me/sessions/${b.client.cookie?.slice(-6)}/destroy`, {});
    expect([destroyed.status, destroyed.body]).toEqual([200, { destroyed: true }]);
    // Dropped by the server, not closed by the client.
    expect(await gone).toBe('io server disconnect');
    // Only the destroyed session's socket: the destroying one still serves events.
    expect(await a.socket.emitWithAck('room:join', { chat_id: 999999 })).toMatchObject({ code: 'ERR_CHAT_NOT_FOUND' });
    expect(a.socket.connected).toBe(true);
    const own = disconnected(a.socket);
    expect((await a.client.post('/v1/authentication/logout', {})).status).toBe(200);
    expect(await own).toBe('io server disconnect');
  });
});

describeApp('POST /v1/portal/keys', () => {
  it('registers, answers unchanged for the same key, and refuses non-keys', async () => {
    const m = await member(app);
    const same = await m.client.post('/v1/portal/keys', {
      public_key: Buffer.from(m.keys.publicKey).toString('base64'),
    });
    expect(same.body).toEqual({ status: 'unchanged', session_id: m.sessionId });
    const lowOrder = Buffer.alloc(32);
    lowOrder[0] = 1;
    for (const public_key of [
      Buffer.alloc(31, 9).toString('base64'),
      Buffer.alloc(33, 9).toString('base64'),
      Buffer.alloc(32).toString('base64'),
      lowOrder.toString('base64'),
      Buffer.alloc(32, 9).toString('base64url'),
      'not base64 at all',
    ]) {
      const res = await m.client.post('/v1/portal/keys', { public_key });
      expect(res.status, public_key).toBe(400);
      expect(res.body.code).toBe('ERR_VALIDATION');
    }
  });

  it('announces a new key to my chats; replacing a key raises their epoch', async () => {
    const { owner, chatId } = await keyedChat(app);
    const other = await member(app);
    await join(other, { chat_id: chatId });
    const replacement = Buffer.alloc(32, 9).toString('base64');
    expect((await other.client.post('/v1/portal/keys', { public_key: replacement })).body).toEqual({
      status: 'registered',
      session_id: other.sessionId,
    });
    expect(await owner.socket.next('portal:key_added', (e) => e.public_key === replacement)).toEqual({
      chat_id: chatId,
      user_id: other.user.id,
      session_id: other.sessionId,
      public_key: replacement,
    });
    expect(await owner.socket.next('room:rekey')).toEqual({ chat_id: chatId, epoch: 2 });
  });
});

describeApp('POST /v1/portal/chats/{chat_id}/keys/share', () => {
  it('keys an epoch once; a non-holder then gets 409 ERR_EPOCH_ALREADY_KEYED; a partial first share 409 ERR_KEY_RING_CHANGED', async () => {
    const owner = await member(app, { level: 2 });
    const chatId = (await create(owner.client)).body.chat.id;
    await join(owner, { chat_id: chatId });
    const guest = await member(app);
    await join(guest, { chat_id: chatId });
    const wrapped = (n: number) => Buffer.alloc(88, n).toString('base64');
    const partial = await owner.client.post(`/v1/portal/chats/${chatId}/keys/share`, {
      epoch: 1,
      envelopes: [{ session_id: owner.sessionId, wrapped: wrapped(1) }],
    });
    expect(partial.status).toBe(409);
    expect(partial.body.code).toBe('ERR_KEY_RING_CHANGED');
    const wrongEpoch = await owner.client.post(`/v1/portal/chats/${chatId}/keys/share`, {
      epoch: 2,
      envelopes: [{ session_id: owner.sessionId, wrapped: wrapped(1) }],
    });
    expect(wrongEpoch.body.code).toBe('ERR_EPOCH_MISMATCH');
    const all = [owner.sessionId, guest.sessionId].map((session_id, i) => ({ session_id, wrapped: wrapped(i + 1) }));
    const first = await owner.client.post(`/v1/portal/chats/${chatId}/keys/share`, { epoch: 1, envelopes: all });
    expect(first.body).toEqual({ epoch: 1, stored: 2 });
    expect(await guest.socket.next('room:key')).toEqual({
      chat_id: chatId,
      epoch: 1,
      envelope: wrapped(2),
      sender_session_id: owner.sessionId,
    });
    // A second keying attempt (it names the caller) loses: 409, and nothing is overwritten.
    const again = await guest.client.post(`/v1/portal/chats/${chatId}/keys/share`, { epoch: 1, envelopes: all });
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('ERR_EPOCH_ALREADY_KEYED');
    // A holder topping up a session that already has one stores nothing.
    const topUp = await guest.client.post(`/v1/portal/chats/${chatId}/keys/share`, { epoch: 1, envelopes: [all[0]] });
    expect(topUp.body).toEqual({ epoch: 1, stored: 0 });
    expect((await guest.client.get(`/v1/portal/chats/${chatId}/keys`)).body.envelope).toBe(wrapped(2));
    // A new member's session holds nothing, so it cannot key the epoch over the holders.
    const late = await member(app);
    await join(late, { chat_id: chatId });
    const grab = await late.client.post(`/v1/portal/chats/${chatId}/keys/share`, {
      epoch: 1,
      envelopes: [{ session_id: late.sessionId, wrapped: wrapped(9) }],
    });
    expect(grab.status).toBe(409);
    expect(grab.body.code).toBe('ERR_EPOCH_ALREADY_KEYED');
    // A holder gives the late member an envelope.
    const give = await owner.client.post(`/v1/portal/chats/${chatId}/keys/share`, {
      epoch: 1,
      envelopes: [{ session_id: late.sessionId, wrapped: wrapped(3) }],
    });
    expect(give.body).toEqual({ epoch: 1, stored: 1 });
    const outsider = await member(app);
    expect((await outsider.client.get(`/v1/portal/chats/${chatId}/keys`)).body.code).toBe('ERR_NOT_CHAT_MEMBER');
  });
});

describeApp('POST /v1/portal/chats/{chat_id}/messages', () => {
  it('accepts a bundle from a keyed member; message:new carries the same id; ids increase', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
        content: bundle(chatKey, chatId, epoch, `m${i}`),
      });
      expect(res.status).toBe(200);
      expect(res.body.id).toMatch(/^\d+-\d+$/);
      ids.push(res.body.id);
      const event = await owner.socket.next('message:new', (m) => m.id === res.body.id);
      expect(event).toMatchObject({ chat_id: chatId, type: 'user', sender_id: owner.user.id, system: null });
    }
    const key = (id: string) => id.split('-').map(Number) as [number, number];
    for (let i = 1; i < ids.length; i++) {
      const [a, b] = [key(ids[i - 1] as string), key(ids[i] as string)];
      expect(a[0] < b[0] || (a[0] === b[0] && a[1] < b[1])).toBe(true);
    }
  });

  it('answers 422 ERR_INVALID_BUNDLE to anything but the exact outer shape', async () => {
    const { owner, chatId } = await keyedChat(app);
    for (const content of [
      'hello',
      '{}',
      '[1]',
      '{"v":1,"epoch":1,"ct":"AAAA"}',
      '{"v":2,"epoch":0,"ct":"AAAA"}',
      '{"v":2,"epoch":1.5,"ct":"AAAA"}',
      '{"v":2,"epoch":"1","ct":"AAAA"}',
      '{"v":2,"epoch":1,"ct":"not base64!"}',
      '{"v":2,"epoch":1,"ct":"AAAA","extra":1}',
      '{"v":2,"epoch":1}',
    ]) {
      const res = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content });
      expect(res.status, content).toBe(422);
      expect(res.body.code).toBe('ERR_INVALID_BUNDLE');
    }
  });

  it('accepts 4096 characters of content and refuses 4097 with 400', async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const shell = `{"v":2,"epoch":${epoch},"ct":""}`;
    // The longest bundle that fits (ct is whole base64 quanta, and the bundle text is exact: no padding).
    const ct = 'A'.repeat(Math.floor((Limits.MESSAGE_CONTENT_MAX - shell.length) / 4) * 4);
    const longest = `{"v":2,"epoch":${epoch},"ct":"${ct}"}`;
    expect(longest.length).toBeGreaterThan(Limits.MESSAGE_CONTENT_MAX - 4);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content: longest })).status).toBe(200);
    // 4096 characters pass the length check (then the bundle check refuses them); 4097 do not.
    const exact = 'x'.repeat(Limits.MESSAGE_CONTENT_MAX);
    const at = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content: exact });
    expect([at.status, at.body.code]).toEqual([422, 'ERR_INVALID_BUNDLE']);
    const over = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content: `${exact}x` });
    expect(over.status).toBe(400);
    expect(over.body.code).toBe('ERR_VALIDATION');
  });

  it(`allows ${Limits.MESSAGES_PER_CHAT} messages per window in one chat and answers 429 to the next`, async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const content = bundle(chatKey, chatId, epoch, 'flood');
    const statuses = await Promise.all(
      Array.from({ length: Limits.MESSAGES_PER_CHAT }, () =>
        owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content }),
      ),
    );
    expect(statuses.map((s) => s.status)).toEqual(Array(Limits.MESSAGES_PER_CHAT).fill(200));
    const next = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content });
    expect(next.status).toBe(429);
    expect(next.body.code).toBe('ERR_RATE_LIMITED');
    expect(next.body.retry_after).toBeGreaterThan(0);
  });
});

describeApp('POST /v1/portal/chats/{chat_id}/messages (fake clock)', () => {
  // An app of its own whose time moves only by hand, so the mute's seconds left are exact.
  let timed: TestApp;
  const clock = new FakeClock(Date.now());
  beforeAll(async () => {
    timed = await startApp({ clock });
  });
  afterAll(async () => {
    await timed?.close();
  });

  it('refuses non-members, wrong epochs, sessions without the key, chat bans and mutes', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(timed);
    const outsider = await member(timed);
    const notJoined = await outsider.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch, 'x'),
    });
    expect(notJoined.status).toBe(403);
    expect(notJoined.body.code).toBe('ERR_NOT_CHAT_MEMBER');
    const wrongEpoch = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch + 1, 'x'),
    });
    expect(wrongEpoch.body.code).toBe('ERR_EPOCH_MISMATCH');
    await join(outsider, { chat_id: chatId });
    const noKey = await outsider.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch, 'x'),
    });
    expect(noKey.status).toBe(403);
    expect(noKey.body.code).toBe('ERR_NO_ROOM_KEY');
    const db = timed.database.db;
    const ends = new Date(clock.now().getTime() + 90_000).toISOString();
    await db.execute(
      `insert into moderation_actions (user_id, chat_id, action_type, expires_at, created_at) values (${owner.user.id}, ${chatId}, 'CHAT_MUTE', '${ends}', now())` as never,
    );
    const send = () =>
      owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content: bundle(chatKey, chatId, epoch, 'x') });
    const muted = await send();
    expect(muted.status).toBe(403);
    expect(muted.body).toEqual({ code: 'ERR_MUTED', message: expect.any(String), ttl: 90 });
    // The seconds left, rounded up.
    clock.advance(10_001);
    expect((await send()).body).toMatchObject({ code: 'ERR_MUTED', ttl: 80 });
    await db.execute(
      `insert into moderation_actions (user_id, chat_id, action_type, expires_at, created_at) values (${owner.user.id}, ${chatId}, 'CHAT_MUTE', null, now())` as never,
    );
    expect(
      (await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content: bundle(chatKey, chatId, epoch, 'x') }))
        .body.ttl,
    ).toBe(0);
    await db.execute(
      `insert into moderation_actions (user_id, chat_id, action_type, created_at) values (${owner.user.id}, ${chatId}, 'CHAT_BAN', now())` as never,
    );
    const banned = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch, 'x'),
    });
    expect(banned.body.code).toBe('ERR_CHAT_BANNED');
  });
});

describeApp('history and deletion', () => {
  it('pages history newest first with a before cursor', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      ids.push(
        (
          await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
            content: bundle(chatKey, chatId, epoch, `h${i}`),
          })
        ).body.id,
      );
    }
    const page1 = await owner.client.get(`/v1/portal/chats/${chatId}/messages?limit=3`);
    expect(page1.body.messages.map((m: any) => m.id)).toEqual(ids.slice(4).reverse());
    const page2 = await owner.client.get(
      `/v1/portal/chats/${chatId}/messages?limit=3&before=${page1.body.messages[2].id}`,
    );
    expect(page2.body.messages.map((m: any) => m.id)).toEqual(ids.slice(1, 4).reverse());
    for (const q of ['limit=0', `limit=${Limits.MESSAGES_PAGE_MAX + 1}`, 'before=abc']) {
      expect((await owner.client.get(`/v1/portal/chats/${chatId}/messages?${q}`)).status).toBe(400);
    }
    const outsider = await member(app);
    expect((await outsider.client.get(`/v1/portal/chats/${chatId}/messages`)).body.code).toBe('ERR_NOT_CHAT_MEMBER');
  });

  it('deletes own messages, refuses others\u2019 to plain members, and announces message:bulk_deleted', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const guest = await member(app);
    await join(guest, { chat_id: chatId });
    await owner.client.post(`/v1/portal/chats/${chatId}/keys/share`, {
      epoch,
      envelopes: [{ session_id: guest.sessionId, wrapped: Buffer.alloc(88, 1).toString('base64') }],
    });
    const send = async (who: typeof owner) =>
      (await who.client.post(`/v1/portal/chats/${chatId}/messages`, { content: bundle(chatKey, chatId, epoch, 'd') }))
        .body.id as string;
    const [o1, g1, g2] = [await send(owner), await send(guest), await send(guest)];
    expect((await guest.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [o1] })).status).toBe(403);
    const mine = await guest.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [g1] });
    expect(mine.body).toEqual({ deleted: 1, deleted_ids: [g1] });
    expect(await owner.socket.next('message:bulk_deleted')).toEqual({
      room_id: chatId,
      deleted_ids: [g1],
      deleted_by: guest.user.id,
    });
    expect((await guest.client.post(`/v1/portal/chats/${chatId}/messages/delete-mine`, {})).body).toEqual({
      deleted: 1,
      deleted_ids: [g2],
    });
    expect((await guest.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 1 })).status).toBe(403);
    const last = await owner.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, {
      count: Limits.BULK_DELETE_MAX,
    });
    expect(last.body).toEqual({ deleted: 1, deleted_ids: [o1] });
    // BULK_DELETE_MAX ids are taken (none of these is left to delete), one more is refused.
    const most = [o1, ...Array.from({ length: Limits.BULK_DELETE_MAX - 1 }, (_, i) => `1-${i}`)];
    const full = await owner.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: most });
    expect(full.status).toBe(200);
    expect(full.body).toEqual({ deleted: 0, deleted_ids: [] });
    for (const body of [{ ids: [] }, { ids: [...most, '1-100'] }]) {
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/messages/delete`, body)).status).toBe(400);
    }
    for (const count of [0, Limits.BULK_DELETE_MAX + 1]) {
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count })).status).toBe(400);
    }
  });
});

describeApp('leaving', () => {
  it('persists a system message, raises the epoch and tells the others', async () => {
    const { owner, chatId } = await keyedChat(app);
    const guest = await member(app);
    await join(guest, { chat_id: chatId });
    expect(await guest.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    expect(await owner.socket.next('room:rekey')).toEqual({ chat_id: chatId, epoch: 2 });
    expect(await owner.socket.next('portal:key_removed')).toEqual({
      chat_id: chatId,
      user_id: guest.user.id,
      session_id: null,
    });
    const system = await owner.socket.next('message:new', (m) => m.type === 'system');
    expect(system).toMatchObject({
      chat_id: chatId,
      sender_id: null,
      content: '',
      system: { kind: 'leave', user_id: guest.user.id },
    });
    const history = await owner.client.get(`/v1/portal/chats/${chatId}/messages`);
    expect(history.body.messages[0].id).toBe(system.id);
    expect((await guest.client.get('/v1/portal/chats')).body.chats.map((c: any) => c.id)).not.toContain(chatId);
    expect(await guest.socket.emitWithAck('room:leave', { chat_id: chatId })).toMatchObject({
      ok: false,
      code: 'ERR_NOT_CHAT_MEMBER',
    });
  });

  it('lets the members of a chat without an owner leave: its owner deleted, or an official chat (Admins included)', async () => {
    const { owner: chatOwner, chatId } = await keyedChat(app);
    const peer = await member(app);
    expect((await join(peer, { chat_id: chatId })).ok).toBe(true);
    expect((await operator(app).post(`/v1/admin/users/${chatOwner.user.id}/delete`)).status).toBe(200);
    expect((await peer.client.get(`/v1/portal/chats/${chatId}`)).body.chat.owner_id).toBeNull();
    expect(await peer.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });

    const made = await operator(app).post('/v1/admin/chats/create', { name: 'Official' });
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    const official = made.body.chat.id;
    const user = await member(app);
    const admin = await member(app, { level: 2 });
    for (const who of [user, admin]) expect((await join(who, { chat_id: official })).ok).toBe(true);
    for (const who of [user, admin])
      expect(await who.socket.emitWithAck('room:leave', { chat_id: official })).toEqual({ ok: true });
  });

  it("refuses its owner's leave with ERR_FORBIDDEN and writes nothing; its members and Admins still leave", async () => {
    for (const type of ['public', 'private'] as const) {
      // A Premium owner: its one slot is this chat, which it would no longer list if it had left.
      const owner = await member(app);
      await app.database.db.execute(
        `update users set subscription_tier = 2, subscription_expires_at = now() + interval '7 days' where id = ${owner.user.id}` as never,
      );
      const chatId: number = (await create(owner.client, type, 'Owned')).body.chat.id;
      expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
      const guest = await member(app);
      const admin = await member(app, { level: 2 });
      if (type === 'private') {
        const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
        expect((await join(guest, { invite: invite.body.invite.code })).ok).toBe(true);
      } else expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
      expect((await join(admin, { chat_id: chatId })).ok).toBe(true);
      const state = async () => ({
        chat: (await owner.client.get(`/v1/portal/chats/${chatId}`)).body.chat,
        listed: (await owner.client.get('/v1/portal/chats')).body.chats.map((c: any) => c.id),
        activity: (await owner.client.get(`/v1/portal/chats/${chatId}/activity`)).body.activity,
        messages: (await owner.client.get(`/v1/portal/chats/${chatId}/messages`)).body.messages,
      });
      const before = await state();
      expect(before.chat).toMatchObject({ owner_id: owner.user.id, epoch: 1, member_count: 3 });
      expect(before.listed).toContain(chatId);

      expect(await owner.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({
        ok: false,
        code: 'ERR_FORBIDDEN',
        message: 'You own this chat: delete it to leave it.',
      });
      // Still listed and a member (a rejoin enters only a chat one is in), same epoch, no
      // membership history, no system message.
      expect(await state()).toEqual(before);
      expect(await join(owner, { chat_id: chatId, rejoin: true } as never)).toMatchObject({ ok: true, epoch: 1 });
      expect(owner.socket.received.filter((r) => r.event === 'room:left' || r.event === 'room:rekey')).toEqual([]);

      // A member and an Admin who joined leave as ever.
      expect(await guest.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
      expect(await admin.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
      const after = await state();
      expect(after.chat).toMatchObject({ epoch: 3, member_count: 1 });
      expect(after.activity.slice(0, 2).map((a: any) => [a.user_id, a.action])).toEqual([
        [admin.user.id, 'leave'],
        [guest.user.id, 'leave'],
      ]);
      // Its slot is freed by deleting it, as ever.
      expect((await create(owner.client)).status).toBe(409);
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/delete`, {})).status).toBe(200);
      expect((await create(owner.client)).status).toBe(200);
    }
  });

  it('a rejoin ({chat_id, rejoin: true}) enters a chat one is a member of, and never makes a former member one again', async () => {
    const { owner, chatId } = await keyedChat(app);
    const guest = await member(app);
    await join(guest, { chat_id: chatId });
    const history = async () =>
      (await owner.client.get(`/v1/portal/chats/${chatId}/activity`)).body.activity.map((a: any) => a.action);
    // A second socket of the member (a reconnection) enters with a rejoin: no new membership.
    const again = await connectSocket(app.url, guest.client);
    const entered = await again.emitWithAck('room:join', { chat_id: chatId, rejoin: true });
    expect(entered).toMatchObject({ ok: true, chat: { id: chatId } });
    expect(await history()).toEqual(['join', 'join']);
    expect(await guest.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    // Left: a rejoin is refused and writes nothing (a plain join would make a member again).
    expect(await again.emitWithAck('room:join', { chat_id: chatId, rejoin: true })).toMatchObject({
      ok: false,
      code: 'ERR_NOT_CHAT_MEMBER',
    });
    expect(await history()).toEqual(['leave', 'join', 'join']);
    expect((await guest.client.get('/v1/portal/chats')).body.chats.map((c: any) => c.id)).not.toContain(chatId);
    // Only an id takes the flag.
    expect(await again.emitWithAck('room:join', { invite: 'abcdefgh', rejoin: true })).toMatchObject({
      ok: false,
      code: 'ERR_VALIDATION',
    });
  });
});

describeApp('connection state recovery', () => {
  it('gives a client that reconnects within the window the messages it missed', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const guest = await member(app);
    await join(guest, { chat_id: chatId });
    const { io } = await import('socket.io-client');
    const socket = io(app.url, {
      transports: ['websocket'],
      extraHeaders: { cookie: `psession=${guest.client.cookie}` },
      reconnectionDelay: 50,
      reconnectionDelayMax: 100,
      forceNew: true,
    });
    const seen: string[] = [];
    socket.on('message:new', (m) => seen.push(m.id));
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    await socket.emitWithAck('room:join', { chat_id: chatId });
    // A first message establishes the recovery offset.
    const first = (
      await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content: bundle(chatKey, chatId, epoch, 'one') })
    ).body.id;
    await new Promise<void>((resolve) => {
      const t = setInterval(() => {
        if (seen.includes(first)) {
          clearInterval(t);
          resolve();
        }
      }, 10);
    });
    const down = new Promise<void>((resolve) => socket.once('disconnect', () => resolve()));
    socket.io.engine.close();
    await down;
    const missed = (
      await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content: bundle(chatKey, chatId, epoch, 'two') })
    ).body.id;
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    expect(socket.recovered).toBe(true);
    await new Promise<void>((resolve, reject) => {
      const t = setInterval(() => {
        if (seen.includes(missed)) {
          clearInterval(t);
          resolve();
        }
      }, 10);
      setTimeout(() => reject(new Error(`missed ${missed}; saw ${seen.join(',')}`)), 5000);
    });
    expect(seen).toEqual([first, missed]);
    socket.close();
  });
});

describeApp('strangers and chats (docs/api.md, Strangers)', () => {
  it('answers 401 to a stranger reading any chat but its own direct chats', async () => {
    const pub = await keyedChat(app);
    const priv = await keyedChat(app, 'private');
    const s = new Client(app.url, nextIp(), app.publicApiKey);
    const made = await s.post('/v1/portal/stranger', {});
    expect(made.status).toBe(200);
    const peer = await member(app);
    const own = await directChat([made.body.user.id, peer.user.id]);
    const others = await directChat([(await member(app)).user.id, (await member(app)).user.id]);
    const reads = (id: number) => [
      `/v1/portal/chats/${id}`,
      `/v1/portal/chats/${id}/messages`,
      `/v1/portal/chats/${id}/keys`,
    ];
    for (const id of [pub.chatId, priv.chatId, others]) {
      for (const path of reads(id)) {
        const res = await s.get(path);
        expect([res.status, res.body.code], path).toEqual([401, 'ERR_UNAUTHENTICATED']);
      }
    }
    for (const path of reads(own)) expect((await s.get(path)).status, path).toBe(200);
    expect((await s.get(`/v1/portal/chats/${own}`)).body.chat).toMatchObject({ id: own, type: 'direct' });
    // A registered non-member still reads the public chat's record.
    expect((await peer.client.get(`/v1/portal/chats/${pub.chatId}`)).status).toBe(200);
  });
});
