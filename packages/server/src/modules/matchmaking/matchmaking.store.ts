import { type AnyColumn, eq, type SQL, sql, type Table } from 'drizzle-orm';
import type { Db } from '../../platform/db/index.js';
import { chatMembers, chats, sessions, userBlocks, users } from '../../platform/db/schema.js';
import { hasPremium } from '../users/users.presenter.js';

/** What POST /v1/portal/match checks about its caller before the queue is touched. */
export interface SearcherFacts {
  premium: boolean;
  /** Active (not archived) direct chats the user is a member of. */
  activeDirect: number;
  /** Everyone this user blocked or was blocked by. */
  exclude: number[];
  /** The country of the session's address (its stored geo), or null. */
  country: string | null;
}

/** A table-qualified column (drizzle leaves columns unqualified in a single-table select). */
const q = (table: Table, column: AnyColumn): SQL => sql`${table}.${sql.identifier(column.name)}`;

/**
 * Read-only look-ups of matchmaking across the users, chats, blocks and sessions tables, in one
 * statement, so an enqueue pays one database round trip before the queue call.
 */
export function makeMatchmakingStore(db: Db) {
  const userId = sql.placeholder('userId');
  const sessionId = sql.placeholder('sessionId');
  // Built once (drizzle then only binds the two values); postgres-js also keeps it prepared.
  const facts = db
    .select({
      tier: users.subscriptionTier,
      tierExpiresAt: users.subscriptionExpiresAt,
      activeDirect:
        sql<number>`(select count(*) from ${chatMembers} inner join ${chats} on ${q(chats, chats.id)} = ${q(chatMembers, chatMembers.chatId)}
            where ${q(chatMembers, chatMembers.userId)} = ${userId} and ${q(chatMembers, chatMembers.leftAt)} is null
              and ${q(chats, chats.deletedAt)} is null and ${q(chats, chats.type)} = 'direct' and ${q(chats, chats.archivedAt)} is null)`.mapWith(
          Number,
        ),
      // As text: both drivers hand text back as it is, whatever their array parsing.
      exclude: sql<string | null>`(select string_agg(case when ${q(userBlocks, userBlocks.blockerId)} = ${userId}
              then ${q(userBlocks, userBlocks.blockedId)} else ${q(userBlocks, userBlocks.blockerId)} end::text, ',')
            from ${userBlocks} where ${q(userBlocks, userBlocks.blockerId)} = ${userId} or ${q(userBlocks, userBlocks.blockedId)} = ${userId})`,
      country: sql<
        string | null
      >`(select ${q(sessions, sessions.geo)} ->> 'country_code' from ${sessions} where ${q(sessions, sessions.id)} = ${sessionId})`,
    })
    .from(users)
    .where(eq(users.id, userId))
    .prepare('match_searcher_facts');

  return {
    /** Undefined when the user does not exist. */
    async searcherFacts(userId: number, sessionId: number, now: Date): Promise<SearcherFacts | undefined> {
      const [row] = await facts.execute({ userId, sessionId });
      if (!row) return undefined;
      return {
        premium: hasPremium({ subscriptionTier: row.tier, subscriptionExpiresAt: row.tierExpiresAt }, now),
        activeDirect: row.activeDirect,
        exclude: row.exclude ? [...new Set(row.exclude.split(',').map(Number))] : [],
        country: row.country ? row.country : null,
      };
    },
  };
}

export type MatchmakingStore = ReturnType<typeof makeMatchmakingStore>;
