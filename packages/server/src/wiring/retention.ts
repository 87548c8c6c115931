import type { BotsStore } from '../modules/bots/bots.store.js';
import { CHAT_ACTIVITY_KEPT_MS } from '../modules/chats/chats.activity.store.js';
import { makeInviteRetentionStore } from '../modules/chats/chats.invites.store.js';
import type { ChatsStore } from '../modules/chats/chats.store.js';
import { NOTIFICATIONS_KEPT_MS, type NotificationsStore } from '../modules/notifications/notifications.store.js';
import { SESSIONS_KEPT_MS, type SessionsStore } from '../modules/sessions/sessions.store.js';
import { makeRetention, RETENTION_INTERVAL_MS, RETENTION_TASK, type Retention } from '../platform/retention.js';
import type { WiringContext } from './services.js';

const DAY_MS = 24 * 3600_000;

/**
 * How long the tables that only grow keep their rows (docs/operations.md, "Data retention").
 * Audit entries are never deleted: the one-time Trial check and the admin history read them.
 */
export const RETENTION_MS = {
  /**
   * Ended or expired sessions, from when they were over: the session history and the "new IP login"
   * check read them, and stop at the same window by the clock (sessions.store SESSIONS_KEPT_MS).
   */
  sessions: SESSIONS_KEPT_MS,
  /**
   * Notifications, read or not, from their creation: the notification list pages back this far,
   * and stops at the same window by the clock (notifications.store NOTIFICATIONS_KEPT_MS).
   */
  notifications: NOTIFICATIONS_KEPT_MS,
  /** Bot command reports, from their receipt: nothing in the service reads them back. */
  botCommands: 30 * DAY_MS,
  /**
   * Chats' membership history, from the entry: GET …/activity lists this far back, by the clock
   * (chats.activity.store CHAT_ACTIVITY_KEPT_MS).
   */
  chatActivity: CHAT_ACTIVITY_KEPT_MS,
  /**
   * Dead chat invites (revoked, expired, used up), from their revocation, else their expiry, else
   * (used up: no column records the last use) their creation: nothing lists or accepts them again.
   */
  deadInvites: 30 * DAY_MS,
} as const;

/** The retention sweep over the stores, every 10 minutes on every node; stopped with the other tasks, before the stores close. */
export function wireRetention(
  ctx: WiringContext,
  stores: { sessions: SessionsStore; notifications: NotificationsStore; bots: BotsStore; chats: ChatsStore },
): Retention {
  const { clock } = ctx;
  const invites = makeInviteRetentionStore(ctx.db);
  const retention = makeRetention(
    clock,
    [
      { name: 'sessions', keepMs: RETENTION_MS.sessions, prune: (b, n) => stores.sessions.pruneOver(b, n) },
      { name: 'notifications', keepMs: RETENTION_MS.notifications, prune: (b, n) => stores.notifications.prune(b, n) },
      { name: 'bot_commands', keepMs: RETENTION_MS.botCommands, prune: (b, n) => stores.bots.pruneCommands(b, n) },
      { name: 'chat_activity', keepMs: RETENTION_MS.chatActivity, prune: (b, n) => stores.chats.pruneActivity(b, n) },
      { name: 'chat_invites', keepMs: RETENTION_MS.deadInvites, prune: (b, n) => invites.pruneDead(b, n) },
    ],
    ctx.app.log,
  );
  ctx.tasks.every(RETENTION_INTERVAL_MS, RETENTION_TASK, () => retention.run());
  return retention;
}
