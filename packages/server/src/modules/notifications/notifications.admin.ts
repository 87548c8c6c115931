import { randomUUID } from 'node:crypto';
import {
  type AdminNotificationBody,
  type AdminNotificationCreated,
  type AdminNotificationDeleted,
  AuditCodes,
} from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import { callerLevelOf, lockActorAndTarget } from '../admin/admin.locks.js';
import { type ActorLevel, canActOn, mayAdminister } from '../admin/admin.rules.js';
import type { Actor } from '../audit/audit.store.js';
import type { CallerRead } from '../users/users.caller.js';
import type { Tx } from '../users/users.store.js';
import { toNotification } from './notifications.presenter.js';
import { richTextProblem } from './notifications.richtext.js';
import type { NotificationsDeps } from './notifications.service.js';
import type { NotificationRow } from './notifications.store.js';

/** Copies of a broadcast its deletion removes per statement: no statement grows with the user base. */
export const BROADCAST_DELETE_BATCH = 5000;

/**
 * The admin notifications of spec 2.7 (801-803): one user's or a broadcast to every user, and
 * their deletion. `publish` emits notification:new once a write has committed.
 */
export function makeAdminNotifications(
  deps: NotificationsDeps,
  publish: (rows: NotificationRow | readonly NotificationRow[]) => void,
) {
  const { db, store, clock, events, audit, users, log } = deps;

  /** Tells each connected recipient of a broadcast about its own copy (each copy has its own id). */
  const publishBroadcast = async (broadcastId: string) => {
    const online = await events.onlineUserIds();
    for (const row of await store.broadcastCopies(broadcastId, online)) events.toUser(row.userId, toNotification(row));
  };

  const assertValidBody = (body: string) => {
    const problem = richTextProblem(body);
    if (problem) throw appError('ERR_VALIDATION', undefined, { errors: [{ path: 'body/body', message: problem }] });
  };

  /** The level rule of spec 2.11 applies to notifications aimed at one user. */
  const assertMayTarget = (actorLevel: ActorLevel, target: { permissionLevel: number } | undefined) => {
    if (!target) throw appError('ERR_USER_NOT_FOUND');
    if (!canActOn(actorLevel, target.permissionLevel)) throw appError('ERR_FORBIDDEN');
  };

  /**
   * A new targeted notification: as assertMayTarget, and an anonymous stranger, which can never
   * read notifications, is no recipient (404, as for an unknown id; docs/api.md, Notifications).
   */
  const assertMayNotify = (
    actorLevel: ActorLevel,
    target: { permissionLevel: number; isStranger: boolean } | undefined,
  ) => {
    if (target?.isStranger) throw appError('ERR_USER_NOT_FOUND');
    assertMayTarget(actorLevel, target);
  };

  /**
   * A broadcast's sender or deleter may administer on its level as stored (callerLevelOf), not
   * only on the one its session read when the request began (docs/api.md, "Levels as they are at
   * the commit"): 403 ERR_FORBIDDEN otherwise. `read`: whether the caller's row is held until the
   * commit (CallerRead); given `db` for `tx`, a read before any transaction.
   */
  const assertStoredAdmin = async (tx: Tx, actor: Actor, actorLevel: ActorLevel, read: CallerRead) => {
    if (!mayAdminister(await callerLevelOf(tx, actor, actorLevel, clock, read))) throw appError('ERR_FORBIDDEN');
  };

  /**
   * Deletes every copy of a broadcast, `row` being the copy named (803).
   *
   * All copies but the kept ones go first, `broadcastDeleteBatch` a statement, each committed on its
   * own so that neither a statement nor a transaction grows with the user base. The batches wait
   * for copies other transactions hold (a recipient marking its copy read): a copy is never
   * skipped, and the loop ends only once no copy but the kept ones is left.
   *
   * Kept to the end, then deleted with the audit entry in one transaction: the named copy (so a
   * deletion cut short by an error or a crash is finished by asking again with the same id) and
   * the broadcast's lowest copy, its anchor, which every deletion of the broadcast keeps whichever
   * copy it names. That transaction decides between concurrent deletions of one broadcast, under
   * the broadcast's lock: the first to get there answers 200 with the one audit entry; a later one
   * finds the deletion recorded and answers 404, as for a broadcast already gone.
   *
   * The caller's level as stored decides before the first batch (a batch commits at once, so a
   * caller demoted before the request deletes no copy) and again in the final transaction, its
   * row held there until the commit: a caller demoted while the batches ran answers 403 and the
   * kept copies stay, with no audit entry, until a deletion by an admin finishes it.
   */
  const removeBroadcast = async (
    actor: Actor,
    actorLevel: ActorLevel,
    row: NotificationRow,
    broadcastId: string,
  ): Promise<AdminNotificationDeleted> => {
    const extent = await store.broadcastExtent(broadcastId);
    if (!extent) throw appError('ERR_NOTIFICATION_NOT_FOUND');
    await assertStoredAdmin(db, actor, actorLevel, 'read');
    const keep = extent.anchorId === row.id ? [row.id] : [extent.anchorId, row.id];
    const batch = deps.broadcastDeleteBatch ?? BROADCAST_DELETE_BATCH;
    for (;;) {
      const n = await store.deleteBroadcastBatch(broadcastId, keep, batch);
      // A short batch proves nothing when another deletion took some of its picks meanwhile: ask.
      if (n < batch && !(await store.otherBroadcastCopy(broadcastId, keep))) break;
    }
    // `deleted` is how many copies the broadcast had when this deletion began: all of them are
    // gone when it answers, whichever of two concurrent deletions removed each.
    const deleted = extent.copies;
    await db.transaction(async (tx) => {
      // The kept copies are not enough to decide alone: a recipient's account deleted between two
      // deletions' first reads takes its copy with it, so the two may keep different anchors, each
      // delete every copy the other keeps, and find none of their own left. Under the broadcast's
      // lock, the first to get here answers 200 and records the deletion; a later one finds it
      // recorded and answers 404, whichever copies were left for it.
      await store.lockBroadcastDeletion(broadcastId, tx);
      // The caller's row after the broadcast's lock and before the kept copies: an account deletion
      // holds the row FOR UPDATE and then deletes the account's copies (ON DELETE CASCADE), so
      // holding a copy first could deadlock with the caller's deletion; this way one waits.
      await assertStoredAdmin(tx, actor, actorLevel, 'share');
      if (await store.broadcastDeletionRecorded(broadcastId, tx)) throw appError('ERR_NOTIFICATION_NOT_FOUND');
      await store.deleteBroadcastCopies(broadcastId, keep, tx);
      await audit.record(
        {
          actor,
          code: AuditCodes.NOTIFICATION_DELETE,
          action: 'delete-broadcast',
          targetUserId: null,
          data: { notification_id: row.id, broadcast_id: broadcastId, deleted, title: row.title },
        },
        tx,
      );
    });
    return { deleted, broadcast_id: broadcastId };
  };

  return {
    /** POST /v1/admin/notifications: to one user (801) or, without user_id, to every user (802). */
    async send(actor: Actor, actorLevel: ActorLevel, body: AdminNotificationBody): Promise<AdminNotificationCreated> {
      assertValidBody(body.body);
      const createdBy = actor.kind === 'user' ? actor.id : null;
      // Each insert is stamped once the transaction holds the rows it decides on (clock.now() there),
      // not when the request began.
      const content = { title: body.title, body: body.body, type: body.type, createdBy };
      if (body.user_id !== undefined) {
        const userId = body.user_id;
        // Refused early without a lock; decided again on the recipient's row and a user caller's,
        // held until the commit (lockActorAndTarget), so a promotion or a deletion of the recipient
        // committed meanwhile counts (403, or 404 rather than a 500), and so does a caller demoted,
        // banned or deleted meanwhile (403): the caller's level is the one read under its lock.
        assertMayNotify(actorLevel, await users.byId(userId));
        const row = await db.transaction(async (tx) => {
          const { level, target } = await lockActorAndTarget(tx, actor, actorLevel, userId, clock);
          assertMayNotify(level, target);
          const inserted = await store.insert({ ...content, createdAt: clock.now(), userId }, tx);
          await audit.record(
            {
              actor,
              code: AuditCodes.NOTIFICATION_CREATE,
              action: 'create',
              targetUserId: userId,
              data: { notification_id: inserted.id, title: body.title, type: body.type },
            },
            tx,
          );
          return inserted;
        });
        publish(row);
        return { id: row.id, broadcast_id: null, recipients: 1 };
      }
      const broadcastId = randomUUID();
      const result = await db.transaction(async (tx) => {
        // The caller's level as stored, read without a lock before the insert: the insert then takes
        // every user's row FOR KEY SHARE in id order (insertBroadcast), and the caller's row held
        // FOR SHARE ahead of them, out of that order, could deadlock with an admin action that locks
        // the caller's row and a lower one FOR UPDATE in id order (lockUsersInIdOrder). Read again
        // after the insert, which holds the caller's row FOR KEY SHARE by then: an admin action's
        // demotion, ban or deletion of the caller (each FOR UPDATE first) either committed before
        // and is read, or waits for the broadcast's commit. The first read spares the insert.
        await assertStoredAdmin(tx, actor, actorLevel, 'read');
        const written = await store.insertBroadcast({ ...content, createdAt: clock.now(), broadcastId }, tx);
        await assertStoredAdmin(tx, actor, actorLevel, 'read');
        await audit.record(
          {
            actor,
            code: AuditCodes.NOTIFICATION_BROADCAST,
            action: 'broadcast',
            data: { broadcast_id: broadcastId, recipients: written.recipients, title: body.title, type: body.type },
          },
          tx,
        );
        return written;
      });
      // Committed whatever happens next: a failed emit is logged, not answered as a failure to retry.
      await publishBroadcast(broadcastId).catch((err: unknown) => log.error({ err }, 'broadcast emit failed'));
      return { id: result.firstId, broadcast_id: broadcastId, recipients: result.recipients };
    },

    /**
     * POST /v1/admin/notifications/{id}/delete (803). A targeted notification is deleted alone; a
     * copy of a broadcast deletes the whole broadcast (every recipient's copy, removeBroadcast).
     */
    async remove(actor: Actor, actorLevel: ActorLevel, id: number): Promise<AdminNotificationDeleted> {
      const row = await store.byId(id);
      if (!row) throw appError('ERR_NOTIFICATION_NOT_FOUND');
      if (row.broadcastId !== null) return removeBroadcast(actor, actorLevel, row, row.broadcastId);
      const recipient = await users.byId(row.userId);
      // A recipient deleted since the notification was read took it with it (ON DELETE CASCADE).
      if (!recipient) throw appError('ERR_NOTIFICATION_NOT_FOUND');
      assertMayTarget(actorLevel, recipient);
      await db.transaction(async (tx) => {
        // Decided again under the recipient's row lock and a user caller's (lockActorAndTarget),
        // on the caller's level as read there (403 for one demoted, banned or deleted meanwhile);
        // a recipient deleted meanwhile took the notification with it.
        const { level, target: owner } = await lockActorAndTarget(tx, actor, actorLevel, row.userId, clock);
        if (!owner) throw appError('ERR_NOTIFICATION_NOT_FOUND');
        assertMayTarget(level, owner);
        // A concurrent delete of the same notification waits for the recipient's row and then finds none.
        if ((await store.deleteById(id, tx)) === 0) throw appError('ERR_NOTIFICATION_NOT_FOUND');
        await audit.record(
          {
            actor,
            code: AuditCodes.NOTIFICATION_DELETE,
            action: 'delete',
            targetUserId: row.userId,
            data: { notification_id: id, broadcast_id: null, deleted: 1, title: row.title },
          },
          tx,
        );
      });
      return { deleted: 1, broadcast_id: null };
    },
  };
}
