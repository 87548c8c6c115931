import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { createBot, type LoggedIn, login, setLevel } from './support/flows.js';
import { hold, lockWaiters } from './support/pg-locks.js';

let app: TestApp;
let sql: postgres.Sql;
let admin: LoggedIn;
beforeAll(async () => {
  app = await startApp();
  if (app.config.databaseUrl) sql = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
  admin = await login(app, { bot: (await createBot(app)).client });
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
