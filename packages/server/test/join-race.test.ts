import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { join, type Member, member } from './support/chat-flows.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
let sql: postgres.Sql;
beforeAll(async () => {
  app = await startApp();
  if (app.config.databaseUrl) sql = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await sql?.end({ timeout: 1 });
  await app?.close();
});

/** Resolves once `n` backends of this database wait for a lock (the interleaving is then fixed). */
async function lockWaiters(n: number): Promise<void> {
  for (;;) {
    const [row] = await sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`;
    if ((row?.n ?? 0) >= n) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A transaction of the test's own, held open until `release()`; `ready` once `work` has run in it. */
function hold(work: (tx: postgres.TransactionSql) => Promise<unknown>) {
  let release!: () => void;
  const released = new Promise<void>((r) => {
    release = r;
  });
  let ready!: () => void;
  const started = new Promise<void>((r) => {
    ready = r;
  });
  const done = sql.begin(async (tx) => {
    await work(tx);
    ready();
    await released;
  });
  return { ready: started, release, done };
}

async function isMember(chatId: number, userId: number): Promise<boolean> {
  const rows =
    await sql`select 1 from chat_members where chat_id = ${chatId} and user_id = ${userId} and left_at is null`;
  return rows.length > 0;
}

async function chatOf(owner: Member): Promise<number> {
  const created = await owner.client.post('/v1/portal/chats/create', { name: 'Raced', type: 'public' });
  expect(created.status).toBe(200);
  return created.body.chat.id;
}

// PGlite runs one transaction at a time, so the embedded store cannot interleave a ban with a
// join; on PostgreSQL the test fixes each interleaving with locks and waits on pg_stat_activity.
describeApp('a chat ban racing a join (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')(
    'a ban committed after the join checked for bans but before it added the member refuses the join',
    async () => {
      const owner = await member(app, { level: 2 });
      const chatId = await chatOf(owner);
      const target = await member(app);
      // The ban as the ban route writes it (the chat row first, then its record), not yet committed.
      const ban = hold(async (tx) => {
        await tx`select id from chats where id = ${chatId} for update`;
        await tx`insert into moderation_actions (user_id, chat_id, action_type, created_at)
               values (${target.user.id}, ${chatId}, 'CHAT_BAN', now())`;
      });
      await ban.ready;
      // The join reads no ban yet (it is not committed); it must then wait for the chat row.
      const joining = join(target, { chat_id: chatId });
      await Promise.race([joining, lockWaiters(1)]);
      ban.release();
      await ban.done;
      expect(await joining).toMatchObject({ ok: false, code: 'ERR_CHAT_BANNED' });
      expect(await isMember(chatId, target.user.id)).toBe(false);
    },
  );

  it.skipIf(MODE === 'embedded')(
    'a ban that comes while a join is adding the member ends that membership',
    async () => {
      const owner = await member(app, { level: 2 });
      const chatId = await chatOf(owner);
      const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
      const code: string = invite.body.invite.code;
      const target = await member(app);
      // The join (with an invite) stops at the invite row, which this transaction holds.
      const invites = hold((tx) => tx`select code from chat_invites where code = ${code} for update`);
      await invites.ready;
      const joining = join(target, { invite: code });
      await lockWaiters(1);
      // Now the ban, while the join's transaction is open and has not added the member.
      const banning = owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: target.user.id });
      await Promise.race([banning, lockWaiters(2)]);
      invites.release();
      await invites.done;
      const [joined, banned] = await Promise.all([joining, banning]);
      expect(banned.status, JSON.stringify(banned.body)).toBe(200);
      // Whichever way the join ends, the banned user is not a member after the ban.
      expect(joined.ok === true || joined.code === 'ERR_CHAT_BANNED').toBe(true);
      expect(await isMember(chatId, target.user.id)).toBe(false);
    },
  );
});
