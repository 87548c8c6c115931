import type { Notification } from '@parlor/protocol';
import { type Realtime, rooms } from '../../platform/realtime.js';

/** What the notifications module emits, behind a narrow port so services can be tested without sockets. */
export interface NotificationEvents {
  /** `notification:new` to every socket of one user, on every node. */
  toUser(userId: number, notification: Notification): void;
  /** The users with at least one connected socket, on every node. */
  onlineUserIds(): Promise<number[]>;
}

/**
 * The realtime implementation. It takes the realtime server lazily: wiring/ builds the services
 * that create notifications before the socket server exists, and nothing is emitted before
 * requests flow.
 */
export function realtimeNotificationEvents(realtime: () => Pick<Realtime, 'emitTo' | 'socketsIn'>): NotificationEvents {
  return {
    toUser(userId, notification) {
      realtime().emitTo(rooms.user(userId), 'notification:new', notification);
    },
    async onlineUserIds() {
      // A node that does not answer leaves its users out (the others are told) rather than all (socketsIn).
      const { sockets } = await realtime().socketsIn(null);
      return [...new Set(sockets.map((s) => s.data.userId))];
    },
  };
}
