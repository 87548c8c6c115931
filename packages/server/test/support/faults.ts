import type { TestApp } from './app.js';

let faultCounter = 0;

/**
 * Makes the database refuse the inserts into `table` whose new row matches `when` (SQL over NEW),
 * as a failing disk or a constraint would: a real failure in the middle of a write, on PGlite and
 * PostgreSQL alike. Returns what lifts it; lift it in `finally`.
 */
export async function failInserts(app: TestApp, table: string, when: string): Promise<() => Promise<void>> {
  faultCounter += 1;
  const name = `parlor_test_fault_${faultCounter}`;
  const run = (statement: string) => app.database.db.execute(statement as never);
  await run(
    `create function ${name}() returns trigger language plpgsql as $$ begin raise exception 'injected fault'; end $$`,
  );
  await run(`create trigger ${name} before insert on ${table} for each row when (${when}) execute function ${name}()`);
  return async () => {
    await run(`drop trigger ${name} on ${table}`);
    await run(`drop function ${name}()`);
  };
}

/** Rows of a SQL count, whichever driver answered. */
export async function countRows(app: TestApp, query: string): Promise<number> {
  const res = (await app.database.db.execute(query as never)) as unknown as
    | { rows: { n: string | number }[] }
    | { n: string | number }[];
  const rows = 'rows' in res ? res.rows : res;
  return Number(rows[0]?.n ?? 0);
}
