import { expect } from 'vitest';
import { every } from '../../src/platform/background.js';
import type { TestApp } from './app.js';
import { captureLog, LEVEL, type LogLine } from './logs.js';

let faultCounter = 0;

/**
 * Makes the database refuse the writes (`insert`, `update` or `delete`) to `table` whose row matches
 * `when` (SQL over NEW for an insert, OLD for an update or a delete), as a failing disk or a constraint would: a real
 * failure in the middle of a write, on PGlite and PostgreSQL alike. Returns what lifts it.
 */
async function failWrites(
  app: TestApp,
  write: 'insert' | 'update' | 'delete',
  table: string,
  when: string,
): Promise<() => Promise<void>> {
  faultCounter += 1;
  const name = `parlor_test_fault_${faultCounter}`;
  const run = (statement: string) => app.database.db.execute(statement as never);
  await run(
    `create function ${name}() returns trigger language plpgsql as $$ begin raise exception 'injected fault'; end $$`,
  );
  await run(
    `create trigger ${name} before ${write} on ${table} for each row when (${when}) execute function ${name}()`,
  );
  return async () => {
    await run(`drop trigger ${name} on ${table}`);
    await run(`drop function ${name}()`);
  };
}

/**
 * Makes the database refuse the inserts into `table` whose new row matches `when` (SQL over NEW).
 * Returns what lifts it; lift it in `finally`.
 */
export function failInserts(app: TestApp, table: string, when: string): Promise<() => Promise<void>> {
  return failWrites(app, 'insert', table, when);
}

/**
 * Makes the database refuse the updates of the `table` rows that match `when` (SQL over OLD): a
 * row a sweep cannot write. Returns what lifts it; lift it in `finally`.
 */
export function failUpdates(app: TestApp, table: string, when: string): Promise<() => Promise<void>> {
  return failWrites(app, 'update', table, when);
}

/**
 * Makes the database refuse the deletes of the `table` rows that match `when` (SQL over OLD): rows a
 * sweep cannot delete. Returns what lifts it; lift it in `finally`.
 */
export function failDeletes(app: TestApp, table: string, when: string): Promise<() => Promise<void>> {
  return failWrites(app, 'delete', table, when);
}

/**
 * Runs `task` once as a node runs its background task `name` (background.ts `every`), with a
 * logger of the production shape, and answers the lines that tick logged: what an operator reads
 * of it (a run that throws is logged as `background task failed`).
 */
export async function loggedTick(name: string, task: () => Promise<unknown>): Promise<LogLine[]> {
  const captured = captureLog();
  let run: Promise<unknown> | undefined;
  let started!: () => void;
  const start = new Promise<void>((resolve) => {
    started = resolve;
  });
  const stop = every(
    1,
    name,
    () => {
      run = task();
      started();
      return run;
    },
    captured.log,
  );
  await start;
  // Settled, the run's log line follows at once; stop waits for it and starts no other run.
  await run?.catch(() => {});
  await stop();
  return captured.lines();
}

/**
 * Asserts that a tick of `task` logged exactly one line: the runner's `background task failed`
 * at error level, naming the one part that failed (`{step}` or `{userId}`) with the database's
 * injected fault as its cause.
 */
export function expectOnePartFailed(lines: LogLine[], task: string, part: Record<string, unknown>): void {
  expect(lines).toEqual([
    expect.objectContaining({
      level: LEVEL.error,
      msg: 'background task failed',
      task,
      err: expect.objectContaining({
        errors: [expect.objectContaining({ ...part, cause: expect.anything() })],
      }),
    }),
  ]);
  expect(JSON.stringify(lines[0]?.err)).toContain('injected fault');
}

/** Rows of a SQL count, whichever driver answered. */
export async function countRows(app: TestApp, query: string): Promise<number> {
  const res = (await app.database.db.execute(query as never)) as unknown as
    | { rows: { n: string | number }[] }
    | { n: string | number }[];
  const rows = 'rows' in res ? res.rows : res;
  return Number(rows[0]?.n ?? 0);
}
