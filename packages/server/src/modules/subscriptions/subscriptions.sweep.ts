import { type PartFailure, partsFailed } from '../../platform/background.js';
import type { Clock } from '../../platform/clock.js';
import type { Db, SweepCursor } from '../../platform/db/index.js';
import { drain } from '../../platform/drain.js';
import { formatMoment, type NotificationsService } from '../notifications/notifications.service.js';
import { tierTitle } from './subscriptions.rules.js';
import type { SubscriptionsStore } from './subscriptions.store.js';

/** How often every node looks for expired subscriptions (spec 3: "expiry → Basic, background task"). */
export const SWEEP_INTERVAL_MS = 60_000;
/** Users read per batch and taken per transaction, so one sweep never holds many row locks for long. */
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

/** What the sweep's failures are named by (app.ts runs it as the `subscription-downgrade` task). */
const SWEEP_TASK = 'subscription-downgrade';

/**
 * The automatic downgrade: expired Trial and Premium users go back to Basic, with an audit entry
 * (actor system) and a "subscription expired" notification, written in the same transaction and
 * emitted after it commits. Safe to run on every node at once (see the store's SKIP LOCKED).
 */
export function makeSubscriptionSweep(deps: SweepDeps) {
  const { db, store, clock, notifications } = deps;
  const batchSize = deps.batchSize ?? SWEEP_BATCH;
  const maxBatches = deps.maxBatches ?? SWEEP_MAX_BATCHES;

  /** Downgrades those of `userIds` still due at `now` in one transaction; answers how many. */
  const expire = async (now: Date, userIds: number[]): Promise<number> => {
    const { count, notes } = await db.transaction(async (tx) => {
      const expired = await store.expireDue(now, userIds, tx);
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
   * A batch's users in one transaction; should it fail, each in a transaction of its own, so that
   * a user whose expiry cannot be written (its audit entry, its notification) holds up none of the
   * others: those that fail alone too are added to `failed`. When none does, the batch's own
   * failure is added (it failed for a reason no single user showed: it must not go unlogged).
   * Answers how many were downgraded.
   */
  const expireBatch = async (now: Date, userIds: number[], failed: PartFailure[]): Promise<number> => {
    try {
      return await expire(now, userIds);
    } catch (batchErr) {
      const before = failed.length;
      let count = 0;
      for (const userId of userIds) {
        try {
          count += await expire(now, [userId]);
        } catch (err) {
          failed.push({ err, part: { userId } });
        }
      }
      if (failed.length === before) failed.push({ err: batchErr, part: { users: userIds.length } });
      return count;
    }
  };

  /**
   * One tick: batches while they come back full, at most `maxBatches` (the next tick goes on with
   * a backlog), each reading on past the last, so users that failed are tried again at the next
   * tick only; answers how many users were downgraded. The users that failed are thrown together
   * once the tick is done (partsFailed), for the task to log.
   */
  const run = async (): Promise<number> => {
    let count = 0;
    let after: SweepCursor | undefined;
    const failed: PartFailure[] = [];
    await drain(batchSize, maxBatches, async () => {
      const now = clock.now();
      const due = await store.due(now, batchSize, after, db);
      after = due.at(-1);
      const userIds = due.map((d) => d.id);
      if (userIds.length > 0) count += await expireBatch(now, userIds, failed);
      return userIds.length;
    });
    if (failed.length > 0) throw partsFailed(SWEEP_TASK, failed);
    return count;
  };

  // app.ts runs it every SWEEP_INTERVAL_MS with background.ts's `every`.
  return { run };
}

export type SubscriptionSweep = ReturnType<typeof makeSubscriptionSweep>;
