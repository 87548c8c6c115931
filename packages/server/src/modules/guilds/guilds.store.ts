import { BotTypeNames, GUILD_PLATFORM } from '@parlor/protocol';
import { and, asc, eq, gt, inArray, sql } from 'drizzle-orm';
import { anyOf, type Db } from '../../platform/db/index.js';
import { bots, guildSponsors, guilds, linkedPlatforms } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

export type GuildRow = typeof guilds.$inferSelect;
export type GuildInsert = typeof guilds.$inferInsert;

/** What the bot upsert writes: the columns of a new row, and the subset it changes on an existing one. */
export interface GuildUpsert {
  insert: GuildInsert;
  update: Partial<GuildInsert>;
}

/** The guilds' SQL: records, ownership through linked platform identities, sponsors. */
export function makeGuildsStore(db: Db) {
  return {
    /**
     * Inserts or updates by chatplatform_id in one statement, so concurrent upserts of one guild
     * cannot collide. A new guild records `botId` as its reporting bot. An existing one is updated
     * only by its reporting bot, by any bot while it has none (null, or a deleted bot: `botId` is
     * then recorded), or by an Official bot (which leaves the recorded bot as it is); otherwise
     * nothing is written and the answer is undefined. Decided in the statement, on the row it
     * updates, so two bots reporting a new guild at once cannot both take it.
     */
    async upsert(values: GuildUpsert, botId: number): Promise<GuildRow | undefined> {
      const reporter = guilds.reportedByBotId;
      const claimable = sql`(${reporter} is null or ${reporter} = ${botId} or not exists (
        select 1 from ${bots} where ${bots.id} = ${reporter} and ${bots.deletedAt} is null))`;
      const official = sql`exists (select 1 from ${bots} where ${bots.id} = ${botId}
        and ${bots.type} = ${BotTypeNames.official} and ${bots.deletedAt} is null)`;
      const [row] = await db
        .insert(guilds)
        .values({ ...values.insert, reportedByBotId: botId })
        .onConflictDoUpdate({
          target: guilds.chatplatformId,
          set: { ...values.update, reportedByBotId: sql`case when ${claimable} then ${botId} else ${reporter} end` },
          setWhere: sql`${claimable} or ${official}`,
        })
        .returning();
      return row;
    },
    async byChatplatformId(chatplatformId: string, tx: Tx = db): Promise<GuildRow | undefined> {
      const [row] = await tx.select().from(guilds).where(eq(guilds.chatplatformId, chatplatformId)).limit(1);
      return row;
    },
    /**
     * The guild's row, locked until the transaction ends: every change of a guild (the bot upsert
     * too, by its own statement) writes this row, so what is decided on it stays true until commit.
     */
    async lockByChatplatformId(chatplatformId: string, tx: Tx): Promise<GuildRow | undefined> {
      const [row] = await tx
        .select()
        .from(guilds)
        .where(eq(guilds.chatplatformId, chatplatformId))
        .limit(1)
        .for('update');
      return row;
    },
    async update(id: number, values: Partial<GuildInsert>, tx: Tx = db): Promise<GuildRow | undefined> {
      const [row] = await tx.update(guilds).set(values).where(eq(guilds.id, id)).returning();
      return row;
    },
    /** Guilds owned by the user's identity on the guilds' platform, oldest first. */
    async ownedBy(userId: number): Promise<GuildRow[]> {
      const identities = db
        .select({ id: linkedPlatforms.platformUserId })
        .from(linkedPlatforms)
        .where(and(eq(linkedPlatforms.userId, userId), eq(linkedPlatforms.platform, GUILD_PLATFORM)));
      return db.select().from(guilds).where(inArray(guilds.ownerChatplatformId, identities)).orderBy(asc(guilds.id));
    },
    /**
     * True when the user's identity on the guilds' platform has this id. The platform is matched
     * too: an identity on another platform may carry the same digits.
     */
    async hasIdentity(userId: number, platformUserId: string, tx: Tx = db): Promise<boolean> {
      const rows = await tx
        .select({ id: linkedPlatforms.id })
        .from(linkedPlatforms)
        .where(
          and(
            eq(linkedPlatforms.userId, userId),
            eq(linkedPlatforms.platform, GUILD_PLATFORM),
            eq(linkedPlatforms.platformUserId, platformUserId),
          ),
        )
        .limit(1);
      return rows.length > 0;
    },
    /** The guild holding this vanity, other than `exceptId`. */
    async vanityHolder(vanity: string, exceptId: number, tx: Tx = db): Promise<number | null> {
      const [row] = await tx
        .select({ id: guilds.id })
        .from(guilds)
        .where(and(eq(guilds.vanityInvite, vanity), sql`${guilds.id} <> ${exceptId}`))
        .limit(1);
      return row?.id ?? null;
    },
    /** The chat of the guild with this vanity, while its premium is active and it is active. */
    async chatOfVanity(vanity: string, now: Date): Promise<number | null> {
      const [row] = await db
        .select({ chatId: guilds.chatId })
        .from(guilds)
        .where(and(eq(guilds.vanityInvite, vanity), eq(guilds.state, 0), gt(guilds.subscriptionExpiresAt, now)))
        .limit(1);
      return row?.chatId ?? null;
    },
    /** The guild whose public chat this is. */
    async byChatId(chatId: number): Promise<GuildRow | undefined> {
      const [row] = await db.select().from(guilds).where(eq(guilds.chatId, chatId)).limit(1);
      return row;
    },
    async isSponsor(guildId: number, userId: number, tx: Tx = db): Promise<boolean> {
      const rows = await tx
        .select({ userId: guildSponsors.userId })
        .from(guildSponsors)
        .where(and(eq(guildSponsors.guildId, guildId), eq(guildSponsors.userId, userId)))
        .limit(1);
      return rows.length > 0;
    },
    /** Sponsor user ids per guild id, ascending. */
    async sponsorsOf(guildIds: number[]): Promise<Map<number, number[]>> {
      const out = new Map<number, number[]>(guildIds.map((id) => [id, []]));
      if (guildIds.length === 0) return out;
      const rows = await db
        .select({ guildId: guildSponsors.guildId, userId: guildSponsors.userId })
        .from(guildSponsors)
        .where(anyOf(guildSponsors.guildId, guildIds))
        .orderBy(asc(guildSponsors.userId));
      for (const r of rows) out.get(r.guildId)?.push(r.userId);
      return out;
    },
    /** Adds a sponsor; false when they already were one. */
    async addSponsor(guildId: number, userId: number, at: Date, tx: Tx): Promise<boolean> {
      const rows = await tx
        .insert(guildSponsors)
        .values({ guildId, userId, createdAt: at })
        .onConflictDoNothing()
        .returning({ userId: guildSponsors.userId });
      return rows.length > 0;
    },
    /** Removes a sponsor; false when they were not one. */
    async removeSponsor(guildId: number, userId: number, tx: Tx): Promise<boolean> {
      const rows = await tx
        .delete(guildSponsors)
        .where(and(eq(guildSponsors.guildId, guildId), eq(guildSponsors.userId, userId)))
        .returning({ userId: guildSponsors.userId });
      return rows.length > 0;
    },
  };
}

export type GuildsStore = ReturnType<typeof makeGuildsStore>;
