import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type Database, openDatabase, rowsOf } from '../../platform/db/index.js';
import { users } from '../../platform/db/schema.js';
import { hasPremium } from './users.presenter.js';
import { premiumAtSql } from './users.store.js';

/** Module test: the SQL form of the premium rule answers as hasPremium does, row by row. */
let database: Database;
beforeAll(async () => {
  database = await openDatabase({ url: null, dataDir: null });
});
afterAll(async () => database?.close());

it('premiumAtSql agrees with hasPremium for every tier and expiry around now', async () => {
  const now = new Date(Date.UTC(2026, 5, 1, 12));
  const expiries = [null, new Date(now.getTime() - 1000), now, new Date(now.getTime() + 1000)];
  const cases = [0, 1, 2].flatMap((tier) => expiries.map((expires) => ({ tier, expires })));
  const inserted = await database.db
    .insert(users)
    .values(
      cases.map((c, i) => ({
        username: `premium${i}`,
        subscriptionTier: c.tier,
        subscriptionExpiresAt: c.expires,
        lastActivityAt: now,
        createdAt: now,
        updatedAt: now,
      })),
    )
    .returning({
      id: users.id,
      subscriptionTier: users.subscriptionTier,
      subscriptionExpiresAt: users.subscriptionExpiresAt,
    });
  const at = sql`${now.toISOString()}::timestamptz`;
  const answers = rowsOf<{ id: number; premium: boolean }>(
    await database.db.execute(sql`select id, ${premiumAtSql(at)} as premium from users order by id`),
  );
  const expected = inserted.map((u) => ({ id: u.id, premium: hasPremium(u, now) }));
  expect(answers).toEqual(expected);
  // Both answers occur, so the comparison can tell the rules apart.
  expect(new Set(expected.map((e) => e.premium))).toEqual(new Set([true, false]));
});
