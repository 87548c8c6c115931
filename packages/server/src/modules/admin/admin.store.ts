import { asc, inArray } from 'drizzle-orm';
import { users } from '../../platform/db/schema.js';
import type { Tx, UserRow } from '../users/users.store.js';

/**
 * Locks the users rows of `ids` FOR UPDATE until the transaction ends, in one statement that
 * takes them in id order (PostgreSQL locks the rows as the sort hands them out), and answers the
 * rows as read under those locks; an id without a row (a deleted account) is left out. The admin
 * actions lock the caller's row and the target's with it: two admins acting on each other at once
 * then take the same two rows in the same order, and the second waits for the first instead of
 * deadlocking (docs/api.md, Admin: users).
 */
export async function lockUsersInIdOrder(ids: readonly number[], tx: Tx): Promise<UserRow[]> {
  const unique = [...new Set(ids)];
  if (unique.length === 0) return [];
  return tx.select().from(users).where(inArray(users.id, unique)).orderBy(asc(users.id)).for('update');
}
