import { type AdminBotUpdateBody, AuditCodes, type BotCreateBody, BotTypeNames, Limits } from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import { randomToken, sha256Hex } from '../../platform/secrets.js';
import { callerLevelOf } from '../admin/admin.locks.js';
import { type ActorLevel, canManageOfficial, mayAdminister } from '../admin/admin.rules.js';
import type { Actor } from '../audit/audit.store.js';
import type { Tx } from '../users/users.store.js';
import { toBotProfile } from './bots.presenter.js';
import type { BotsDeps } from './bots.service.js';
import type { BotRow, BotsStore } from './bots.store.js';

/** Bot keys are recognisable in logs and secret scanners by this prefix; the rest is 32 random bytes. */
export const BOT_KEY_PREFIX = 'pbk_';

const OFFICIAL = BotTypeNames.official;

/**
 * The admin bot routes (spec 4.2): registration, update and deletion, decided on the session's
 * level first, then on the caller's as stored. `mustGet`: the bot, else 404 ERR_BOT_NOT_FOUND.
 */
export function makeBotAdmin({ db, store, audit, clock, users }: BotsDeps, mustGet: (id: number) => Promise<BotRow>) {
  const officialOnly = () => appError('ERR_FORBIDDEN', 'Only Owners and the operator manage official bots.');

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
    const stored = await callerLevelOf(tx, actor, level, clock);
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
      const apiKey = BOT_KEY_PREFIX + randomToken(32);
      // The bot and its audit entry commit together: a failed audit leaves no bot whose key nobody saw.
      const bot = await db.transaction(async (tx) => {
        if (!mayRegister(await callerAndOwnerHeld(tx, actor, level, ownerId ?? null))) throw officialRefused();
        // Stamped once the users rows are held, not when the request began.
        const now = clock.now();
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
      const values: Parameters<BotsStore['update']>[1] = {};
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
        // Stamped once the rows are held, not when the request began.
        const row = await store.update(botId, { ...values, updatedAt: clock.now() }, tx);
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
     * POST /v1/admin/bots/{id}/delete: a soft delete; the key stops working with the next request,
     * and the guilds it reported read `has_bot: false` until another bot reports them.
     * Decided on the session's level first, then on the caller's as stored and the bot's locked row.
     */
    async remove(botId: number, actor: Actor, level: ActorLevel): Promise<void> {
      const mayManage = (bot: BotRow, l: ActorLevel) => bot.type !== OFFICIAL || canManageOfficial(l);
      if (!mayManage(await mustGet(botId), level)) throw officialOnly();
      await db.transaction(async (tx) => {
        const stored = await callerAndOwnerHeld(tx, actor, level, null);
        const bot = await store.lockById(botId, tx);
        if (!bot) throw appError('ERR_BOT_NOT_FOUND');
        if (!mayManage(bot, stored)) throw officialOnly();
        // Stamped once the rows are held, not when the request began.
        const now = clock.now();
        if (!(await store.update(botId, { deletedAt: now, updatedAt: now }, tx))) throw appError('ERR_BOT_NOT_FOUND');
        await store.releaseGuilds(botId, now, tx);
        await audit.record(
          { actor, code: AuditCodes.BOT_DELETE, action: 'delete', targetBotId: botId, data: { name: bot.name } },
          tx,
        );
      });
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
