import {
  type AdminBotUpdateBody,
  AuditCodes,
  type BotBatchBody,
  type BotCreateBody,
  BotTypeNames,
  type BotUpdateBody,
  Limits,
} from '@parlor/protocol';
import type { BotResolver, Principal } from '../../platform/auth.js';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { rateLimited } from '../../platform/http.js';
import { randomToken, sha256Hex } from '../../platform/secrets.js';
import type { Limiter, StateStore } from '../../platform/state/index.js';
import { callerLevelOf } from '../admin/admin.locks.js';
import { type ActorLevel, canManageOfficial, mayAdminister } from '../admin/admin.rules.js';
import type { Actor, AuditStore } from '../audit/audit.store.js';
import type { UsersService } from '../users/users.service.js';
import { isUniqueViolation, type Tx } from '../users/users.store.js';
import { toBotProfile, toPublicBot } from './bots.presenter.js';
import type { BotRow, BotsStore } from './bots.store.js';

const HOUR_MS = 3600_000;
/** Bot keys are recognisable in logs and secret scanners by this prefix; the rest is 32 random bytes. */
export const BOT_KEY_PREFIX = 'pbk_';

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

const OFFICIAL = BotTypeNames.official;

export function makeBotsService({ db, store, audit, state, clock, users }: BotsDeps) {
  const perMinute = state.limiter('bot-minute', Limits.BOT_REQUESTS_PER_MINUTE, 60_000);
  // One hourly count per bot, compared with the bot's rate_limit_per_hour as it is at each request:
  // limiters of one name share their count whatever their points (StateStore.limiter), so a limit
  // an admin changes applies to the requests already made this hour. A limiter per distinct rate,
  // as rate-limiter-flexible fixes the points of each.
  const perHour = new Map<number, Limiter>();
  const hourly = (points: number) => {
    let l = perHour.get(points);
    if (!l) {
      l = state.limiter('bot-hour', points, HOUR_MS);
      perHour.set(points, l);
    }
    return l;
  };

  const officialOnly = () => appError('ERR_FORBIDDEN', 'Only Owners and the operator manage official bots.');

  const mustGet = async (id: number): Promise<BotRow> => {
    const b = await store.byId(id);
    if (!b) throw appError('ERR_BOT_NOT_FOUND');
    return b;
  };

  /**
   * An owner named by an admin is a registered account, else 404 ERR_USER_NOT_FOUND (as for a
   * guild sponsor): an anonymous stranger's account is swept later without its bots being
   * released (AuthService.sweepStrangers), which would leave the bot the id of no account. An
   * early answer before any lock; ownerHeld decides again in the write's transaction.
   */
  const mustBeOwnable = async (userId: number): Promise<void> => {
    if ((await users.mustGet(userId)).isStranger) throw appError('ERR_USER_NOT_FOUND');
  };

  /**
   * The same, on the owner's row held until the commit (BotsStore.lockOwner): an account deleted
   * after the early check has had its bots released already (AdminService.deleteUser), so writing
   * its id now would leave it dangling; the row lock makes a deletion either seen here or wait.
   * Taken before the bot's row, in the order a deletion takes them (user, then the user's bots).
   */
  const ownerHeld = async (userId: number, tx: Tx): Promise<void> => {
    const owner = await store.lockOwner(userId, tx);
    if (!owner || owner.isStranger) throw appError('ERR_USER_NOT_FOUND');
  };

  /**
   * The caller's level as stored (callerLevelOf: a user caller's row held FOR SHARE until the
   * commit, the operator's level standing), refused 403 below Admin; with the named owner's row
   * held as ownerHeld does. The route's guard and the early checks read the session's level, which
   * a demotion committed on another node (or while the request waited) has not reached yet
   * (docs/api.md, "Levels as they are at the commit").
   *
   * Both users rows are taken first in the transaction, before the bot's row, and in id order
   * between them. Before the bot's: an account deletion takes the users rows (the caller's and
   * its target's, FOR UPDATE) and then the account's bots (releaseOwner), so a caller's row taken
   * after a bot it owns would deadlock with the caller's deletion. In id order: an admin action
   * between the caller and the owner (one demoting the other) locks both rows FOR UPDATE in id
   * order (admin.store lockUsersInIdOrder), and each of ours conflicts with that lock, so taking
   * the higher first could deadlock with it; in the same order, the later one waits for the
   * earlier instead. A broadcast's FOR KEY SHARE of every user conflicts with neither.
   */
  const callerAndOwnerHeld = async (
    tx: Tx,
    actor: Actor,
    level: ActorLevel,
    ownerId: number | null,
  ): Promise<ActorLevel> => {
    const ownerFirst = ownerId !== null && (actor.kind !== 'user' || ownerId < actor.id);
    if (ownerFirst) await ownerHeld(ownerId, tx);
    const stored = await callerLevelOf(tx, actor, level, clock.now());
    if (!mayAdminister(stored)) throw appError('ERR_FORBIDDEN');
    if (ownerId !== null && !ownerFirst) await ownerHeld(ownerId, tx);
    return stored;
  };

  return {
    /**
     * Registers a bot; the API key is in this answer only and stored as its hash. Official: Owners
     * and the operator. Decided on the session's level first, then on the caller's as stored.
     */
    async create(body: BotCreateBody, actor: Actor, level: ActorLevel): Promise<{ id: number; api_key: string }> {
      const mayRegister = (l: ActorLevel) => body.type !== 'official' || canManageOfficial(l);
      const officialRefused = () => appError('ERR_FORBIDDEN', 'Only Owners and the operator register official bots.');
      if (!mayRegister(level)) throw officialRefused();
      const ownerId = body.owner_user_id;
      if (ownerId !== undefined) await mustBeOwnable(ownerId);
      const now = clock.now();
      const apiKey = BOT_KEY_PREFIX + randomToken(32);
      // The bot and its audit entry commit together: a failed audit leaves no bot whose key nobody saw.
      const bot = await db.transaction(async (tx) => {
        if (!mayRegister(await callerAndOwnerHeld(tx, actor, level, ownerId ?? null))) throw officialRefused();
        const row = await store.insert(
          {
            name: body.name,
            type: BotTypeNames[body.type ?? 'community'],
            rateLimitPerHour: body.rate_limit_per_hour ?? Limits.BOT_DEFAULT_RATE_LIMIT_PER_HOUR,
            keyHash: sha256Hex(apiKey),
            ownerUserId: ownerId ?? null,
            createdAt: now,
            updatedAt: now,
          },
          tx,
        );
        await audit.record(
          {
            actor,
            code: AuditCodes.BOT_CREATE,
            action: 'create',
            targetBotId: row.id,
            data: { name: row.name, type: row.type },
          },
          tx,
        );
        return row;
      });
      return { id: bot.id, api_key: apiKey };
    },

    /**
     * POST /v1/admin/bots/{id}/update: Admins and above; an official bot, or making one official,
     * needs an Owner or the operator. Audited (202) with the fields that changed. Decided on the
     * session's level first, then on the caller's as stored and the bot's locked row.
     */
    async adminUpdate(botId: number, body: AdminBotUpdateBody, actor: Actor, level: ActorLevel) {
      const mayManage = (bot: BotRow, l: ActorLevel) =>
        !((bot.type === OFFICIAL || body.type === 'official') && !canManageOfficial(l));
      if (!mayManage(await mustGet(botId), level)) throw officialOnly();
      const ownerId = body.owner_user_id ?? null;
      if (ownerId !== null) await mustBeOwnable(ownerId);
      const now = clock.now();
      const values: Parameters<BotsStore['update']>[1] = { updatedAt: now };
      if (body.name !== undefined) values.name = body.name;
      if (body.type !== undefined) values.type = BotTypeNames[body.type];
      if (body.rate_limit_per_hour !== undefined) values.rateLimitPerHour = body.rate_limit_per_hour;
      if (body.owner_user_id !== undefined) values.ownerUserId = body.owner_user_id;
      if (body.avatar_url !== undefined) values.avatarUrl = body.avatar_url;
      const row = await db.transaction(async (tx) => {
        const stored = await callerAndOwnerHeld(tx, actor, level, ownerId);
        // Decided again on the locked row: an Owner may have made the bot official meanwhile.
        const bot = await store.lockById(botId, tx);
        if (!bot) throw appError('ERR_BOT_NOT_FOUND');
        if (!mayManage(bot, stored)) throw officialOnly();
        const row = await store.update(botId, values, tx);
        if (!row) throw appError('ERR_BOT_NOT_FOUND');
        await audit.record(
          { actor, code: AuditCodes.BOT_UPDATE, action: 'update', targetBotId: botId, data: changes(bot, row) },
          tx,
        );
        return row;
      });
      return toBotProfile(row);
    },

    /**
     * POST /v1/admin/bots/{id}/delete: a soft delete; the key stops working with the next request.
     * Decided on the session's level first, then on the caller's as stored and the bot's locked row.
     */
    async remove(botId: number, actor: Actor, level: ActorLevel): Promise<void> {
      const mayManage = (bot: BotRow, l: ActorLevel) => bot.type !== OFFICIAL || canManageOfficial(l);
      if (!mayManage(await mustGet(botId), level)) throw officialOnly();
      const now = clock.now();
      await db.transaction(async (tx) => {
        const stored = await callerAndOwnerHeld(tx, actor, level, null);
        const bot = await store.lockById(botId, tx);
        if (!bot) throw appError('ERR_BOT_NOT_FOUND');
        if (!mayManage(bot, stored)) throw officialOnly();
        if (!(await store.update(botId, { deletedAt: now, updatedAt: now }, tx))) throw appError('ERR_BOT_NOT_FOUND');
        await audit.record(
          { actor, code: AuditCodes.BOT_DELETE, action: 'delete', targetBotId: botId, data: { name: bot.name } },
          tx,
        );
      });
    },

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
      if (username !== undefined) {
        try {
          await db.transaction(async (tx) => {
            const change = await users.botRenameIn(bot, userId, username, tx);
            if (!change) return;
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
          });
        } catch (e) {
          // Two renames racing for one name: the unique index decides, and the loser changes nothing.
          if (isUniqueViolation(e)) throw appError('ERR_USERNAME_TAKEN');
          throw e;
        }
      }
      return users.botUpdated(userId);
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
        // Microseconds at most: the column is a 4-byte real, which underflows on tiny doubles (5e-324).
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

/** The admin-editable fields that differ between two versions of a bot, as `{field: {from, to}}`. */
function changes(before: BotRow, after: BotRow): Record<string, { from: unknown; to: unknown }> {
  const fields = {
    name: 'name',
    type: 'type',
    rate_limit_per_hour: 'rateLimitPerHour',
    owner_user_id: 'ownerUserId',
    avatar_url: 'avatarUrl',
  } as const;
  const out: Record<string, { from: unknown; to: unknown }> = {};
  for (const [wire, column] of Object.entries(fields)) {
    if (before[column] !== after[column]) out[wire] = { from: before[column], to: after[column] };
  }
  return out;
}

export type BotsService = ReturnType<typeof makeBotsService>;
