import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import type { Client } from './support/client.js';
import { createBot, createLoginBot, type LoggedIn, login, operator, setLevel } from './support/flows.js';
import { hold, lockWaiters, lockWaitersOr } from './support/pg-locks.js';

let app: TestApp;
let sql: postgres.Sql;
let admin: LoggedIn;
let loginBot: Client;
beforeAll(async () => {
  app = await startApp();
  if (app.config.databaseUrl) sql = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
  loginBot = await createLoginBot(app);
  admin = await login(app, { bot: loginBot });
  await setLevel(app, admin.user.id, 2);
});
afterAll(async () => {
  await sql?.end({ timeout: 1 });
  await app?.close();
});

/** An Owner making the bot official (type 1), committed once the Admin's request waits for the row. */
async function madeOfficialMeanwhile(botId: number, request: () => Promise<{ status: number; body: any }>) {
  const owner = hold(sql, async (tx) => {
    await tx`update bots set type = 1 where id = ${botId}`;
  });
  await owner.ready;
  const answer = request();
  await Promise.race([answer, lockWaiters(sql, 1)]);
  await owner.end();
  return answer;
}

// PGlite runs one transaction at a time, so the embedded store cannot interleave these; on
// PostgreSQL the test fixes the interleaving with a row lock and waits on pg_stat_activity.
describeApp('an Admin changing a bot an Owner makes official at the same time (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')('the update is refused 403 and changes nothing', async () => {
    const bot = await createBot(app, { type: 'community', rate_limit_per_hour: 100 });
    const res = await madeOfficialMeanwhile(bot.id, () =>
      admin.client.post(`/v1/admin/bots/${bot.id}/update`, { type: 'community', rate_limit_per_hour: 5 }),
    );
    expect(res.status, JSON.stringify(res.body)).toBe(403);
    expect(res.body.code).toBe('ERR_FORBIDDEN');
    const [row] = await sql`select type, rate_limit_per_hour from bots where id = ${bot.id}`;
    expect(row).toEqual({ type: 1, rate_limit_per_hour: 100 });
  });

  it.skipIf(MODE === 'embedded')('the delete is refused 403 and the bot stays', async () => {
    const bot = await createBot(app, { type: 'community' });
    const res = await madeOfficialMeanwhile(bot.id, () => admin.client.post(`/v1/admin/bots/${bot.id}/delete`));
    expect(res.status, JSON.stringify(res.body)).toBe(403);
    const [row] = await sql`select type, deleted_at from bots where id = ${bot.id}`;
    expect(row).toEqual({ type: 1, deleted_at: null });
  });
});

/**
 * The account is deleted by another node after the request checked that it exists: the test deletes
 * the user's row in a transaction of its own, lets the request queue behind that row (or answer, if
 * it does not wait for it), then commits.
 */
async function deletedMeanwhile<T>(userId: number, request: () => Promise<T>): Promise<T> {
  const deletion = hold(sql, async (tx) => {
    await tx`select id from users where id = ${userId} for update`;
    await tx`delete from users where id = ${userId}`;
  });
  await deletion.ready;
  const answer = request();
  await lockWaitersOr(sql, 1, answer);
  await deletion.end();
  return answer;
}

const botUpdates = (botId: number) =>
  sql`select count(*)::int as n from audit_log where target_bot_id = ${botId} and action = 'update'`;

describeApp('an admin naming as a bot owner an account deleted at the same time (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')(
    'bots/{id}/update answers 404 ERR_USER_NOT_FOUND and changes and records nothing when the deletion commits first',
    async () => {
      const bot = await createBot(app, { name: 'Unowned' });
      const doomed = await login(app, { bot: loginBot });
      const res = await deletedMeanwhile(doomed.user.id, () =>
        operator(app).post(`/v1/admin/bots/${bot.id}/update`, { name: 'Renamed', owner_user_id: doomed.user.id }),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 404, code: 'ERR_USER_NOT_FOUND' });
      const [row] = await sql`select name, owner_user_id from bots where id = ${bot.id}`;
      expect(row).toEqual({ name: 'Unowned', owner_user_id: null });
      expect((await botUpdates(bot.id))[0]?.n).toBe(0);
    },
  );

  it.skipIf(MODE === 'embedded')(
    'bots/create answers 404 ERR_USER_NOT_FOUND and registers nothing when the deletion commits first',
    async () => {
      const doomed = await login(app, { bot: loginBot });
      const name = `Owned by the deleted ${doomed.user.id}`;
      const res = await deletedMeanwhile(doomed.user.id, () =>
        operator(app).post('/v1/admin/bots/create', { name, owner_user_id: doomed.user.id }),
      );
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 404, code: 'ERR_USER_NOT_FOUND' });
      const [row] = await sql`select count(*)::int as n from bots where name = ${name}`;
      expect(row?.n).toBe(0);
    },
  );

  it.skipIf(MODE === 'embedded')(
    'a deletion that comes while the update waits for the bot waits for it in turn, then releases the bot',
    async () => {
      const bot = await createBot(app, { name: 'Owned later' });
      const doomed = await login(app, { bot: loginBot });
      // Another request holds the bot row: the update waits for it, holding the owner's row.
      const other = hold(sql, async (tx) => {
        await tx`select id from bots where id = ${bot.id} for update`;
      });
      await other.ready;
      const update = operator(app).post(`/v1/admin/bots/${bot.id}/update`, { owner_user_id: doomed.user.id });
      await lockWaiters(sql, 1);
      // The deletion queues behind the update's hold on the user row (or, if nothing holds it,
      // releases the user's bots before the update has written this one, and commits).
      const deletion = operator(app).post(`/v1/admin/users/${doomed.user.id}/delete`);
      await lockWaitersOr(sql, 2, deletion);
      await other.end();
      const [updated, deleted] = await Promise.all([update, deletion]);
      expect(updated.status, JSON.stringify(updated.body)).toBe(200);
      expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
      const [row] = await sql`select owner_user_id from bots where id = ${bot.id}`;
      expect(row?.owner_user_id).toBeNull();
      const [user] = await sql`select count(*)::int as n from users where id = ${doomed.user.id}`;
      expect(user?.n).toBe(0);
    },
  );
});

// docs/api.md Bots: a bot's rename answers the user as its transaction wrote it, so a deletion
// committed right after the rename cannot turn the committed, audited rename into a 404.
describeApp('a bot renaming a user an admin deletes right after (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')('the rename committed first answers 200 with the new name', async () => {
    const renamer = await createBot(app, { type: 'community' });
    const user = await login(app, { bot: loginBot });
    const id = user.user.id;
    const name = `bot_renamed_${id}`;
    // The rename waits for the row first, the deletion behind it, a lock of the whole table last.
    // Let go, the rename commits, the deletion takes the row and commits, and only then does the
    // table open again: an answer read after the rename's commit would find the user gone.
    const holder = hold(sql, (tx) => tx`select id from users where id = ${id} for update`);
    await holder.ready;
    const renamed = renamer.client.post(`/v1/bot/users/${id}/update`, { username: name });
    await lockWaiters(sql, 1);
    const deleted = operator(app).post(`/v1/admin/users/${id}/delete`);
    await lockWaiters(sql, 2);
    const table = hold(sql, (tx) => tx`lock table users in access exclusive mode`);
    await lockWaiters(sql, 3);
    await holder.end();
    await table.ready;
    await table.end();
    const [d, r] = await Promise.all([deleted, renamed]);
    expect(d.status, JSON.stringify(d.body)).toBe(200);
    expect({ status: r.status, code: r.body.code }).toEqual({ status: 200, code: undefined });
    expect(r.body).toMatchObject({ id, username: name });
    // The deletion came after the rename: its audit entry names the user by the new name.
    const entries = await sql`select action, data from audit_log where target_user_id = ${id} order by id`;
    expect(entries.map((e) => e.action)).toEqual(['rename', 'delete']);
    expect(entries[1]?.data).toMatchObject({ username: name });
  });
});
