import { AuditCodes } from '@parlor/protocol';
import { and, asc, eq, lte, sql } from 'drizzle-orm';
import { anyOf, pastCursor, type SweepCursor } from '../../platform/db/index.js';
import { auditLog, users } from '../../platform/db/schema.js';
import { noUsersChanged, type UsersChanged } from '../users/users.changes.js';
import type { Tx } from '../users/users.store.js';

/** A subscription the sweep ended: who, and what they had. */
export interface ExpiredSubscription {
  userId: number;
  tier: number;
  expiresAt: Date;
}

/**
 * Users whose Trial or Premium expired at `now`: the predicate of the partial index
 * users_subscription_expiry_idx (schema.ts). The tiers are literals, not parameters, so that the
 * planner can match the index's predicate in a prepared statement's generic plan too.
 */
function expiredAt(now: Date) {
  return and(sql`${users.subscriptionTier} in (1, 2)`, lte(users.subscriptionExpiresAt, now));
}

/**
 * Up to `limit` users whose Trial or Premium expired at `now`, oldest expiry first (then by id),
 * after `after` when given: what the sweep downgrades, each batch of a tick reading on from the
 * last, so users a batch could not downgrade are not read again before the next tick. Read without
 * a lock, through users_subscription_expiry_idx; expireDue claims the rows.
 */
export function subscriptionsDue(q: Tx, now: Date, limit: number, after?: SweepCursor) {
  return q
    .select({ id: users.id, at: sql<string>`${users.subscriptionExpiresAt}::text` })
    .from(users)
    .where(and(expiredAt(now), pastCursor(users.subscriptionExpiresAt, users.id, after)))
    .orderBy(asc(users.subscriptionExpiresAt), asc(users.id))
    .limit(limit);
}

/**
 * The SQL of the subscription sweep; grants and revokes go through the users store. `onChanged`
 * hears of the users the sweep downgraded (read caches, users.changes.ts), once its transaction commits.
 */
export function makeSubscriptionsStore(onChanged: UsersChanged = noUsersChanged) {
  return {
    /** The sweep's read of a batch (subscriptionsDue). */
    async due(now: Date, limit: number, after: SweepCursor | undefined, q: Tx): Promise<SweepCursor[]> {
      return await subscriptionsDue(q, now, limit, after);
    },

    /**
     * Sets those of `userIds` whose Trial or Premium has expired at `now` back to Basic, in one
     * statement. The rows are claimed with FOR UPDATE SKIP LOCKED, so sweeps on several nodes never
     * take the same user twice and never wait for each other (or for a grant holding the row).
     */
    async expireDue(now: Date, userIds: number[], tx: Tx): Promise<ExpiredSubscription[]> {
      const due = tx
        .select({ id: users.id, tier: users.subscriptionTier, expiresAt: users.subscriptionExpiresAt })
        .from(users)
        .where(and(anyOf(users.id, userIds), expiredAt(now)))
        .for('update', { skipLocked: true })
        .as('due');
      const rows = await tx
        .update(users)
        .set({ subscriptionTier: 0, subscriptionExpiresAt: null, subscriptionGrantedBy: null, updatedAt: now })
        .from(due)
        .where(eq(users.id, due.id))
        .returning({ userId: users.id, tier: due.tier, expiresAt: due.expiresAt });
      await onChanged(
        rows.map((r) => r.userId),
        tx,
      );
      // The WHERE above guarantees an expiry; the filter only narrows the type.
      return rows.filter((r): r is ExpiredSubscription => r.expiresAt !== null);
    },

    /** One audit entry per ended subscription (SUBSCRIPTION_REVOKE, action `expire`, the system as actor). */
    async recordExpiries(expired: ExpiredSubscription[], now: Date, tx: Tx): Promise<void> {
      if (expired.length === 0) return;
      await tx.insert(auditLog).values(
        expired.map((e) => ({
          actorKind: 'system',
          actorId: null,
          targetUserId: e.userId,
          code: AuditCodes.SUBSCRIPTION_REVOKE,
          action: 'expire',
          data: { tier: e.tier, expires_at: e.expiresAt.toISOString() },
          createdAt: now,
        })),
      );
    },
  };
}

export type SubscriptionsStore = ReturnType<typeof makeSubscriptionsStore>;
