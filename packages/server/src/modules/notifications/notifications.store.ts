import type { Db } from '../../platform/db/index.js';
import { notifications } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

export type NotificationRow = typeof notifications.$inferSelect;

export function makeNotificationsStore(db: Db) {
  return {
    async insert(values: typeof notifications.$inferInsert, tx: Tx = db): Promise<NotificationRow> {
      const [row] = await tx.insert(notifications).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
  };
}

export type NotificationsStore = ReturnType<typeof makeNotificationsStore>;
