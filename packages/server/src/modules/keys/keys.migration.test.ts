import { readFileSync } from 'node:fs';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIGRATIONS_DIR } from '../../platform/db/index.js';

const TAG = '0012_session_key_unique';
const journal = JSON.parse(readFileSync(path.join(MIGRATIONS_DIR, 'meta/_journal.json'), 'utf8')) as {
  entries: { tag: string }[];
};
const sqlOf = (tag: string) => readFileSync(path.join(MIGRATIONS_DIR, `${tag}.sql`), 'utf8');

/** A database at the migration before TAG, with duplicate keys as earlier versions let them be. */
const db = new PGlite();
beforeAll(async () => {
  const tags = journal.entries.map((e) => e.tag);
  expect(tags).toContain(TAG);
  for (const tag of tags.slice(0, tags.indexOf(TAG))) await db.exec(sqlOf(tag));
  await db.exec(`
    insert into users (id, username, last_activity_at, created_at, updated_at)
      values (1, 'victim', now(), now(), now()), (2, 'other', now(), now(), now());
    insert into sessions (id, user_id, token_hash, token_suffix, created_at, expires_at, ended_at, client_ip,
        user_agent, geo, last_seen_at) values
      (10, 1, 'h10', 's10', now(), now() + interval '1 day', null, 'ip', 'ua', '{}', now()),
      (11, 2, 'h11', 's11', now(), now() + interval '1 day', null, 'ip', 'ua', '{}', now()),
      (12, 2, 'h12', 's12', now(), now() + interval '1 day', null, 'ip', 'ua', '{}', now()),
      (20, 1, 'h20', 's20', now(), now() - interval '1 day', null, 'ip', 'ua', '{}', now()),
      (21, 2, 'h21', 's21', now(), now() + interval '1 day', null, 'ip', 'ua', '{}', now()),
      (30, 1, 'h30', 's30', now(), now() + interval '1 day', null, 'ip', 'ua', '{}', now());
    insert into session_keys (session_id, user_id, public_key, updated_at) values
      -- Registered by the victim first, then by two sessions of another user.
      (10, 1, 'KEY_A', now() - interval '3 hours'),
      (12, 2, 'KEY_A', now() - interval '1 hour'),
      (11, 2, 'KEY_A', now() - interval '2 hours'),
      -- The older registration's session expired: the live one keeps the key.
      (20, 1, 'KEY_B', now() - interval '2 hours'),
      (21, 2, 'KEY_B', now() - interval '1 hour'),
      -- No duplicate.
      (30, 1, 'KEY_C', now());
  `);
  await db.exec(sqlOf(TAG));
});
afterAll(() => db.close());

describe(`migration ${TAG}`, () => {
  it('keeps one row per public key: a live session before others, then the oldest registration', async () => {
    const rows = await db.query<{ session_id: number; public_key: string }>(
      'select session_id, public_key from session_keys order by public_key, session_id',
    );
    expect(rows.rows).toEqual([
      { session_id: 10, public_key: 'KEY_A' },
      { session_id: 21, public_key: 'KEY_B' },
      { session_id: 30, public_key: 'KEY_C' },
    ]);
  });

  it('then refuses a second session with a key already held', async () => {
    await expect(
      db.exec(`insert into session_keys (session_id, user_id, public_key, updated_at) values (11, 2, 'KEY_C', now())`),
    ).rejects.toMatchObject({ code: '23505' });
  });
});
