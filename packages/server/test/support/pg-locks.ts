import type postgres from 'postgres';
import { expect } from 'vitest';
import type { TestApp } from './app.js';
import { Client, nextIp } from './client.js';
import { createLoginBot } from './flows.js';

/**
 * Race tests on PostgreSQL fix an interleaving with locks of their own: a transaction that holds
 * rows (or writes) until released, and a wait until the app's statements queue behind it.
 */

/** Resolves once `n` backends of this database wait for a lock (the interleaving is then fixed). */
export async function lockWaiters(sql: postgres.Sql, n: number): Promise<void> {
  for (;;) {
    const [row] = await sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`;
    if ((row?.n ?? 0) >= n) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** lockWaiters, or resolves once `settled` has (what was to wait did not: it came first). */
export async function lockWaitersOr(sql: postgres.Sql, n: number, settled: Promise<unknown>): Promise<void> {
  let done = false;
  const stop = () => {
    done = true;
  };
  settled.then(stop, stop);
  while (!done) {
    const [row] = await sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`;
    if ((row?.n ?? 0) >= n) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * A transaction of the test's own, held open until `release()`; `ready` once `work` has run in it,
 * `done` once it has committed; `end()` releases it and waits for the commit.
 */
export function hold(sql: postgres.Sql, work: (tx: postgres.TransactionSql) => Promise<unknown>) {
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
  const end = async () => {
    release();
    await done;
  };
  return { ready: started, release, done, end };
}

/**
 * Starts the request under test with `run` while `lock` (a `select … for update`) holds a row in a
 * transaction of the test's own (another node's), moves `clock` on by `advanceMs` once the request
 * waits for that row, then lets it go: a deadline passes while the request waits. Answers its answer.
 */
export async function whileHeldAdvancing<T>(
  sql: postgres.Sql,
  lock: string,
  clock: { advance(ms: number): void },
  advanceMs: number,
  run: () => Promise<T>,
): Promise<T> {
  const holder = hold(sql, (tx) => tx.unsafe(lock));
  await holder.ready;
  const answer = run();
  await lockWaiters(sql, 1);
  clock.advance(advanceMs);
  await holder.end();
  return answer;
}

/**
 * Holds the user's row in a transaction of the test's own (a promotion or deletion another node has
 * not committed yet), runs `work` in it, starts the request under test with `run`, which must wait
 * for that row, then commits and answers the request's answer.
 */
export async function racingUserRow<T>(sql: postgres.Sql, userId: number, work: string, run: () => Promise<T>) {
  const holder = hold(sql, async (tx) => {
    await tx`select id from users where id = ${userId} for update`;
    await tx.unsafe(work);
  });
  await holder.ready;
  const answer = run();
  await lockWaiters(sql, 1);
  await holder.end();
  return answer;
}

let gates = 0;

/**
 * Stops the app's inserts into `table` of rows matching `when` (a condition on NEW) at a BEFORE
 * trigger, on an advisory lock the test holds: the transaction that writes one waits there with
 * every lock it took before (a ban holding the user's chats and row at its record's insert, a
 * login holding the user's row at its session's). `open()` lets them go; `close()` (in a
 * `finally`, once the racing requests have answered) opens it if need be and drops the trigger.
 */
export async function gateInserts(sql: postgres.Sql, table: string, when: string) {
  const name = `test_gate_${table}_${++gates}`;
  const key = 4_242_100 + gates;
  await sql.unsafe(
    `create or replace function ${name}() returns trigger language plpgsql as $$
     begin perform pg_advisory_xact_lock(${key}); return new; end $$`,
  );
  await sql.unsafe(
    `create trigger ${name} before insert on ${table} for each row when (${when}) execute function ${name}()`,
  );
  const gate = hold(sql, (tx) => tx`select pg_advisory_xact_lock(${key})`);
  await gate.ready;
  return {
    open: () => gate.end(),
    close: async () => {
      await gate.end();
      await sql.unsafe(`drop trigger if exists ${name} on ${table}`);
      await sql.unsafe(`drop function if exists ${name}()`);
    },
  };
}

/**
 * A login of an existing identity up to its code: `verify()` then runs the login's transaction
 * alone (the step to race: it locks the user's row, opens the session and evicts the oldest).
 */
export async function loginUpToVerify(app: TestApp, platformUserId: string) {
  const bot = await createLoginBot(app);
  const client = new Client(app.url, nextIp(), app.publicApiKey);
  const req = await client.post('/v1/authentication/request', {
    platform: 'platform_a',
    platform_user_id: platformUserId,
  });
  expect(req.status).toBe(200);
  const fetched = await bot.post('/v1/authentication/bot/login-code', {
    platform: 'platform_a',
    platform_user_id: platformUserId,
    platform_username: `name${platformUserId}`,
    platform_avatar_url: `https://cdn.example/${platformUserId}.png`,
  });
  expect(fetched.status).toBe(200);
  return { client, verify: () => client.post('/v1/authentication/verify', { code: fetched.body.code }) };
}
