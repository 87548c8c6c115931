import { AuditCodes, type BotBatchBody, type BotUpdateBody, Limits } from '@parlor/protocol';
import type { BotResolver, Principal } from '../../platform/auth.js';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { rateLimited } from '../../platform/http.js';
import { sha256Hex } from '../../platform/secrets.js';
import type { Limiter, StateStore } from '../../platform/state/index.js';
import type { AuditStore } from '../audit/audit.store.js';
import type { UsersService } from '../users/users.service.js';
import { isUniqueViolation, type Tx } from '../users/users.store.js';
import { BOT_KEY_PREFIX, makeBotAdmin } from './bots.admin.js';
import { toBotProfile, toPublicBot } from './bots.presenter.js';
import type { BotRow, BotsStore } from './bots.store.js';

// The admin bot routes' rules (create, adminUpdate, remove) live in bots.admin.ts; importers take the key prefix from here.
export { BOT_KEY_PREFIX };

const HOUR_MS = 3600_000;

export interface BotsDeps {
  db: Db;
  store: BotsStore;
  audit: AuditStore;
  state: StateStore;
  clock: Clock;
  /**
   * Owners named by admins must exist (404 ERR_USER_NOT_FOUND): the early check, before any lock.
   * A bot's rename of a user: its rules (renameUser writes it and its audit entry together).
   */
  users: Pick<UsersService, 'mustGet' | 'botRenameCheck' | 'botRenameIn' | 'botUpdated'>;
}

export function makeBotsService(deps: BotsDeps) {
  const { db, store, audit, state, clock, users } = deps;
  const perMinute = state.limiter('bot-minute', Limits.BOT_REQUESTS_PER_MINUTE, 60_000);
  // One hourly count per bot, compared with the bot's rate_limit_per_hour as it is at each request:
  // limiters of one name share their count whatever their points (StateStore.limiter), so a limit
  // an admin changes applies to the requests already made this hour. A limiter per distinct rate,
  // as each limiter fixes its points.
  const perHour = new Map<number, Limiter>();
  const hourly = (points: number) => {
    let l = perHour.get(points);
    if (!l) {
      l = state.limiter('bot-hour', points, HOUR_MS);
      perHour.set(points, l);
    }
    return l;
  };

  const mustGet = async (id: number): Promise<BotRow> => {
    const b = await store.byId(id);
    if (!b) throw appError('ERR_BOT_NOT_FOUND');
    return b;
  };
  return {
    ...makeBotAdmin(deps, mustGet),

    /** A deleted account's bots keep running without an owner (inside the deletion's transaction). */
    releaseOwner: (userId: number, tx: Tx) => store.clearOwner(userId, clock.now(), tx),

    /**
     * Authenticates a key and spends one request of both of its limits (per minute, per hour).
     * Every request counts in both windows, refused ones too (docs/api.md, Bots): a request the
     * minute refuses is still one of the hour's. Over either, 429 with the longer wait of those over.
     */
    resolver(): BotResolver {
      return {
        async resolve(apiKey) {
          if (!apiKey.startsWith(BOT_KEY_PREFIX)) return null;
          const bot = await store.byKeyHash(sha256Hex(apiKey));
          if (!bot) return null;
          const key = String(bot.id);
          const spent = await Promise.all([perMinute.consume(key), hourly(bot.rateLimitPerHour).consume(key)]);
          const refused = spent.filter((r) => !r.allowed);
          if (refused.length > 0) throw rateLimited(Math.max(...refused.map((r) => r.retryAfterMs)));
          return { id: bot.id, type: bot.type };
        },
      };
    },

    /**
     * POST /v1/bot/users/{id}/update: a bot renames a user, within the bot's ceiling
     * (UsersService botMayRename: Verified and Community bots only users below Admin). Checked
     * first without locks (404, 403, 400); then the rename and its audit entry (101 `rename`, data
     * `{from, to}`, actor the bot, as docs/api.md's audit log names it) commit together, decided
     * on the target's locked row. A refusal writes nothing; renaming to the current name neither.
     * Once a rename commits, the user's sockets drop on every node (UsersService.onRenamed): they
     * carry the name their handshake read, and reconnect with the new one.
     */
    async renameUser(bot: NonNullable<Principal['bot']>, userId: number, username: string | undefined) {
      await users.botRenameCheck(bot, userId, username);
      if (username === undefined) return users.botUpdated(userId);
      try {
        // Answered from the row the rename wrote, read in its transaction (botRenameIn): a deletion
        // committed right after it cannot turn the committed, audited rename into a 404.
        return await db.transaction(async (tx) => {
          // The bot as stored once the target's row is held: a type change or deletion committed
          // since its key was resolved counts (a deleted bot's key is refused, as it now would be).
          const heldBot = async () => {
            const stored = await store.lockById(bot.id, tx, 'share');
            if (!stored) throw appError('ERR_INVALID_API_KEY');
            return stored;
          };
          const { change, user } = await users.botRenameIn(heldBot, userId, username, tx);
          if (change) {
            await audit.record(
              {
                actor: { kind: 'bot', id: bot.id },
                code: AuditCodes.USER_UPDATE,
                action: 'rename',
                targetUserId: userId,
                data: change,
              },
              tx,
            );
          }
          return user;
        });
      } catch (e) {
        // Two renames racing for one name: the unique index decides, and the loser changes nothing.
        if (isUniqueViolation(e)) throw appError('ERR_USERNAME_TAKEN');
        throw e;
      }
    },

    async me(botId: number) {
      return toBotProfile(await mustGet(botId));
    },

    /** Own info (name, avatar) and stats (users, latency) in one call. */
    async updateMe(botId: number, body: BotUpdateBody) {
      const now = clock.now();
      const values: Parameters<BotsStore['update']>[1] = { updatedAt: now };
      if (body.name !== undefined) values.name = body.name;
      if (body.avatar_url !== undefined) values.avatarUrl = body.avatar_url;
      if (body.stats) {
        if (body.stats.users !== undefined) values.statsUsers = body.stats.users;
        // Rounded to the microsecond, as a 4-byte real underflows on tiny doubles (5e-324). The real
        // keeps 24 significant bits: the microsecond below 16384 ms, about 7 digits above (docs/api.md).
        if (body.stats.latency_ms !== undefined)
          values.statsLatencyMs = Math.round(body.stats.latency_ms * 1000) / 1000;
        values.statsReportedAt = now;
      }
      const row = await store.update(botId, values);
      if (!row) throw appError('ERR_BOT_NOT_FOUND');
      return toBotProfile(row);
    },

    /** Records a batch of command executions in one insert. */
    async batch(botId: number, body: BotBatchBody): Promise<{ recorded: number }> {
      const now = clock.now();
      const recorded = await store.recordCommands(
        body.commands.map((c) => ({
          botId,
          command: c.command,
          userId: c.user_id ?? null,
          guildId: c.guild_id ?? null,
          success: c.success ?? null,
          durationMs: c.duration_ms ?? null,
          executedAt: c.executed_at ? new Date(c.executed_at) : now,
          createdAt: now,
        })),
      );
      return { recorded };
    },

    async list(offset: number, limit: number) {
      return (await store.list(offset, limit)).map(toPublicBot);
    },

    /** Admins and above see the full profile (owner, rate limit, type). */
    async get(id: number, viewerLevel: number | null) {
      const b = await mustGet(id);
      return viewerLevel !== null && viewerLevel >= 2 ? toBotProfile(b) : toPublicBot(b);
    },

    async search(q: string, viewerLevel: number | null, offset: number, limit: number) {
      const rows = await store.search(q, offset, limit);
      return viewerLevel !== null && viewerLevel >= 2 ? rows.map(toBotProfile) : rows.map(toPublicBot);
    },

    async statistics() {
      const counts = await store.countsByType();
      const official = counts.get(1) ?? 0;
      const verified = counts.get(2) ?? 0;
      const community = counts.get(3) ?? 0;
      return { total: official + verified + community, official, verified, community };
    },
  };
}

export type BotsService = ReturnType<typeof makeBotsService>;
