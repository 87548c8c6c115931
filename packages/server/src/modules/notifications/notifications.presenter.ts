import type { Notification, NotificationType } from '@parlor/protocol';
import type { NotificationRow } from './notifications.store.js';

/** Spec 2.7, exactly: the row's user and broadcast id stay on the server. */
export function toNotification(n: NotificationRow): Notification {
  return {
    id: n.id,
    title: n.title,
    body: n.body,
    type: n.type as NotificationType,
    read_at: n.readAt ? n.readAt.toISOString() : null,
    created_at: n.createdAt.toISOString(),
    created_by: n.createdBy,
  };
}
