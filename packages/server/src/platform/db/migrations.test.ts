import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS_DIR } from './index.js';

interface Journal {
  entries: { idx: number; tag: string; when: number }[];
}

const journal = JSON.parse(readFileSync(path.join(MIGRATIONS_DIR, 'meta/_journal.json'), 'utf8')) as Journal;

/**
 * Drizzle's migrator applies a migration only when its journal `when` is later than the newest one
 * a database has already run (its `created_at`), not by name: a migration stamped earlier than one
 * before it applies to a fresh database (every test) but is skipped, silently, on every deployment
 * that ran the one before. drizzle-kit stamps a new migration with the time it is generated, which
 * a clock behind the last entry's `when` (0016 is stamped 2026-11-27T05:20Z) puts too early.
 */
describe('the migration journal', () => {
  it('lists the migrations in order, each with its SQL file', () => {
    expect(journal.entries.map((e) => e.idx)).toEqual(journal.entries.map((_, i) => i));
    for (const e of journal.entries) {
      expect(e.tag.startsWith(String(e.idx).padStart(4, '0')), e.tag).toBe(true);
      expect(existsSync(path.join(MIGRATIONS_DIR, `${e.tag}.sql`)), e.tag).toBe(true);
    }
  });

  it('stamps every migration later than the one before it, so an upgraded database runs it', () => {
    const late = journal.entries.filter((e, i) => i > 0 && e.when <= (journal.entries[i - 1]?.when ?? 0));
    expect(late.map((e) => `${e.tag} (${new Date(e.when).toISOString()})`)).toEqual([]);
  });
});
