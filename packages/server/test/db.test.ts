import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { eq, inArray, sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { afterCommit, isDeadlock, trackCommits } from '../src/platform/db/after-commit.js';
import {
  anyOf,
  type Database,
  type Db,
  MIGRATION_LOCK,
  openDatabase,
  PGLITE_LOCK_FILE,
  rowsOf,
  schema,
} from '../src/platform/db/index.js';
import { MODE, seedDataDir, startApp, type TestApp } from './support/app.js';
import { hold } from './support/pg-locks.js';
import { createScratchDatabase } from './support/services.js';

/**
 * Statements on PostgreSQL are prepared (platform/db/prepared.ts): one round trip each, where
 * drizzle's default (unprepared) makes postgres-js wait for the parameter types first. Seen from
 * the server: a prepared statement shows in `pg_prepared_statements` of its connection.
 */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))('statements on PostgreSQL', () => {
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let database: Database;

  beforeAll(async () => {
    scratch = await createScratchDatabase();
    // One connection, so that every statement below runs on the connection it then inspects.
    database = await openDatabase({ url: scratch.url, dataDir: null, poolSize: 1 });
  });
  afterAll(async () => {
    await database?.close();
    await scratch?.drop();
  });

  const prepared = async (db: Db, like: string) =>
    rowsOf<{ n: number }>(
      await db.execute(
        sql`select count(*)::integer as n from pg_prepared_statements where statement like ${like}::text`,
      ),
    )[0]?.n;

  it('prepares each statement once per connection, with parameters', async () => {
    const { db } = database;
    for (let i = 0; i < 3; i++) await db.select().from(schema.users).where(eq(schema.users.id, i));
    expect(await prepared(db, 'select % from "users" where "users"."id" = $1')).toBe(1);
  });

  it('prepares them inside transactions and savepoints too', async () => {
    await database.db.transaction(async (tx) => {
      await tx.select().from(schema.chats).where(eq(schema.chats.id, 7));
      expect(await prepared(tx, 'select % from "chats" where "chats"."id" = $1')).toBe(1);
      await tx.transaction(async (inner) => {
        await inner.select().from(schema.sessions).where(eq(schema.sessions.id, 7));
        expect(await prepared(inner, 'select % from "sessions" where "sessions"."id" = $1')).toBe(1);
      });
    });
  });

  it('binds a run-time list as one parameter: one statement for lists of any length (anyOf)', async () => {
    const { db } = database;
    const [user] = await db
      .insert(schema.users)
      .values({ username: 'anyof', lastActivityAt: new Date(), createdAt: new Date(), updatedAt: new Date() })
      .returning({ id: schema.users.id });
    const id = user?.id as number;
    for (const ids of [[id], [id, id + 1], [id + 1, id, id + 2], []]) {
      const rows = await db.select({ id: schema.users.id }).from(schema.users).where(anyOf(schema.users.id, ids));
      expect(rows.map((r) => r.id)).toEqual(ids.includes(id) ? [id] : []);
    }
    expect(await prepared(db, 'select "id" from "users" where "users"."id" = any($1)')).toBe(1);
    // The control: inArray makes a statement per length.
    for (const ids of [[id], [id, id + 1], [id + 1, id, id + 2]])
      await db.select({ id: schema.users.username }).from(schema.users).where(inArray(schema.users.id, ids));
    expect(await prepared(db, 'select "username" from "users" where "users"."id" in (%')).toBe(3);
  });

  it('drizzle alone would leave them unprepared (what the wrapper is for)', async () => {
    const raw = postgres(scratch.url, { max: 1, onnotice: () => {} });
    try {
      const db = drizzle(raw, { schema }) as unknown as Db;
      await db.select().from(schema.messages).where(eq(schema.messages.chatId, 7));
      expect(await prepared(db, 'select % from "messages" where "messages"."chat_id" = $1')).toBe(0);
    } finally {
      await raw.end();
    }
  });
});

/** DATABASE_STATEMENT_TIMEOUT_MS: a statement on the pool that runs past it is cancelled by PostgreSQL. */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))('the statement limit on PostgreSQL', () => {
  let app: TestApp;

  beforeAll(async () => {
    app = await startApp({ config: { databaseStatementTimeoutMs: 300 } });
  });
  afterAll(async () => app?.close());

  it('cancels a statement that runs past it (57014, statement timeout); the pool goes on', async () => {
    const err = await app.database.db.execute(sql`select pg_sleep(5)`).then(
      () => null,
      (e: unknown) => e as Error & { cause?: { code?: string; message?: string } },
    );
    expect(err?.cause).toMatchObject({ code: '57014', message: expect.stringContaining('statement timeout') });
    expect(rowsOf(await app.database.db.execute(sql`select pg_sleep(0.01), 1 as one`))).toEqual([
      expect.objectContaining({ one: 1 }),
    ]);
    expect(rowsOf(await app.database.db.execute(sql`show statement_timeout`))).toEqual([
      { statement_timeout: '300ms' },
    ]);
  });
});

/**
 * Migrations are exempt from statement limits (docs/operations.md), including those an operator
 * puts on the database role because the pooler refuses startup parameters (ALTER ROLE … SET
 * statement_timeout; here on the scratch database: the same mechanism, without touching a shared
 * role): the migration connection sets statement_timeout and lock_timeout to 0 itself. A statement
 * that runs long is stood in for by one that waits on a lock the test holds: another node's
 * migration (the advisory lock), or a migration statement behind a lock on the migrations table.
 *
 * No timing threshold of the test's own: the test holds the lock until PostgreSQL shows the
 * migration connection still waiting a whole second on it, ten times the database's limits of
 * 100 ms, which a connection under those limits is cancelled long before (the test then sees the
 * open fail, as it did before the fix); with the fix it waits for as long as the lock is held.
 */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))(
  'migrations under a role or database statement_timeout on PostgreSQL',
  () => {
    /** The limits an operator put on the database (the role's work alike). */
    const LIMITS = ["statement_timeout = '100ms'", "lock_timeout = '100ms'"];

    /** Resolves once a backend of this database has waited on a lock for a second, or `settled` has. */
    async function waitedASecondOr(pg: postgres.Sql, settled: Promise<unknown>): Promise<void> {
      let done = false;
      const stop = () => {
        done = true;
      };
      settled.then(stop, stop);
      while (!done) {
        const [row] = await pg<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock'
            and clock_timestamp() - query_start > interval '1 second'`;
        if ((row?.n ?? 0) > 0) return;
        await new Promise((r) => setTimeout(r, 20));
      }
    }

    it.each([
      [
        'waits for another node’s migration (the advisory lock) past the limits, then starts',
        '',
        (tx: postgres.TransactionSql) => tx`select pg_advisory_xact_lock(${MIGRATION_LOCK})`,
      ],
      [
        'runs a migration statement that takes longer than the limits (waiting on the migrations table) to its end',
        'create schema drizzle; create table drizzle.__drizzle_migrations (id serial primary key, hash text not null, created_at bigint)',
        (tx: postgres.TransactionSql) => tx.unsafe('lock table drizzle.__drizzle_migrations in access exclusive mode'),
      ],
    ])(
      '%s',
      async (_name, setup, lock) => {
        const scratch = await createScratchDatabase();
        // The test's own connection is exempt (startup parameters), so only the migration's is limited.
        const pg = postgres(scratch.url, {
          max: 2,
          onnotice: () => {},
          connection: { statement_timeout: 0, lock_timeout: 0 },
        });
        try {
          if (setup !== '') await pg.unsafe(setup).simple();
          const name = new URL(scratch.url).pathname.slice(1);
          for (const limit of LIMITS) await pg.unsafe(`alter database ${name} set ${limit}`);
          const holder = hold(pg, lock);
          await holder.ready;
          const opening = openDatabase({ url: scratch.url, dataDir: null, poolSize: 1, statementTimeoutMs: 0 });
          await waitedASecondOr(pg, opening);
          await holder.end();
          const opened = await opening.then(
            (database) => database,
            (e: unknown) => new Error(`the start failed: ${String((e as { cause?: unknown }).cause ?? e)}`),
          );
          if (opened instanceof Error) throw opened;
          try {
            expect(opened.kind).toBe('postgres');
            expect(
              rowsOf(await opened.db.execute(sql`select to_regclass('public.users') is not null as migrated`)),
            ).toEqual([{ migrated: true }]);
            // The pool (statementTimeoutMs 0: nothing sent) keeps the database's limit.
            expect(rowsOf(await opened.db.execute(sql`show statement_timeout`))).toEqual([
              { statement_timeout: '100ms' },
            ]);
          } finally {
            await opened.close();
          }
        } finally {
          await pg.end();
          await scratch.drop();
        }
      },
      60_000,
    );
  },
);

/**
 * Two transactions that lock the same rows in opposite orders: PostgreSQL aborts one as the
 * deadlock's victim (40P01), and the tracked database (platform/db/after-commit.ts) runs it again,
 * so both commit and neither caller sees the deadlock; the victim's first run leaves no work.
 */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))('a deadlock on PostgreSQL', () => {
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let database: Database;

  beforeAll(async () => {
    scratch = await createScratchDatabase();
    database = await openDatabase({ url: scratch.url, dataDir: null, poolSize: 4 });
    await database.db.execute(sql`create table deadlock_rows (id integer primary key, n integer not null)`);
    await database.db.execute(sql`insert into deadlock_rows values (1, 0), (2, 0)`);
  });
  afterAll(async () => {
    await database?.close();
    await scratch?.drop();
  });

  /** Both transactions hold their first row before either asks for its second. */
  async function opposite(db: Db) {
    let held = 0;
    let bothHeld: () => void = () => {};
    const barrier = new Promise<void>((resolve) => {
      bothHeld = resolve;
    });
    const runs: number[] = [];
    const done: number[] = [];
    const lockBoth = (first: number, second: number) =>
      db.transaction(async (tx) => {
        runs.push(first);
        await tx.execute(sql`update deadlock_rows set n = n + 1 where id = ${first}`);
        if (++held === 2) bothHeld();
        await barrier;
        await tx.execute(sql`update deadlock_rows set n = n + 1 where id = ${second}`);
        await afterCommit(tx, async () => {
          done.push(first);
        });
        return first;
      });
    const results = await Promise.allSettled([lockBoth(1, 2), lockBoth(2, 1)]);
    return { results, runs, done };
  }

  it('runs the victim again: both transactions commit once, and each one’s after-commit work runs once', async () => {
    const { results, runs, done } = await opposite(trackCommits(database.db));
    expect(results).toEqual([
      { status: 'fulfilled', value: 1 },
      { status: 'fulfilled', value: 2 },
    ]);
    expect(runs).toHaveLength(3); // the victim ran twice
    expect(done.sort()).toEqual([1, 2]);
    const rows = rowsOf<{ n: number }>(await database.db.execute(sql`select n from deadlock_rows order by id`));
    expect(rows.map((r) => r.n)).toEqual([2, 2]);
  });

  it('without it, one side fails with the deadlock (the case the retry is for)', async () => {
    const { results } = await opposite(database.db);
    const failed = results.filter((r) => r.status === 'rejected');
    expect(failed).toHaveLength(1);
    expect(isDeadlock((failed[0] as PromiseRejectedResult).reason)).toBe(true);
  });
});

/**
 * PGlite has no locking across processes: openDatabase takes DATA_DIR/pglite.lock first, so a
 * second server on the same directory fails at start instead of opening the live database.
 */
describe.skipIf(MODE !== 'embedded')('the embedded data directory lock', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const dataDir = () => {
    const d = seedDataDir(mkdtempSync(path.join(tmpdir(), 'parlor-lock-')));
    dirs.push(d);
    return d;
  };

  it('refuses a second open of the same DATA_DIR while the first is open, and allows it once closed', async () => {
    const dir = dataDir();
    const first = await openDatabase({ url: null, dataDir: dir });
    try {
      await expect(openDatabase({ url: null, dataDir: dir })).rejects.toThrow(
        `DATA_DIR ${dir} is in use by another process (pid ${process.pid})`,
      );
      // The first is untouched.
      expect(rowsOf(await first.db.execute(sql`select 1 as one`))).toEqual([{ one: 1 }]);
    } finally {
      await first.close();
    }
    expect(existsSync(path.join(dir, PGLITE_LOCK_FILE))).toBe(false);
    const again = await openDatabase({ url: null, dataDir: dir });
    await again.close();
  }, 60_000);

  it('closes once when closed twice at the same time, and frees the lock only when closed', async () => {
    const dir = dataDir();
    const database = await openDatabase({ url: null, dataDir: dir });
    // The shutdown cap's last resort can race the app's own close: both calls wait for one close.
    await expect(Promise.all([database.close(), database.close()])).resolves.toEqual([undefined, undefined]);
    expect(existsSync(path.join(dir, PGLITE_LOCK_FILE))).toBe(false);
    await database.close();
  }, 60_000);

  it('takes over the lock a crashed server left (its pid runs no more)', async () => {
    const dir = dataDir();
    const child = spawnSync(process.execPath, ['-e', '']);
    writeFileSync(path.join(dir, PGLITE_LOCK_FILE), `${child.pid}\n`);
    const database = await openDatabase({ url: null, dataDir: dir });
    try {
      // This pid, then (on Linux) this process's start time.
      expect(readFileSync(path.join(dir, PGLITE_LOCK_FILE), 'utf8').split(' ')[0]?.trim()).toBe(String(process.pid));
    } finally {
      await database.close();
    }
  }, 60_000);
});
