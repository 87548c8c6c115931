import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { drain } from '../../platform/drain.js';
import { formatMoment, type NotificationsService } from '../notifications/notifications.service.js';
import { tierTitle } from './subscriptions.rules.js';
import type { SubscriptionsStore } from './subscriptions.store.js';

/** How often every node looks for expired subscriptions (spec 3: "expiry → Basic, background task"). */
export const SWEEP_INTERVAL_MS = 60_000;
/** Users taken per transaction, so one sweep never holds many row locks for long. */
export const SWEEP_BATCH = 500;
/** Batches per tick at most (docs/operations.md "Data retention"): a backlog goes on at the next tick. */
export const SWEEP_MAX_BATCHES = 10;

export interface SweepDeps {
  db: Db;
  store: SubscriptionsStore;
  clock: Clock;
  notifications: Pick<NotificationsService, 'automatedMany' | 'publish'>;
  batchSize?: number;
  maxBatches?: number;
}

/**
 * The automatic downgrade: expired Trial and Premium users go back to Basic, with an audit entry
 * (actor system) and a "subscription expired" notification, written in the same transaction and
 * emitted after it commits. Safe to run on every node at once (see the store's SKIP LOCKED).
 */
export function makeSubscriptionSweep(deps: SweepDeps) {
  const { db, store, clock, notifications } = deps;
  const batchSize = deps.batchSize ?? SWEEP_BATCH;
  const maxBatches = deps.maxBatches ?? SWEEP_MAX_BATCHES;

  const runBatch = async (): Promise<number> => {
    const now = clock.now();
    const { count, notes } = await db.transaction(async (tx) => {
      const expired = await store.expireDue(now, batchSize, tx);
      if (expired.length === 0) return { count: 0, notes: [] };
      await store.recordExpiries(expired, now, tx);
      const written = await notifications.automatedMany(
        expired.map((e) => ({
          userId: e.userId,
          kind: 'subscription_expired' as const,
          vars: { tier: tierTitle(e.tier), until: formatMoment(e.expiresAt) },
        })),
        tx,
      );
      return { count: expired.length, notes: written };
    });
    notifications.publish(notes);
    return count;
  };

  /**
   * One tick: batches while they come back full, at most `maxBatches` (the next tick goes on with
   * a backlog); answers how many users were downgraded.
   */
  const run = (): Promise<number> => drain(batchSize, maxBatches, runBatch);

  // app.ts runs it every SWEEP_INTERVAL_MS with background.ts's `every`.
  return { run };
}

export type SubscriptionSweep = ReturnType<typeof makeSubscriptionSweep>;
