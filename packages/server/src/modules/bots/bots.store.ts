import { and, asc, count, desc, eq, ilike, isNull, type SQL, sql } from 'drizzle-orm';
import { type Db, deleteBatch } from '../../platform/db/index.js';
import { botCommands, bots, guilds, users } from '../../platform/db/schema.js';
import { likeEscape, type Tx } from '../users/users.store.js';

export type BotRow = typeof bots.$inferSelect;

const live = isNull(bots.deletedAt);

/**
 * Command reports received at or before `before` (`created_at`: `executed_at` is what the bot
 * says): the range of the index bot_commands_created_idx (retention).
 */
export function commandsBefore(before: Date): SQL {
  return sql`${botCommands.createdAt} <= ${before.toISOString()}`;
}

export function makeBotsStore(db: Db) {
  return {
    async insert(values: typeof bots.$inferInsert, tx: Tx = db): Promise<BotRow> {
      const [row] = await tx.insert(bots).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    async byId(id: number): Promise<BotRow | undefined> {
      const [row] = await db
        .select()
        .from(bots)
        .where(and(eq(bots.id, id), live))
        .limit(1);
      return row;
    },
    /**
     * The live bot's row, locked until the transaction ends: FOR UPDATE for a change decided on what
     * it holds; FOR SHARE for a write decided on its type (a bot's rename of a user), which sees a
     * type change or deletion committed before while a later one waits for it. Take it after the
     * users rows (docs/api.md, Moderation).
     */
    async lockById(id: number, tx: Tx, strength: 'update' | 'share' = 'update'): Promise<BotRow | undefined> {
      const [row] = await tx
        .select()
        .from(bots)
        .where(and(eq(bots.id, id), live))
        .limit(1)
        .for(strength);
      return row;
    },
    /**
     * The user an admin names as a bot's owner, their row held (FOR KEY SHARE) until the transaction
     * ends, or undefined when there is none. The lock blocks the row's deletion (an account
     * deletion, the stranger sweep) but not other changes to the user: a deletion either committed
     * before (no row) or waits for the bot write, then releases the bot (AdminService.deleteUser).
     */
    async lockOwner(userId: number, tx: Tx): Promise<{ isStranger: boolean } | undefined> {
      const [row] = await tx
        .select({ isStranger: users.isStranger })
        .from(users)
        .where(eq(users.id, userId))
        .limit(1)
        .for('key share');
      return row;
    },
    async byKeyHash(hash: string): Promise<BotRow | undefined> {
      const [row] = await db
        .select()
        .from(bots)
        .where(and(eq(bots.keyHash, hash), live))
        .limit(1);
      return row;
    },
    async update(id: number, values: Partial<typeof bots.$inferInsert>, tx: Tx = db): Promise<BotRow | undefined> {
      const [row] = await tx
        .update(bots)
        .set(values)
        .where(and(eq(bots.id, id), live))
        .returning();
      return row;
    },
    /**
     * The guilds a deleted bot reported no longer have a bot (`has_bot`), until the next bot's
     * report: the deleted bot's key reports nothing any more.
     */
    async releaseGuilds(botId: number, at: Date, tx: Tx): Promise<void> {
      await tx.update(guilds).set({ hasBot: false, updatedAt: at }).where(eq(guilds.reportedByBotId, botId));
    },
    /**
     * The bots owned by a user lose their owner (the account is being deleted). Deleted bots too:
     * their rows stay, and none keeps the id of a deleted account (docs/api.md, Bots); but only
     * the live ones are answered, the bots the deletion released (its audit entry's `released_bots`).
     */
    async clearOwner(userId: number, at: Date, tx: Tx): Promise<number[]> {
      const rows = await tx
        .update(bots)
        .set({ ownerUserId: null, updatedAt: at })
        .where(eq(bots.ownerUserId, userId))
        .returning({ id: bots.id, deletedAt: bots.deletedAt });
      return rows.filter((r) => r.deletedAt === null).map((r) => r.id);
    },
    async list(offset: number, limit: number): Promise<BotRow[]> {
      return db
        .select()
        .from(bots)
        .where(live)
        .orderBy(asc(bots.type), desc(sql`coalesce(${bots.statsUsers}, 0)`), asc(bots.id))
        .offset(offset)
        .limit(limit);
    },
    async search(q: string, offset: number, limit: number): Promise<BotRow[]> {
      return db
        .select()
        .from(bots)
        .where(and(live, ilike(bots.name, `%${likeEscape(q)}%`)))
        .orderBy(asc(bots.type), asc(bots.name), asc(bots.id))
        .offset(offset)
        .limit(limit);
    },
    async recordCommands(rows: (typeof botCommands.$inferInsert)[]): Promise<number> {
      if (rows.length === 0) return 0;
      const inserted = await db.insert(botCommands).values(rows).returning({ id: botCommands.id });
      return inserted.length;
    },
    /** Deletes up to `limit` command reports received at or before `before` (retention). */
    async pruneCommands(before: Date, limit: number): Promise<number> {
      return deleteBatch(db, botCommands, botCommands.id, commandsBefore(before), limit);
    },
    async countsByType(): Promise<Map<number, number>> {
      const rows = await db.select({ type: bots.type, n: count() }).from(bots).where(live).groupBy(bots.type);
      return new Map(rows.map((r) => [r.type, r.n]));
    },
  };
}

export type BotsStore = ReturnType<typeof makeBotsStore>;
