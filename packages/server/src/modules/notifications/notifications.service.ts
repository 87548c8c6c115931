import type { Notification, NotificationsPage } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import type { AuditStore } from '../audit/audit.store.js';
import type { Tx, UsersStore } from '../users/users.store.js';
import { makeAdminNotifications } from './notifications.admin.js';
import type { NotificationEvents } from './notifications.events.js';
import { toNotification } from './notifications.presenter.js';
import { isKeptAt, type NotificationRow, type NotificationsStore } from './notifications.store.js';
import { type AutomatedKind, render } from './notifications.templates.js';

// The templates (notifications.templates.ts) and the admin notifications (notifications.admin.ts)
// live beside this file; importers take their names from here.
export { BROADCAST_DELETE_BATCH } from './notifications.admin.js';
export { type AutomatedKind, formatMoment, plain } from './notifications.templates.js';

export interface NotificationsDeps {
  db: Db;
  store: NotificationsStore;
  clock: Clock;
  events: NotificationEvents;
  audit: AuditStore;
  users: Pick<UsersStore, 'byId'>;
  log: { error(obj: object, msg: string): void };
  /** Copies of a broadcast deleted per statement (default BROADCAST_DELETE_BATCH). */
  broadcastDeleteBatch?: number;
}

export function makeNotificationsService(deps: NotificationsDeps) {
  const { store, clock, events } = deps;

  /** Emits `notification:new` to each recipient's sockets. Call after the transaction commits. */
  const publish = (rows: NotificationRow | readonly NotificationRow[]): void => {
    for (const row of Array.isArray(rows) ? rows : [rows]) events.toUser(row.userId, toNotification(row));
  };

  return {
    /** Writes an automated notification inside the caller's transaction; `publish` it after commit. */
    async automated(userId: number, kind: AutomatedKind, vars: Record<string, string>, tx?: Tx) {
      return store.insert(render(userId, kind, vars, clock.now()), tx);
    },

    /** Many automated notifications in one INSERT (the subscription sweep). */
    async automatedMany(items: { userId: number; kind: AutomatedKind; vars: Record<string, string> }[], tx?: Tx) {
      const now = clock.now();
      return store.insertMany(
        items.map((i) => render(i.userId, i.kind, i.vars, now)),
        tx,
      );
    },

    publish,

    async list(userId: number, before: number | undefined, limit: number): Promise<NotificationsPage> {
      const rows = await store.page(userId, before, limit + 1, clock.now());
      const page = rows.slice(0, limit);
      const last = page[page.length - 1];
      return { notifications: page.map(toNotification), next_before: rows.length > limit && last ? last.id : null };
    },

    async unread(userId: number): Promise<{ unread: number }> {
      return { unread: await store.unreadCount(userId, clock.now()) };
    },

    /**
     * Unread → read (spec 3): 404 when absent, someone else's or past the retention window (the
     * list no longer shows it, swept or not), 409 when already read.
     */
    async read(userId: number, id: number): Promise<Notification> {
      const now = clock.now();
      const row = await store.markRead(userId, id, now);
      if (row) return toNotification(row);
      const existing = await store.byId(id);
      if (!existing || existing.userId !== userId || !isKeptAt(existing, now)) {
        throw appError('ERR_NOTIFICATION_NOT_FOUND');
      }
      throw appError('ERR_NOTIFICATION_ALREADY_READ');
    },

    async readAll(userId: number): Promise<{ marked: number }> {
      return { marked: await store.markAllRead(userId, clock.now()) };
    },
    ...makeAdminNotifications(deps, publish),
  };
}

export type NotificationsService = ReturnType<typeof makeNotificationsService>;
