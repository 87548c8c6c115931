import type postgres from 'postgres';

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
