import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { generateKeyPair } from '@parlor/sdk';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { isUsableX25519Key } from '../src/modules/keys/keys.service.js';
import { platformState } from '../src/modules/moderation/moderation.store.js';
import { schema } from '../src/platform/db/index.js';
import { MODE } from './support/app.js';
import { createScratchDatabase } from './support/services.js';

const MIGRATIONS = path.resolve(import.meta.dirname, '../drizzle');

/** Runs one migration file as the migrator does: statement by statement. */
async function apply(client: postgres.Sql, file: string): Promise<void> {
  const text = readFileSync(path.join(MIGRATIONS, file), 'utf8');
  for (const statement of text.split('--> statement-breakpoint')) {
    if (statement.trim()) await client.unsafe(statement);
  }
}

/**
 * A scratch database of the describe block's own (dropped after it) and its one connection, for a
 * migration's test: `client()` answers the connection once the block has started.
 */
function scratchClient(): () => postgres.Sql {
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>> | undefined;
  let sql: postgres.Sql | undefined;
  beforeAll(async () => {
    scratch = await createScratchDatabase();
    sql = postgres(scratch.url, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await sql?.end({ timeout: 1 });
    await scratch?.drop();
  });
  return () => {
    if (!sql) throw new Error('the scratch database is not open yet');
    return sql;
  };
}

/** Applies, in order, every migration before `file`, which must be one of them. */
async function applyBefore(client: postgres.Sql, file: string): Promise<void> {
  const files = readdirSync(MIGRATIONS)
    .filter((f) => f.endsWith('.sql'))
    .sort();
  expect(files).toContain(file);
  for (const f of files.filter((f) => f < file)) await apply(client, f);
}

/**
 * Migration 0010 derives every punished user's state again in SQL of its own: it must give what
 * the server's platformState gives, for a database an earlier version left behind (a ban that a
 * later timeout overwrote, a timeout outlasting a temporary ban, a stale state).
 */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))('migration 0010 (users state)', () => {
  const scratch = scratchClient();

  it('writes the state, its end and what follows it as platformState derives them', async () => {
    const client = scratch();
    await applyBefore(client, '0010_follow_on_state.sql');
    // Users as an earlier version could leave them, with their records (minutes from now).
    const cases: [string, number, number | null, [string, number | null][]][] = [
      // name, stored state, stored end, records: type, end
      [
        'temp ban, longer timeout',
        2,
        60,
        [
          ['PLATFORM_BAN', 60],
          ['PLATFORM_TIMEOUT', 120],
          ['PLATFORM_TIMEOUT', 30],
        ],
      ],
      [
        'temp ban, shorter timeout',
        2,
        60,
        [
          ['PLATFORM_BAN', 60],
          ['PLATFORM_TIMEOUT', 30],
        ],
      ],
      [
        'permanent ban and timeout',
        2,
        null,
        [
          ['PLATFORM_BAN', null],
          ['PLATFORM_TIMEOUT', null],
        ],
      ],
      [
        'ban overwritten by a timeout',
        1,
        10,
        [
          ['PLATFORM_BAN', null],
          ['PLATFORM_TIMEOUT', 10],
        ],
      ],
      ['stale timeout', 1, -10, [['PLATFORM_TIMEOUT', -10]]],
      [
        'temp ban, permanent timeout',
        2,
        5,
        [
          ['PLATFORM_BAN', 5],
          ['PLATFORM_TIMEOUT', null],
        ],
      ],
      [
        'timeouts only',
        1,
        180,
        [
          ['PLATFORM_TIMEOUT', 180],
          ['PLATFORM_TIMEOUT', 20],
        ],
      ],
      ['nothing', 0, null, []],
    ];
    const at = (minutes: number | null) => (minutes === null ? null : new Date(Date.now() + minutes * 60_000));
    const ids: number[] = [];
    for (const [name, state, ends, records] of cases) {
      const [row] = await client<{ id: number }[]>`
        insert into users (username, state, state_expires_at, last_activity_at, created_at, updated_at)
        values (${name}, ${state}, ${at(ends)}, now(), now(), now()) returning id`;
      const id = row?.id as number;
      ids.push(id);
      for (const [type, end] of records)
        await client`insert into moderation_actions (user_id, action_type, expires_at, created_at)
          values (${id}, ${type}, ${at(end)}, now())`;
    }
    await apply(client, '0010_follow_on_state.sql');

    const db = drizzle(client, { schema });
    const { users } = schema;
    const derived = platformState(users.id, new Date());
    const rows = await db
      .select({
        id: users.id,
        stored: sql<string>`json_build_array(${users.state}, ${users.stateExpiresAt}, ${users.thenState}, ${users.thenStateExpiresAt})::text`,
        derived: sql<string>`json_build_array(${derived.state}, ${derived.stateExpiresAt}, ${derived.thenState}, ${derived.thenStateExpiresAt})::text`,
      })
      .from(users)
      .orderBy(users.id);
    expect(rows.map((r) => r.id)).toEqual(ids);
    for (const [i, r] of rows.entries()) expect(r.stored, cases[i]?.[0]).toBe(r.derived);
    // And what each case reads now (state, then-state).
    const states = await client<{ state: number; then_state: number }[]>`
      select state, then_state from users order by id`;
    expect(states.map((s) => [s.state, s.then_state])).toEqual([
      [2, 1],
      [2, 0],
      [2, 0],
      [2, 0],
      [0, 0],
      [2, 1],
      [1, 0],
      [0, 0],
    ]);
  });
});

/**
 * Migration 0016 deletes the session keys an earlier version took that are not written as X25519
 * writes them (the rule of the key registration since): their sessions are out of every key ring
 * from then on, and the keys written canonically stay, up to the last one below 2^255 - 19.
 */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))('migration 0016 (canonical session keys)', () => {
  const scratch = scratchClient();

  it('deletes the rows of keys with the top bit set, u of 2^255 - 19 or more, or non-canonical base64, and keeps the rest', async () => {
    const client = scratch();
    await applyBefore(client, '0016_session_key_canonical.sql');
    const real = Buffer.from(generateKeyPair().publicKey);
    /** 32 bytes, little-endian: `low` first, then 30 bytes of `middle`, then `high`. */
    const u = (low: number, middle: number, high: number) => Buffer.from([low, ...Array(30).fill(middle), high]);
    const topBit = Buffer.from(real);
    topBit[31] = (topBit[31] ?? 0) | 0x80;
    const realText = real.toString('base64');
    // The last character before the padding carries two unused bits: set one.
    const last = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
    const trailing = `${realText.slice(0, 42)}${last[last.indexOf(realText[42] as string) + 1]}=`;
    const cases: [string, string, boolean][] = [
      // name, stored text, kept
      ['canonical', realText, true],
      ['top bit set', topBit.toString('base64'), false],
      ['2^255 - 20 (below p)', u(0xec, 0xff, 0x7f).toString('base64'), true],
      ['2^255 - 19 (p)', u(0xed, 0xff, 0x7f).toString('base64'), false],
      ['p + 1', u(0xee, 0xff, 0x7f).toString('base64'), false],
      ['2^255 - 1', u(0xff, 0xff, 0x7f).toString('base64'), false],
      [
        'below p, its low byte above',
        Buffer.from([0xff, 0xfe, ...Array(29).fill(0xff), 0x7f]).toString('base64'),
        true,
      ],
      ['unused bits set', trailing, false],
    ];
    const [user] = await client<{ id: number }[]>`
      insert into users (username, last_activity_at, created_at, updated_at)
      values ('keys', now(), now(), now()) returning id`;
    const sessions: number[] = [];
    for (const [name, text] of cases) {
      const [session] = await client<{ id: number }[]>`
        insert into sessions (user_id, token_hash, token_suffix, created_at, expires_at, client_ip, user_agent, geo, last_seen_at)
        values (${user?.id as number}, ${name}, ${name.slice(0, 6)}, now(), now() + interval '1 day', '127.0.0.1', 'test', '{}'::jsonb, now())
        returning id`;
      sessions.push(session?.id as number);
      await client`insert into session_keys (session_id, user_id, public_key, updated_at)
        values (${session?.id as number}, ${user?.id as number}, ${text}, now())`;
    }
    await apply(client, '0016_session_key_canonical.sql');

    const kept = await client<{ session_id: number; public_key: string }[]>`
      select session_id, public_key from session_keys order by session_id`;
    expect(kept).toEqual(
      cases.flatMap(([, text, keep], i) => (keep ? [{ session_id: sessions[i] as number, public_key: text }] : [])),
    );
    // The same line as the key registration's check of the bytes (the low-order key aside, which it
    // refuses for another reason; the text's unused bits are its body schema's to refuse).
    for (const [name, text, keep] of cases)
      if (name !== '2^255 - 20 (below p)' && name !== 'unused bits set')
        expect(isUsableX25519Key(text), name).toBe(keep);
  });
});

/**
 * Migration 0017 revokes the live invites to private chats whose creator's account an earlier
 * version deleted without revoking them (deletions do since): no join honoured them, yet they held
 * places of their chat's invite limit. Invites to public chats, of live accounts, and dead ones
 * stay as they are.
 */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))(
  'migration 0017 (invites of deleted accounts)',
  () => {
    const scratch = scratchClient();

    it('revokes the live invites of deleted accounts to private chats, and only those', async () => {
      const client = scratch();
      await applyBefore(client, '0017_invite_creator_index.sql');
      const [live] = await client<{ id: number }[]>`
      insert into users (username, last_activity_at, created_at, updated_at)
      values ('still_here', now(), now(), now()) returning id`;
      const gone = (live?.id as number) + 1000;
      const chat = async (type: string) => {
        const [row] = await client<{ id: number }[]>`
        insert into chats (type, name, created_at, updated_at) values (${type}, ${type}, now(), now()) returning id`;
        return row?.id as number;
      };
      const privateChat = await chat('private');
      const publicChat = await chat('public');
      const cases: [string, number, number, string | null, number | null, number, boolean][] = [
        // code, chat, creator, expires in, max uses, uses, revoked by the migration
        ['gone-private', privateChat, gone, null, null, 0, true],
        ['gone-private-later', privateChat, gone, '1 day', 5, 1, true],
        ['gone-private-expired', privateChat, gone, '-1 day', null, 0, false],
        ['gone-private-used-up', privateChat, gone, null, 1, 1, false],
        ['gone-public', publicChat, gone, null, null, 0, false],
        ['live-private', privateChat, live?.id as number, null, null, 0, false],
      ];
      for (const [code, chatId, creator, expiresIn, maxUses, uses] of cases)
        await client`insert into chat_invites (code, chat_id, created_by, max_uses, uses, expires_at, created_at)
        values (${code}, ${chatId}, ${creator}, ${maxUses}, ${uses},
          ${expiresIn === null ? null : client`now() + ${expiresIn}::interval`}, now())`;
      await apply(client, '0017_invite_creator_index.sql');

      const rows = await client<{ code: string; revoked: boolean }[]>`
      select code, revoked_at is not null as revoked from chat_invites order by code`;
      expect(rows).toEqual(
        cases.map(([code, , , , , , revoked]) => ({ code, revoked })).sort((a, b) => a.code.localeCompare(b.code)),
      );
    });
  },
);
