import { AuditCodes } from '@parlor/protocol';
import { asc, eq } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import { type Database, openDatabase } from '../../platform/db/index.js';
import { auditLog, notifications, users } from '../../platform/db/schema.js';
import { makeAuditStore } from '../audit/audit.store.js';
import { makeNotificationsService } from '../notifications/notifications.service.js';
import { makeNotificationsStore } from '../notifications/notifications.store.js';
import { makeSubscriptionsStore } from './subscriptions.store.js';
import { makeSubscriptionSweep } from './subscriptions.sweep.js';

/** Module test: the sweep's SQL on a migrated in-memory PGlite, with a fake clock. */
let database: Database;
const clock = new FakeClock(Date.UTC(2026, 3, 1));
const published: number[] = [];

beforeAll(async () => {
  database = await openDatabase({ url: null, dataDir: null });
});
afterAll(async () => database?.close());
beforeEach(async () => {
  await database.db.delete(users);
  await database.db.delete(auditLog);
  published.length = 0;
});

function sweep(batchSize: number, maxBatches?: number, toUser: (userId: number) => void = (id) => published.push(id)) {
  const { db } = database;
  const service = makeNotificationsService({
    db,
    store: makeNotificationsStore(db),
    clock,
    audit: makeAuditStore(db, clock),
    users: { byId: async () => undefined },
    events: { toUser, onlineUserIds: async () => [] },
    log: { error: () => {} },
  });
  return makeSubscriptionSweep({
    db,
    store: makeSubscriptionsStore(),
    clock,
    notifications: service,
    batchSize,
    ...(maxBatches === undefined ? {} : { maxBatches }),
  });
}

/** Inserts a user with a tier and an expiry `offsetMs` from now (null: none). */
async function user(name: string, tier: number, offsetMs: number | null): Promise<number> {
  const now = clock.now();
  const [row] = await database.db
    .insert(users)
    .values({
      username: name,
      subscriptionTier: tier,
      subscriptionExpiresAt: offsetMs === null ? null : new Date(now.getTime() + offsetMs),
      subscriptionGrantedBy: 99,
      lastActivityAt: now,
      createdAt: now,
      updatedAt: now,
    })
    .returning({ id: users.id });
  if (!row) throw new Error('no row');
  return row.id;
}

const tierOf = async (id: number) => (await database.db.select().from(users).where(eq(users.id, id)))[0];

describe('the subscription sweep', () => {
  it('downgrades every expired Trial and Premium in batches, and nothing else', async () => {
    const expired = [
      await user('t1', 1, -1),
      await user('p1', 2, -86_400_000),
      await user('p2', 2, 0), // expires exactly now: expired
      await user('t2', 1, -5),
      await user('p3', 2, -7),
    ];
    const lifetime = await user('life', 3, null);
    const later = await user('p4', 2, 1); // one millisecond left
    const basic = await user('basic', 0, null);

    expect(await sweep(2).run()).toBe(5);

    for (const id of expired) {
      expect(await tierOf(id)).toMatchObject({
        subscriptionTier: 0,
        subscriptionExpiresAt: null,
        subscriptionGrantedBy: null,
        updatedAt: clock.now(),
      });
    }
    expect(await tierOf(lifetime)).toMatchObject({ subscriptionTier: 3, subscriptionExpiresAt: null });
    expect(await tierOf(later)).toMatchObject({ subscriptionTier: 2, subscriptionGrantedBy: 99 });
    expect(await tierOf(basic)).toMatchObject({ subscriptionTier: 0 });

    const audits = await database.db.select().from(auditLog).orderBy(asc(auditLog.targetUserId));
    expect(audits.map((a) => a.targetUserId)).toEqual([...expired].sort((a, b) => a - b));
    expect(audits[0]).toMatchObject({
      actorKind: 'system',
      actorId: null,
      code: AuditCodes.SUBSCRIPTION_REVOKE,
      action: 'expire',
      data: { tier: 1, expires_at: new Date(clock.now().getTime() - 1).toISOString() },
    });
    const notes = await database.db.select().from(notifications);
    expect(notes.map((n) => n.userId).sort()).toEqual([...expired].sort());
    expect(notes.every((n) => n.title === 'Subscription expired' && n.createdBy === null)).toBe(true);
    expect(published.sort()).toEqual([...expired].sort());

    expect(await sweep(2).run()).toBe(0);
    clock.advance(1);
    expect(await sweep(500).run()).toBe(1);
    expect(await tierOf(later)).toMatchObject({ subscriptionTier: 0 });
  });

  it('runs at most maxBatches full batches a tick; the next tick goes on with the backlog', async () => {
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await user(`b${i}`, 2, -2000 - i));
    expect(await sweep(2, 2).run()).toBe(4);
    expect(await sweep(2, 2).run()).toBe(1);
    expect(await sweep(2, 2).run()).toBe(0);
    for (const id of ids) expect(await tierOf(id)).toMatchObject({ subscriptionTier: 0 });
  });

  it('takes each user once when several sweeps run at the same time', async () => {
    const ids = [];
    for (let i = 0; i < 7; i++) ids.push(await user(`c${i}`, 2, -1000 - i));
    const counts = await Promise.all([sweep(2).run(), sweep(3).run(), sweep(500).run()]);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(7);
    const audits = await database.db.select().from(auditLog);
    expect(audits.map((a) => a.targetUserId).sort()).toEqual([...ids].sort());
  });

  it('reports a batch that failed for no one user (its notifications failed to go out after its commit)', async () => {
    const due = [await user('f1', 2, -1), await user('f2', 2, -1)];
    const run = sweep(10, undefined, () => {
      throw new Error('push failed');
    }).run();
    await expect(run).rejects.toMatchObject({ errors: [expect.objectContaining({ users: 2 })] });
    // The batch committed before its push failed: both are Basic, told in their notifications.
    for (const id of due) expect(await tierOf(id)).toMatchObject({ subscriptionTier: 0 });
  });
});
