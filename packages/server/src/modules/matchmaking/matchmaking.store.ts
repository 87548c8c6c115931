import { and, eq, sql } from 'drizzle-orm';
import { stateRefusal } from '../../platform/auth.js';
import { type Db, rowsOf } from '../../platform/db/index.js';
import { sessions, users } from '../../platform/db/schema.js';
import { directActive } from '../chats/chats.direct.store.js';
import { active } from '../sessions/sessions.store.js';
import { effectiveState, hasPremium } from '../users/users.presenter.js';

/**
 * What POST /v1/portal/match checks about its caller before the queue is touched (read fresh: the
 * session's cached account may predate a stranger block).
 */
export interface SearcherFacts {
  premium: boolean;
  /**
   * Active direct chats the user is a member of: not archived and not past their expiry (a direct
   * chat is archived exactly at its expiry, before the sweep writes it: chats.rules `archivedAtOf`).
   */
  activeDirect: number;
  /**
   * The users this user blocked (at most Limits.BLOCKS_PER_USER): its queue entry's exclusions.
   * Not those who blocked it, whom nothing bounds (anyone may block anyone): their own entries
   * exclude this user, which a placing reads both ways, and the pairing statement reads the
   * blocks both ways.
   */
  exclude: number[];
  /** The country of the session's address (its stored geo), or null. */
  country: string | null;
  /** A moderator blocked this (stranger) account from matchmaking, as stored now. */
  matchBlocked: boolean;
}

/** Whose facts to read: the user and the session that enqueues. */
export interface SearcherKey {
  userId: number;
  sessionId: number;
}

/**
 * Read-only look-ups of matchmaking across the users, chats, blocks and sessions tables, in one
 * statement for a whole batch of enqueues (the service group-commits them), so an enqueue pays at
 * most one database round trip before the queue call, shared with the enqueues beside it.
 */
export function makeMatchmakingStore(db: Db) {
  /** Whether the user has a session that has neither ended nor expired at `now`. */
  const hasLiveSession = async (userId: number, now: Date): Promise<boolean> => {
    const rows = await db
      .select({ id: sessions.id })
      .from(sessions)
      .where(and(eq(sessions.userId, userId), active(now)))
      .limit(1);
    return rows.length > 0;
  };
  return {
    /** One answer per key, in order; undefined where the user does not exist. */
    async searcherFacts(keys: SearcherKey[], now: Date): Promise<(SearcherFacts | undefined)[]> {
      // A VALUES list: the planner knows how few rows there are and looks each one up by index.
      const input = sql.join(
        keys.map((k, ord) => sql`(${ord}::integer, ${k.userId}::integer, ${k.sessionId}::integer)`),
        sql`, `,
      );
      const rows = rowsOf<{
        ord: number;
        tier: number;
        tier_expires_ms: number | string | null;
        active_direct: number | string;
        exclude: string | null;
        country: string | null;
        match_blocked: boolean;
      }>(
        await db.execute(sql`
          with input (ord, uid, sid) as (values ${input})
          select i.ord, u.subscription_tier as tier, u.match_blocked_at is not null as match_blocked,
                 (extract(epoch from u.subscription_expires_at) * 1000)::float8 as tier_expires_ms,
                 (select count(*) from chat_members cm join chats c on c.id = cm.chat_id
                   where cm.user_id = i.uid and cm.left_at is null and c.deleted_at is null
                     and c.type = 'direct' and ${directActive('c', sql`${now.toISOString()}::timestamptz`)})::integer as active_direct,
                 -- As text: both drivers hand text back as it is, whatever their array parsing.
                 (select string_agg(b.blocked_id::text, ',') from user_blocks b where b.blocker_id = i.uid) as exclude,
                 (select s.geo ->> 'country_code' from sessions s where s.id = i.sid) as country
          from input i join users u on u.id = i.uid`),
      );
      const out: (SearcherFacts | undefined)[] = keys.map(() => undefined);
      for (const r of rows) {
        const expires = r.tier_expires_ms === null ? null : new Date(Number(r.tier_expires_ms));
        out[r.ord] = {
          premium: hasPremium({ subscriptionTier: r.tier, subscriptionExpiresAt: expires }, now),
          activeDirect: Number(r.active_direct),
          exclude: r.exclude ? r.exclude.split(',').map(Number) : [],
          country: r.country ? r.country : null,
          matchBlocked: r.match_blocked === true,
        };
      }
      return out;
    },

    hasLiveSession,

    /**
     * Why the user may not use the platform at `now`, as its session guard would answer, or null:
     * banned or timed out (its effective state), gone, or a stranger without a live session.
     */
    async refusalOf(userId: number, now: Date): Promise<'ERR_BANNED' | 'ERR_TIMED_OUT' | 'ERR_UNAUTHENTICATED' | null> {
      const [row] = await db
        .select({
          state: users.state,
          stateExpiresAt: users.stateExpiresAt,
          thenState: users.thenState,
          thenStateExpiresAt: users.thenStateExpiresAt,
          stranger: users.isStranger,
        })
        .from(users)
        .where(eq(users.id, userId))
        .limit(1);
      if (!row) return 'ERR_UNAUTHENTICATED';
      const refusal = stateRefusal(effectiveState(row, now));
      if (refusal) return refusal;
      return row.stranger && !(await hasLiveSession(userId, now)) ? 'ERR_UNAUTHENTICATED' : null;
    },

    /** Whether the user is an anonymous stranger (false when it does not exist). */
    async isStranger(userId: number): Promise<boolean> {
      const [row] = await db.select({ stranger: users.isStranger }).from(users).where(eq(users.id, userId)).limit(1);
      return row?.stranger === true;
    },
  };
}

export type MatchmakingStore = ReturnType<typeof makeMatchmakingStore>;
