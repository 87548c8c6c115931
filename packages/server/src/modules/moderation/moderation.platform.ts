import { AuditCodes } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { afterCommit } from '../../platform/db/after-commit.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { ActorLevel } from '../admin/admin.rules.js';
import type { Actor, AuditStore } from '../audit/audit.store.js';
import type { KeysService } from '../keys/keys.service.js';
import type { AutomatedKind, NotificationsService } from '../notifications/notifications.service.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import { toPunishment } from '../users/users.presenter.js';
import type { UsersService } from '../users/users.service.js';
import type { Tx } from '../users/users.store.js';
import { type InChat, makePunisher } from './moderation.punish.js';
import type { ModerationStore } from './moderation.store.js';

// Reach and the punishment's writes live in moderation.punish.ts; importers take InChat and until from here.
export { type InChat, until } from './moderation.punish.js';

export interface PlatformModerationDeps {
  db: Db;
  clock: Clock;
  store: ModerationStore;
  users: Pick<UsersService, 'mustGet'>;
  sessions: SessionsService;
  keys: KeysService;
  notifications: NotificationsService;
  audit: AuditStore;
  realtime: Pick<Realtime, 'io' | 'disconnectSessions'>;
  /** Writes the notification in the transaction (moderation.service.ts); publish it after the commit. */
  notify: (
    userId: number,
    kind: AutomatedKind,
    vars: Record<string, string>,
    tx: Tx,
  ) => ReturnType<NotificationsService['automated']>;
  /**
   * The client address that made an anonymous stranger's account (its first session), read in a
   * ban's transaction for the onStrangerBanned hooks; null when no session row is left.
   */
  strangerAddress: (userId: number, tx: Tx) => Promise<string | null>;
}

/**
 * Told once a ban of an anonymous stranger has committed, after the onRestricted listeners: the
 * ban ended its session, which it never gets back (wiring/services.ts ends its direct chats as at
 * a session's end and bars `address` as a stranger block does). What it throws is the ban's answer.
 */
export type StrangerBannedHook = (e: { userId: number; address: string | null }) => Promise<void>;

/** Platform punishments (bans, timeouts, warnings): the user's state, records, audit, notifications. */
export function makePlatformModeration(deps: PlatformModerationDeps) {
  const { db, clock, store, users, notifications, audit, realtime, notify } = deps;
  const { assertReach, assertPlatformTarget, lockParties, punish } = makePunisher(deps);

  /** Told once a ban or timeout has committed (onRestricted). */
  const restricted: ((userId: number) => Promise<void>)[] = [];
  const tellRestricted = async (userId: number) => {
    for (const listener of restricted) await listener(userId);
  };
  const strangerBanned: StrangerBannedHook[] = [];

  /** Drops every socket of a user, on every node (timeouts, bans). */
  const dropSockets = (userId: number) => realtime.io.in(rooms.user(userId)).disconnectSockets(true);

  type Body = { duration?: number; reason?: string };

  return {
    /**
     * Runs `listener` once a ban or timeout of a user has committed, before the route answers: the
     * user may not use the platform now (e.g. it leaves the match queue; wiring/services.ts). The
     * listener handles its own failures (the punishment stands).
     */
    onRestricted(listener: (userId: number) => Promise<void>) {
      restricted.push(listener);
    },

    /** Runs `hook` once a ban of an anonymous stranger has committed (StrangerBannedHook). */
    onStrangerBanned(hook: StrangerBannedHook) {
      strangerBanned.push(hook);
    },

    /**
     * Bans platform-wide: every session ends (sockets drop, keys go), login is refused until lifted.
     * A stranger's session so ended is its last: the onStrangerBanned hooks run after commit.
     */
    async ban(actor: Actor, level: ActorLevel, targetId: number, body: Body, chatId: number | null = null) {
      await assertPlatformTarget(actor, level, targetId);
      const { record, stranger } = await db.transaction(async (tx) => {
        // The ban raises the epochs of the user's chats (removeSessionsIn below), so it takes their
        // rows first, in id order, then the users rows (punish): the order of a kick, a chat ban, a
        // mute or warning in a chat and a join, which hold the chat row when they lock the user's.
        // Taken the other way round, a kick and a ban of one member at once would deadlock each
        // time, and wait for PostgreSQL's deadlock check (1 s) before one of them runs again. The
        // banned user's own writes at that moment (a key registration, a logout, destroy or expiry,
        // a login that evicts) and an account deletion keep to the same order: chats, user, then
        // sessions (docs/api.md).
        await store.lockChatsOf(targetId, tx);
        const done = await punish(tx, {
          actor,
          level,
          targetId,
          chatId,
          actionType: 'PLATFORM_BAN',
          code: AuditCodes.PUNISH_BAN,
          action: 'ban',
          body,
          notice: 'banned',
          settlesState: true,
        });
        const stranger = done.stranger ? { address: await deps.strangerAddress(targetId, tx) } : null;
        const ended = await deps.sessions.endAll(targetId, 'banned', tx);
        // Once committed, in this order: the notice, the sockets drop, then the chats hear that
        // the keys are gone and move to new epochs (removed and raised in this transaction).
        await afterCommit(tx, async () => {
          if (done.note) notifications.publish(done.note);
          realtime.disconnectSessions(ended);
          dropSockets(targetId);
        });
        await deps.keys.removeSessionsIn(tx, targetId, ended, true);
        return { record: done.record, stranger };
      });
      await tellRestricted(targetId);
      if (stranger) for (const hook of strangerBanned) await hook({ userId: targetId, ...stranger });
      return toPunishment(record);
    },

    /**
     * Lifts every platform ban; the state is then what the other records give (a running timeout
     * stays). A user with no ban to lift is left as is: no audit entry, no notification (idempotent).
     */
    async unban(actor: Actor, level: ActorLevel, targetId: number, body: { reason?: string }) {
      await assertPlatformTarget(actor, level, targetId);
      const now = clock.now();
      const note = await db.transaction(async (tx) => {
        const target = await lockParties(tx, actor, level, targetId);
        if ((await store.lift(targetId, ['PLATFORM_BAN'], null, now, tx)) === 0) return null;
        await store.settleState(targetId, now, tx);
        await audit.record(
          { actor, code: AuditCodes.PUNISH_UNBAN, action: 'unban', targetUserId: targetId, reason: body.reason },
          tx,
        );
        return target.isStranger ? null : notify(targetId, 'unbanned', {}, tx);
      });
      if (note) notifications.publish(note);
    },

    /**
     * Times out platform-wide: sockets drop and every request answers 403 ERR_TIMED_OUT until expiry.
     * A banned user is timed out too (recorded, 200) but stays Banned: the timeout applies only if
     * the ban ends (unban, expiry) before it does. A stranger is timed out as a user is, with no
     * notification: its session stays (its end still ends its direct chats, sessionsEnded).
     */
    async timeout(actor: Actor, level: ActorLevel, targetId: number, body: Body & { duration: number }, chat?: InChat) {
      await assertPlatformTarget(actor, level, targetId, chat);
      const { record, note } = await db.transaction(async (tx) => {
        if (chat) await chat.hold(tx);
        return punish(tx, {
          actor,
          level,
          targetId,
          chat,
          chatId: chat?.chatId ?? null,
          actionType: 'PLATFORM_TIMEOUT',
          code: AuditCodes.PUNISH_TIMEOUT,
          action: 'timeout',
          body,
          notice: 'timed_out',
          settlesState: true,
        });
      });
      if (note) notifications.publish(note);
      dropSockets(targetId);
      await tellRestricted(targetId);
      return toPunishment(record);
    },

    /**
     * Warns; given in a chat, `chat` decides and writes there in the same transaction. An anonymous
     * stranger is no user here (404, nothing written): a warning is a notice, and it gets none.
     * (An account never becomes or stops being a stranger: no need to decide again under the locks.)
     */
    async warn(actor: Actor, level: ActorLevel, targetId: number, body: { reason?: string }, chat?: InChat) {
      const target = await users.mustGet(targetId);
      if (target.isStranger) throw appError('ERR_USER_NOT_FOUND');
      assertReach(actor, level, target, chat);
      const { record, note } = await db.transaction(async (tx) => {
        if (chat) await chat.hold(tx);
        const done = await punish(tx, {
          actor,
          level,
          targetId,
          chat,
          chatId: chat?.chatId ?? null,
          actionType: 'PLATFORM_WARNING',
          code: AuditCodes.PUNISH_WARN,
          action: 'warn',
          body,
          notice: 'warned',
          settlesState: false,
        });
        if (chat?.write) await chat.write(tx);
        return done;
      });
      if (note) notifications.publish(note);
      return toPunishment(record);
    },
  };
}
