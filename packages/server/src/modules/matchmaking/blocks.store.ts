import { and, asc, count, desc, eq } from 'drizzle-orm';
import type { Db } from '../../platform/db/index.js';
import { sessions, userBlocks, users } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

/** User-to-user blocks (a block keeps two users from being matched, both ways). */
export function makeBlocksStore(db: Db) {
  /** Whether the user's row still exists, locked with `strength` until the transaction ends. */
  const lockUser = async (id: number, strength: 'no key update' | 'key share', tx: Tx): Promise<boolean> => {
    const rows = await tx.select({ id: users.id }).from(users).where(eq(users.id, id)).for(strength);
    return rows.length > 0;
  };
  return {
    /**
     * Locks the two users a block names until the transaction ends, and answers which still exist
     * (an account deleted meanwhile is gone once its deletion commits; a deletion that comes later
     * waits for this transaction). The blocker's row FOR NO KEY UPDATE, so blocks by one user run
     * one at a time and its count holds; the target's FOR KEY SHARE, what the foreign key needs.
     * Neither lock conflicts with the other kind, so two users blocking each other at once never
     * deadlock; both conflict with a deletion's FOR UPDATE.
     */
    async lockPair(blockerId: number, blockedId: number, tx: Tx): Promise<{ blocker: boolean; blocked: boolean }> {
      const blocker = await lockUser(blockerId, 'no key update', tx);
      const blocked = blocker && (await lockUser(blockedId, 'key share', tx));
      return { blocker, blocked };
    },
    async add(blockerId: number, blockedId: number, at: Date, tx: Tx = db): Promise<void> {
      await tx.insert(userBlocks).values({ blockerId, blockedId, createdAt: at }).onConflictDoNothing();
    },
    async has(blockerId: number, blockedId: number, tx: Tx = db): Promise<boolean> {
      const rows = await tx
        .select({ id: userBlocks.blockedId })
        .from(userBlocks)
        .where(and(eq(userBlocks.blockerId, blockerId), eq(userBlocks.blockedId, blockedId)))
        .limit(1);
      return rows.length > 0;
    },
    async countBy(blockerId: number, tx: Tx = db): Promise<number> {
      const [row] = await tx.select({ n: count() }).from(userBlocks).where(eq(userBlocks.blockerId, blockerId));
      return row?.n ?? 0;
    },
    async remove(blockerId: number, blockedId: number): Promise<boolean> {
      const rows = await db
        .delete(userBlocks)
        .where(and(eq(userBlocks.blockerId, blockerId), eq(userBlocks.blockedId, blockedId)))
        .returning({ id: userBlocks.blockedId });
      return rows.length > 0;
    },
    /**
     * The client address that opened the user's first session, ended or not (a stranger's only
     * session is the one its account was made with: POST /v1/portal/stranger); null when no
     * session row is left.
     */
    async firstSessionAddress(userId: number, tx: Tx = db): Promise<string | null> {
      const [row] = await tx
        .select({ ip: sessions.clientIp })
        .from(sessions)
        .where(eq(sessions.userId, userId))
        .orderBy(asc(sessions.createdAt), asc(sessions.id))
        .limit(1);
      return row?.ip ?? null;
    },
    async listBy(blockerId: number) {
      return db
        .select()
        .from(userBlocks)
        .where(eq(userBlocks.blockerId, blockerId))
        .orderBy(desc(userBlocks.createdAt));
    },
  };
}

export type BlocksStore = ReturnType<typeof makeBlocksStore>;
