import { and, count, desc, eq } from 'drizzle-orm';
import type { Db } from '../../platform/db/index.js';
import { userBlocks } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

/** User-to-user blocks (a block keeps two users from being matched, both ways). */
export function makeBlocksStore(db: Db) {
  return {
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
