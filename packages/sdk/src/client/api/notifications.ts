import type { MarkedAnswer, Notification, NotificationsInput, NotificationsPage, UnreadCountAnswer } from '../types.js';
import { MatchmakingRoutes } from './matchmaking.js';

/** ParlorClient's notification routes (spec 2.7, 4.7). */
export abstract class NotificationRoutes extends MatchmakingRoutes {
  // Notifications (spec 2.7, 4.7)

  /** `GET /v1/notifications` → `{notifications, next_before}`, newest first. */
  notifications(input: NotificationsInput = {}): Promise<NotificationsPage> {
    return this.get('/v1/notifications', { ...input });
  }

  /** `GET /v1/notifications/unread` → `{unread}`. */
  unreadNotifications(): Promise<UnreadCountAnswer> {
    return this.get('/v1/notifications/unread');
  }

  /** `POST /v1/notifications/read-all` → `{marked}`. */
  readAllNotifications(): Promise<MarkedAnswer> {
    return this.post('/v1/notifications/read-all');
  }

  /** `POST /v1/notifications/{notification_id}/read` → the notification, read. */
  readNotification(notificationId: number): Promise<Notification> {
    return this.post(`/v1/notifications/${notificationId}/read`);
  }
}
