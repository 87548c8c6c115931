import {
  AuditCodes,
  type SubscriptionChangeResponse,
  type SubscriptionGrantBody,
  type SubscriptionRevokeBody,
} from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { lockActorAndTarget } from '../admin/admin.locks.js';
import { type ActorLevel, canActOn } from '../admin/admin.rules.js';
import type { Actor, AuditStore } from '../audit/audit.store.js';
import { formatMoment, type NotificationsService } from '../notifications/notifications.service.js';
import { effectiveSubscription } from '../users/users.presenter.js';
import type { UsersService } from '../users/users.service.js';
import type { Tx, UserRow, UsersStore } from '../users/users.store.js';
import { planGrant, tierTitle } from './subscriptions.rules.js';
import type { SubscriptionsStore } from './subscriptions.store.js';

export interface SubscriptionsDeps {
  db: Db;
  clock: Clock;
  usersStore: Pick<UsersStore, 'update' | 'hasAudit' | 'byId'>;
  users: Pick<UsersService, 'subscriptionOf'>;
  notifications: Pick<NotificationsService, 'automated' | 'publish'>;
  audit: AuditStore;
  /** The sweep's record of an ended subscription, written by a grant that replaces one the sweep has not reached. */
  expiries: Pick<SubscriptionsStore, 'recordExpiries'>;
}

/** Subscription grant and revoke (spec 2.11, 4.8): the operator, or Admins on users below them. */
export function makeSubscriptionsService(deps: SubscriptionsDeps) {
  const { db, clock, usersStore, users, notifications, audit, expiries } = deps;

  /**
   * A Trial or Premium that ended before `now` but that the sweep has not downgraded yet: the
   * sweep writes its `expire` entry and "Subscription expired" when it gets there, so a change
   * that replaces it writes them first, as the sweep would have (it no longer finds the row).
   */
  const recordLapsed = async (target: UserRow, now: Date, tx: Tx) => {
    const { subscriptionTier: tier, subscriptionExpiresAt: expiresAt } = target;
    if ((tier !== 1 && tier !== 2) || expiresAt === null || expiresAt > now) return null;
    await expiries.recordExpiries([{ userId: target.id, tier, expiresAt }], now, tx);
    return notifications.automated(
      target.id,
      'subscription_expired',
      { tier: tierTitle(tier), until: formatMoment(expiresAt) },
      tx,
    );
  };

  /**
   * Locks the target row for the change, and a user caller's with it (lockActorAndTarget: id
   * order, one statement), and applies the level rule on the caller's level as read under its
   * lock, not the one its session read when the request began: a caller demoted, banned or
   * deleted meanwhile gets 403 and nothing is written (docs/api.md, Subscriptions). An anonymous
   * stranger is no user to subscribe (matchmaking keeps it at the free slot, it reads no
   * notifications): 404, as for an unknown id. `now` is the time once the row is held, which the
   * change decides and stamps on: a Trial or Premium that reached its expiry while this waited for
   * the row has ended (subscriptions end exactly at their deadline).
   */
  const lockTarget = async (
    actor: Actor,
    actorLevel: ActorLevel,
    userId: number,
    tx: Tx,
  ): Promise<{ target: UserRow; now: Date }> => {
    const { level, target } = await lockActorAndTarget(tx, actor, actorLevel, userId, clock);
    if (!target || target.isStranger) throw appError('ERR_USER_NOT_FOUND');
    if (!canActOn(level, target.permissionLevel)) throw appError('ERR_FORBIDDEN');
    return { target, now: clock.now() };
  };

  /** The grant's plan counted from `now`; a bad `duration_days` answers 400 on it. */
  const planAt = (body: SubscriptionGrantBody, now: Date) => {
    const plan = planGrant(body.tier, body.duration_days, now);
    if (typeof plan === 'string')
      throw appError('ERR_VALIDATION', undefined, { errors: [{ path: 'body/duration_days', message: plan }] });
    return plan;
  };

  /**
   * The answer: the target's status as the change's transaction left it, read under its lock (a
   * deletion right after the commit cannot turn the committed change into an error).
   */
  const answer = async (target: UserRow, tx: Tx): Promise<SubscriptionChangeResponse> => {
    const written = (await usersStore.byId(target.id, tx)) ?? target;
    return { user_id: target.id, subscription: await users.subscriptionOf(written, tx) };
  };

  return {
    /**
     * Sets the tier as asked, replacing whatever the user had. A trial is refused when the audit
     * log shows one was ever granted (checked under the user's row lock, so two grants cannot race).
     * A Trial or Premium it replaces that had already ended is recorded as expired first (recordLapsed).
     * The new expiry counts from the time the row is held (lockTarget), as does every decision on
     * the target's subscription, and the caller's own state (lockActorAndTarget reads the clock once
     * it holds the rows: a caller whose timeout ended while it waited is refused nothing).
     */
    async grant(actor: Actor, actorLevel: ActorLevel, body: SubscriptionGrantBody) {
      // A bad request is refused before it locks anything.
      planAt(body, clock.now());
      const { note, status } = await db.transaction(async (tx) => {
        const { target, now } = await lockTarget(actor, actorLevel, body.user_id, tx);
        const plan = planAt(body, now);
        if (
          plan.action === 'trial' &&
          (await usersStore.hasAudit(target.id, AuditCodes.SUBSCRIPTION_GRANT, 'trial', tx))
        )
          throw appError('ERR_TRIAL_ALREADY_USED');
        const lapsed = await recordLapsed(target, now, tx);
        await usersStore.update(
          target.id,
          {
            subscriptionTier: plan.tier,
            subscriptionExpiresAt: plan.expiresAt,
            subscriptionGrantedBy: actor.kind === 'user' ? actor.id : null,
            updatedAt: now,
          },
          tx,
        );
        await audit.record(
          {
            actor,
            code: AuditCodes.SUBSCRIPTION_GRANT,
            action: plan.action,
            targetUserId: target.id,
            reason: body.reason ?? null,
            data: { tier: plan.tier, expires_at: plan.expiresAt ? plan.expiresAt.toISOString() : null },
          },
          tx,
        );
        const until = plan.expiresAt ? formatMoment(plan.expiresAt) : '';
        const note = await (plan.action === 'trial'
          ? notifications.automated(target.id, 'trial_started', { until }, tx)
          : notifications.automated(
              target.id,
              // Tiers rank by their number (Basic, Trial, Premium, Lifetime); the one in force now.
              plan.tier < effectiveSubscription(target, now).tier ? 'subscription_changed' : 'subscription_upgraded',
              { tier: tierTitle(plan.tier), until: plan.expiresAt ? `until ${until}` : 'with no expiry' },
              tx,
            ));
        return { note: lapsed ? [lapsed, note] : [note], status: await answer(target, tx) };
      });
      notifications.publish(note);
      return status;
    },

    /**
     * Back to Basic. Revoking from a user who is already Basic changes nothing and records nothing
     * (idempotent, so a retried CLI call is harmless); the answer is the status either way. Basic
     * is the tier that applies now (once the row is held: lockTarget): a Trial or Premium past its
     * expiry that the sweep has not yet downgraded is Basic already, so it is left to the sweep,
     * which writes its `expire` entry and the "Subscription expired" notification as for anyone else.
     */
    async revoke(actor: Actor, actorLevel: ActorLevel, body: SubscriptionRevokeBody) {
      const { note, status } = await db.transaction(async (tx) => {
        const { target, now } = await lockTarget(actor, actorLevel, body.user_id, tx);
        if (effectiveSubscription(target, now).tier === 0) return { note: null, status: await answer(target, tx) };
        await usersStore.update(
          target.id,
          { subscriptionTier: 0, subscriptionExpiresAt: null, subscriptionGrantedBy: null, updatedAt: now },
          tx,
        );
        await audit.record(
          {
            actor,
            code: AuditCodes.SUBSCRIPTION_REVOKE,
            action: 'revoke',
            targetUserId: target.id,
            reason: body.reason ?? null,
            // The tier taken away, so the history reads "revoke Premium".
            data: {
              tier: target.subscriptionTier,
              expires_at: target.subscriptionExpiresAt ? target.subscriptionExpiresAt.toISOString() : null,
            },
          },
          tx,
        );
        const note = await notifications.automated(
          target.id,
          'subscription_revoked',
          { tier: tierTitle(target.subscriptionTier) },
          tx,
        );
        return { note, status: await answer(target, tx) };
      });
      if (note) notifications.publish(note);
      return status;
    },
  };
}

export type SubscriptionsService = ReturnType<typeof makeSubscriptionsService>;
