import { and, count, eq, gt, inArray, isNull, lt, ne, sql } from 'drizzle-orm';
import type { Clock } from '../../platform/clock.js';
import { anyOf, type Db } from '../../platform/db/index.js';
import { chatMembers, chats, keyEnvelopes, sessionKeys, sessions, users } from '../../platform/db/schema.js';
import { directActive } from '../chats/chats.direct.store.js';
import { lockLiveSessions, type Tx } from '../users/users.store.js';

export interface RingEntry {
  userId: number;
  sessionId: number;
  publicKey: string;
}

/** Per open transaction (its drizzle handle): the users whose chats it has locked (lockChatsOfUser). */
const chatsLockedIn = new WeakMap<object, Set<number>>();

/**
 * Locks the rows of the chats a user is a member of, in id order, as a write of their epoch does
 * (FOR NO KEY UPDATE). The lock order (docs/api.md Moderation): the user's chat rows, then the
 * user's row, then the user's session rows. What raises the epochs of a user's chats (a key
 * replacement, the end of a keyed session: a logout, a destroy, an expiry, a login's eviction; a
 * ban) takes them first, in the order of the chat paths (a kick, a chat ban, a new member's join:
 * the chat row, then the user's), so it never holds the user's row or a session's while it waits
 * for a chat's; and two of them sharing chats take them in one order.
 */
export async function lockChatsOfUser(userId: number, tx: Tx): Promise<void> {
  const memberOf = tx
    .select({ chatId: chatMembers.chatId })
    .from(chatMembers)
    .where(and(eq(chatMembers.userId, userId), isNull(chatMembers.leftAt)));
  await tx
    .select({ id: chats.id })
    .from(chats)
    .where(and(inArray(chats.id, memberOf), isNull(chats.deletedAt)))
    .orderBy(chats.id)
    .for('no key update', { of: chats });
  const users = chatsLockedIn.get(tx) ?? new Set<number>();
  users.add(userId);
  chatsLockedIn.set(tx, users);
}

/** Whether `tx` has taken lockChatsOfUser for this user already (it holds those rows until it ends). */
export function holdsChatsOf(userId: number, tx: Tx): boolean {
  return chatsLockedIn.get(tx)?.has(userId) ?? false;
}

/**
 * Takes, ahead of the session rows, the locks that ending these sessions of the user will need
 * (KeysService.removeSessionsIn): when one of them has a key, the user's chat rows in id order
 * (their epochs rise: lockChatsOfUser), then the user's row (FOR UPDATE, as KeysStore.lockUser).
 * Sessions without a key need neither: their end writes their own rows only. A logout, a destroy,
 * an expiry and a login's eviction run it before they write a session row (sessions.store), so
 * they lock in the order of a ban and of a key replacement (docs/api.md Moderation). Whether a
 * session has a key is read without a lock: a key written after it is caught where the keys are
 * removed (the transaction runs again).
 */
export async function lockAheadOfSessionsEnd(userId: number, sessionIds: number[], tx: Tx): Promise<void> {
  if (sessionIds.length === 0) return;
  const [keyed] = await tx
    .select({ id: sessionKeys.sessionId })
    .from(sessionKeys)
    .where(anyOf(sessionKeys.sessionId, sessionIds))
    .limit(1);
  if (!keyed) return;
  await lockChatsOfUser(userId, tx);
  await tx.select({ id: users.id }).from(users).where(eq(users.id, userId)).for('update');
}

export function makeKeysStore(db: Db) {
  return {
    /**
     * Locks the session's row for the transaction (FOR NO KEY UPDATE: rows that only reference the
     * session are still inserted meanwhile), so key registrations of one session run one at a time,
     * and answers whether the session is still live: one that ended (or expired) while the caller
     * waited on the lock has had its keys removed already and takes none (users.store lockLiveSessions).
     * Its expiry is judged on the clock's time once the row is locked: a wait can outlast it.
     */
    async lockLiveSession(sessionId: number, clock: Clock, tx: Tx): Promise<boolean> {
      return (await lockLiveSessions([sessionId], clock, tx)).length === 1;
    },
    /** Whether the user has a live session at `now` (one this transaction ended has not). */
    async hasLiveSession(userId: number, now: Date, tx: Tx): Promise<boolean> {
      const [row] = await tx
        .select({ id: sessions.id })
        .from(sessions)
        .where(and(eq(sessions.userId, userId), isNull(sessions.endedAt), gt(sessions.expiresAt, now)))
        .limit(1);
      return row !== undefined;
    },
    /** lockChatsOfUser: before the user's row, when the user's chats' epochs will rise. */
    lockChatsOf: (userId: number, tx: Tx) => lockChatsOfUser(userId, tx),
    holdsChatsOf: (userId: number, tx: Tx) => holdsChatsOf(userId, tx),
    /**
     * Locks the user's row FOR UPDATE until the transaction ends, after the user's chats (when they
     * are locked) and before the user's session rows, and before the user's chats are read for a
     * key change: a join that makes the user a new member holds that row FOR SHARE (chats.join
     * becomeMember: storedCallerLevel) until it commits, and reads the key ring it announces after.
     * So the two are ordered: either the join waits and its ring has the change, or the change reads
     * the new membership and reaches the chat (its portal:key_added, portal:key_removed, new epoch).
     */
    async lockUser(userId: number, tx: Tx): Promise<void> {
      await tx.select({ id: users.id }).from(users).where(eq(users.id, userId)).for('update');
    },
    async keyOf(sessionId: number, tx: Tx = db): Promise<string | null> {
      const [row] = await tx
        .select({ k: sessionKeys.publicKey })
        .from(sessionKeys)
        .where(eq(sessionKeys.sessionId, sessionId));
      return row?.k ?? null;
    },
    async upsertKey(sessionId: number, userId: number, publicKey: string, at: Date, tx: Tx): Promise<void> {
      await tx
        .insert(sessionKeys)
        .values({ sessionId, userId, publicKey, updatedAt: at })
        .onConflictDoUpdate({ target: sessionKeys.sessionId, set: { publicKey, updatedAt: at } });
    },
    async deleteKeys(sessionIds: number[], tx: Tx = db): Promise<number[]> {
      if (sessionIds.length === 0) return [];
      const rows = await tx
        .delete(sessionKeys)
        .where(anyOf(sessionKeys.sessionId, sessionIds))
        .returning({ sessionId: sessionKeys.sessionId });
      return rows.map((r) => r.sessionId);
    },
    /** The chat's key ring: active sessions with a key, of current members. */
    async ring(chatId: number, now: Date, tx: Tx = db): Promise<RingEntry[]> {
      return tx
        .select({ userId: sessionKeys.userId, sessionId: sessionKeys.sessionId, publicKey: sessionKeys.publicKey })
        .from(chatMembers)
        .innerJoin(sessionKeys, eq(sessionKeys.userId, chatMembers.userId))
        .innerJoin(sessions, eq(sessions.id, sessionKeys.sessionId))
        .where(
          and(
            eq(chatMembers.chatId, chatId),
            isNull(chatMembers.leftAt),
            isNull(sessions.endedAt),
            gt(sessions.expiresAt, now),
          ),
        )
        .orderBy(sessionKeys.userId, sessionKeys.sessionId);
    },
    async envelope(chatId: number, epoch: number, sessionId: number, tx: Tx = db) {
      const [row] = await tx
        .select()
        .from(keyEnvelopes)
        .where(
          and(
            eq(keyEnvelopes.chatId, chatId),
            eq(keyEnvelopes.epoch, epoch),
            eq(keyEnvelopes.recipientSessionId, sessionId),
          ),
        );
      return row;
    },
    async envelopeCount(chatId: number, epoch: number, tx: Tx): Promise<number> {
      const [row] = await tx
        .select({ n: count() })
        .from(keyEnvelopes)
        .where(and(eq(keyEnvelopes.chatId, chatId), eq(keyEnvelopes.epoch, epoch)));
      return row?.n ?? 0;
    },
    /**
     * Deletes the chat's envelopes of epochs before `epoch` (done when an epoch is keyed): nothing
     * reads them any more, as GET …/keys, the send check and shares read the current epoch only.
     */
    async deleteEnvelopesBefore(chatId: number, epoch: number, tx: Tx): Promise<void> {
      await tx.delete(keyEnvelopes).where(and(eq(keyEnvelopes.chatId, chatId), lt(keyEnvelopes.epoch, epoch)));
    },
    /** Stores envelopes; one that exists already is kept (never overwritten). Returns those stored. */
    async insertEnvelopes(rows: (typeof keyEnvelopes.$inferInsert)[], tx: Tx): Promise<number[]> {
      if (rows.length === 0) return [];
      const stored = await tx
        .insert(keyEnvelopes)
        .values(rows)
        .onConflictDoNothing()
        .returning({ sessionId: keyEnvelopes.recipientSessionId });
      return stored.map((r) => r.sessionId);
    },
    /**
     * Raises the epoch of those of the given chats that are not archived at `now`; returns each
     * raised chat's new epoch. An archived direct chat is read-only (nobody sends, nobody shares):
     * its epoch stays, so its members keep reading its history with the key they hold. A direct
     * chat past its expiry counts as archived before the sweep writes it (chats.rules archivedAtOf):
     * a new epoch there could never be keyed either. `exceptDirect` leaves direct chats out too:
     * those about to be archived (a stranger's, once its last session ends: removeSessionsIn).
     */
    async bumpEpochs(
      chatIds: number[],
      now: Date,
      tx: Tx = db,
      { exceptDirect = false } = {},
    ): Promise<{ id: number; epoch: number }[]> {
      if (chatIds.length === 0) return [];
      const active = directActive('chats', sql`${now.toISOString()}::timestamptz`);
      return tx
        .update(chats)
        .set({ epoch: sql`${chats.epoch} + 1` })
        .where(and(anyOf(chats.id, chatIds), active, exceptDirect ? ne(chats.type, 'direct') : undefined))
        .returning({ id: chats.id, epoch: chats.epoch });
    },
    /** Whether the user is a stranger (it never signs in again once its sessions are over). */
    async isStranger(userId: number, tx: Tx): Promise<boolean> {
      const [row] = await tx.select({ stranger: users.isStranger }).from(users).where(eq(users.id, userId));
      return row?.stranger ?? false;
    },
  };
}

export type KeysStore = ReturnType<typeof makeKeysStore>;
