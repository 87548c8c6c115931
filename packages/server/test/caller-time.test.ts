import { AuditCodes, Limits } from '@parlor/protocol';
import { and, eq } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { STRANGER_BLOCK_CODE } from '../src/modules/matchmaking/blocks.service.js';
import { FakeClock } from '../src/platform/clock.js';
import { auditLog } from '../src/platform/db/schema.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { keyedChat, member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { createBot, createLoginBot, login, operator, setLevel } from './support/flows.js';
import { hold, lockWaiters, racingUserRow, whileHeldAdvancing } from './support/pg-locks.js';
import { closeAllSockets } from './support/sockets.js';

// PostgreSQL, fake clock: a request waits for a row (or a lock) another node's transaction holds,
// and a deadline passes meanwhile. What it decides under that lock it decides at the time it holds
// it, never at the time the request began (docs/api.md, "Levels as they are at the commit"): the
// caller's own timeout included. PGlite runs one transaction at a time, so these need a
// transaction of the test's own beside the app's: cluster project only.
let app: TestApp;
let pg: postgres.Sql | undefined;
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  if (MODE !== 'cluster') return;
  app = await startApp({ clock });
  if (app.config.databaseUrl) pg = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await pg?.end({ timeout: 1 });
  await app?.close();
});

const sqlOf = () => {
  if (!pg) throw new Error('PostgreSQL only');
  return pg;
};

/**
 * `run` while another node's transaction times the caller out for 5 s, holding its users row: the
 * request waits for that row, the clock moves on 10 s meanwhile, then the timeout commits, ended
 * already. Answers the request's answer.
 */
async function timeoutEndingWhileWaiting<T>(userId: number, run: () => Promise<T>): Promise<T> {
  const until = new Date(clock.now().getTime() + 5_000);
  const holder = hold(sqlOf(), async (tx) => {
    await tx`select id from users where id = ${userId} for update`;
    await tx`update users set state = 1, state_expires_at = ${until} where id = ${userId}`;
  });
  await holder.ready;
  const answer = run();
  await lockWaiters(sqlOf(), 1);
  clock.advance(10_000);
  await holder.end();
  return answer;
}

describeApp('a caller whose own timeout ends while its request waits for its row (PostgreSQL, fake clock)', () => {
  it.skipIf(MODE !== 'cluster')(
    'creates the official chat of an Owner whose timeout ended while the creation waited (storedCallerLevel)',
    async () => {
      const owner = await login(app);
      await setLevel(app, owner.user.id, 3);
      const res = await timeoutEndingWhileWaiting(owner.user.id, () =>
        owner.client.post('/v1/admin/chats/create', { name: 'Announcements' }),
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.chat).toMatchObject({ type: 'official', name: 'Announcements' });
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'grants the Premium of an Admin whose timeout ended while the grant waited (lockActorAndTarget)',
    async () => {
      const bot = await createLoginBot(app);
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const target = await login(app, { bot });
      const res = await timeoutEndingWhileWaiting(admin.user.id, () =>
        admin.client.post('/v1/admin/subscriptions/grant', {
          user_id: target.user.id,
          tier: 'PREMIUM',
          duration_days: 1,
        }),
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.subscription).toMatchObject({ tier: 2, has_premium: true });
    },
  );
});

describeApp(
  'POST /v1/portal/chats/{chat_id}/invites/create waiting for the chat’s creations (PostgreSQL, fake clock)',
  () => {
    it.skipIf(MODE !== 'cluster')(
      'stores the invite when the last place frees by an expiry while the creation waits for the chat’s other creations',
      async () => {
        const { owner, chatId } = await keyedChat(app);
        const soon = new Date(clock.now().getTime() + 5_000);
        await sqlOf()`
        insert into chat_invites (code, chat_id, created_by, created_at)
        select 'seed_' || ${chatId}::int || '_' || g, ${chatId}::int, ${owner.user.id}::int, now()
        from generate_series(1, ${Limits.INVITES_PER_CHAT - 1}::int) g`;
        await sqlOf()`
        insert into chat_invites (code, chat_id, created_by, expires_at, created_at)
        values (${`soon_${chatId}`}, ${chatId}, ${owner.user.id}, ${soon}, now())`;
        // Another creation of this chat's invites, on another node, holds the chat's creation lock
        // (chats.invites.store holdInviteCreation) while the seeded invite expires.
        const res = await whileHeldAdvancing(
          sqlOf(),
          `select pg_advisory_xact_lock(7246, ${chatId})`,
          clock,
          10_000,
          () => owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {}),
        );
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        expect(res.body.invite.created_at).toBe(clock.now().toISOString());
      },
    );
  },
);

describeApp('POST /v1/portal/strangers/block racing the caller’s or the stranger’s row (PostgreSQL)', () => {
  const stranger = async () => {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const res = await client.post('/v1/portal/stranger', {});
    expect(res.status).toBe(200);
    return { client, id: res.body.user.id as number };
  };
  const blockAudits = (userId: number) =>
    app.database.db
      .select()
      .from(auditLog)
      .where(and(eq(auditLog.targetUserId, userId), eq(auditLog.code, STRANGER_BLOCK_CODE)));

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN to a Moderator demoted while its block runs, and the stranger’s search goes on',
    async () => {
      await member(app);
      const mod = await member(app, { level: 1 });
      const s = await stranger();
      const interests = [`ct${Date.now() % 100_000}`];
      expect((await s.client.post('/v1/portal/match', { interests })).body.state).toBe('searching');
      const res = await racingUserRow(
        sqlOf(),
        mod.user.id,
        `update users set permission_level = 0 where id = ${mod.user.id}`,
        () => mod.client.post('/v1/portal/strangers/block', { user_id: s.id }),
      );
      expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
      expect((await s.client.get('/v1/portal/match/status')).body.state).toBe('searching');
      expect(await blockAudits(s.id)).toEqual([]);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'answers 404 ERR_USER_NOT_FOUND for a stranger deleted while the block runs, and records nothing',
    async () => {
      const mod = await member(app, { level: 1 });
      const s = await stranger();
      const res = await racingUserRow(sqlOf(), s.id, `delete from users where id = ${s.id}`, () =>
        mod.client.post('/v1/portal/strangers/block', { user_id: s.id }),
      );
      expect([res.status, res.body.code]).toEqual([404, 'ERR_USER_NOT_FOUND']);
      expect(await blockAudits(s.id)).toEqual([]);
    },
  );
});

describeApp('POST /v1/admin/chats/{id}/update renaming a chat renamed meanwhile (PostgreSQL)', () => {
  it.skipIf(MODE !== 'cluster')(
    'records (602) the chat’s name as its row is locked, not as read when the request began',
    async () => {
      const { chatId } = await keyedChat(app);
      const admin = await login(app);
      await setLevel(app, admin.user.id, 2);
      // The owner's rename holds the chat's row (another node's, not yet committed) while the admin's update runs.
      const holder = hold(sqlOf(), async (tx) => {
        await tx`select id from chats where id = ${chatId} for update`;
        await tx`update chats set name = 'Renamed by owner' where id = ${chatId}`;
      });
      await holder.ready;
      const answer = admin.client.post(`/v1/admin/chats/${chatId}/update`, { type: 'private' });
      await lockWaiters(sqlOf(), 1);
      await holder.end();
      const res = await answer;
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const [entry] = await app.database.db
        .select()
        .from(auditLog)
        .where(and(eq(auditLog.code, AuditCodes.CHAT_ADMIN_UPDATE), eq(auditLog.actorId, admin.user.id)));
      expect(entry?.data).toMatchObject({ chat_id: chatId, name: 'Renamed by owner', type: 'public' });
    },
  );
});

describeApp('POST /v1/bot/users/{id}/update by a bot made Verified meanwhile (PostgreSQL)', () => {
  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN to the rename of an Admin by an Official bot made Verified while the rename waits for the Admin’s row',
    async () => {
      const renamer = await createBot(app, { name: 'Renamer', type: 'official' });
      const admin = await login(app);
      await setLevel(app, admin.user.id, 2);
      const before = admin.user.username;
      // Another node's transaction holds the Admin's row; meanwhile an Owner makes the bot Verified.
      const holder = hold(sqlOf(), (tx) => tx`select id from users where id = ${admin.user.id} for update`);
      await holder.ready;
      const answer = renamer.client.post(`/v1/bot/users/${admin.user.id}/update`, {
        username: `ren${Date.now() % 1e6}`,
      });
      await lockWaiters(sqlOf(), 1);
      expect((await operator(app).post(`/v1/admin/bots/${renamer.id}/update`, { type: 'verified' })).status).toBe(200);
      await holder.end();
      const res = await answer;
      expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
      const [row] = await sqlOf()`select username from users where id = ${admin.user.id}`;
      expect(row?.username).toBe(before);
    },
  );
});
