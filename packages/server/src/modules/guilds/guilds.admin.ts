import {
  AuditCodes,
  type Guild,
  type GuildPremiumBody,
  type GuildPremiumRevokeBody,
  type GuildSponsorBody,
} from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import { callerLevelOf, lockActorAndTarget } from '../admin/admin.locks.js';
import { type ActorLevel, mayAdminister } from '../admin/admin.rules.js';
import type { Actor } from '../audit/audit.store.js';
import type { Tx, UserRow } from '../users/users.store.js';
import { premiumUntil } from './guilds.rules.js';
import type { GuildsDeps } from './guilds.service.js';
import type { GuildInsert, GuildRow } from './guilds.store.js';

/** The caller of an admin guild route (admin.routes `adminActor`): who it is and its session's level. */
export interface AdminCaller {
  actor: Actor;
  level: ActorLevel;
}

export interface GuildAdminDeps extends GuildsDeps {
  /** The guild as its answer, sponsors included. */
  full: (g: GuildRow) => Promise<Guild>;
  /** Writes `values` to the guild's row in `tx`; 404 when it is gone. */
  updated: (id: number, values: Partial<GuildInsert>, tx: Tx) => Promise<GuildRow>;
}

/** The admin guild routes (spec 4.4): premium granted or revoked, sponsors added or removed. */
export function makeGuildAdmin(deps: GuildAdminDeps) {
  const { db, store, clock, audit, users, full, updated } = deps;

  /**
   * Runs an admin change on the locked guild row once the caller may administer (mayAdminister)
   * on its level as `lockCaller` reads it after that lock (guild rows before users rows), never the
   * session's view of it (the route's guard checked that first, as a quick refusal): an Admin
   * demoted on another node, not yet heard of here, changes nothing. The change gets what
   * `lockCaller` answered and returns the row to answer with.
   */
  const adminChange = async <Locked extends { level: ActorLevel }>(
    chatplatformId: string,
    lockCaller: (tx: Tx) => Promise<Locked>,
    change: (g: GuildRow, tx: Tx, locked: Locked) => Promise<GuildRow>,
  ) => {
    const row = await db.transaction(async (tx) => {
      const g = await store.lockByChatplatformId(chatplatformId, tx);
      if (!g) throw appError('ERR_GUILD_NOT_FOUND');
      const locked = await lockCaller(tx);
      if (!mayAdminister(locked.level)) throw appError('ERR_FORBIDDEN');
      return change(g, tx, locked);
    });
    return full(row);
  };

  /** An admin caller's level as stored, its row held FOR SHARE until the commit (callerLevelOf). */
  const callerLevel =
    ({ actor, level }: AdminCaller) =>
    async (tx: Tx): Promise<{ level: ActorLevel }> => ({ level: await callerLevelOf(tx, actor, level, clock) });

  return {
    /** Admin: premium for `days` from now, replacing any current expiry. */
    async grantPremium(caller: AdminCaller, chatplatformId: string, body: GuildPremiumBody): Promise<Guild> {
      const { actor } = caller;
      return adminChange(chatplatformId, callerLevel(caller), async (g, tx) => {
        // Counted from the time the guild's and the caller's rows are held, not when the request began.
        const now = clock.now();
        const until = premiumUntil(body.days, now);
        const next = await updated(g.id, { subscriptionExpiresAt: until, updatedAt: now }, tx);
        await audit.record(
          {
            actor,
            code: AuditCodes.GUILD_PREMIUM_GRANT,
            action: 'grant',
            reason: body.reason ?? null,
            data: {
              guild_id: g.chatplatformId,
              days: body.days,
              expires_at: until.toISOString(),
              previous_expires_at: g.subscriptionExpiresAt?.toISOString() ?? null,
            },
          },
          tx,
        );
        return next;
      });
    },

    /** Admin: ends guild premium. A guild without an expiry is left as is (idempotent, nothing recorded). */
    async revokePremium(caller: AdminCaller, chatplatformId: string, body: GuildPremiumRevokeBody | undefined) {
      const { actor } = caller;
      return adminChange(chatplatformId, callerLevel(caller), async (g, tx) => {
        if (g.subscriptionExpiresAt === null) return g;
        const next = await updated(g.id, { subscriptionExpiresAt: null, updatedAt: clock.now() }, tx);
        await audit.record(
          {
            actor,
            code: AuditCodes.GUILD_PREMIUM_REVOKE,
            action: 'revoke',
            reason: body?.reason ?? null,
            data: { guild_id: g.chatplatformId, expires_at: g.subscriptionExpiresAt.toISOString() },
          },
          tx,
        );
        return next;
      });
    },

    /**
     * Admin: adds or removes a sponsor. Repeating either changes and records nothing. An added
     * sponsor's row is held until the commit: a user deleted meanwhile answers 404, not a
     * foreign-key error. It is locked with the caller's in one statement, in id order
     * (lockActorAndTarget), as every transaction that locks two users rows FOR UPDATE takes them
     * (admin.store lockUsersInIdOrder): the caller's held FOR SHARE before the sponsor's would
     * deadlock with an admin action of the sponsor on the caller, or of the caller on the sponsor,
     * whenever the sponsor's id is the lower.
     */
    async setSponsor(
      caller: AdminCaller,
      chatplatformId: string,
      body: GuildSponsorBody,
      add: boolean,
    ): Promise<Guild> {
      const { actor } = caller;
      const user = await users.byId(body.user_id);
      if (!user || (add && user.isStranger)) throw appError('ERR_USER_NOT_FOUND');
      // The sponsor to add is locked with the caller, the one to remove needs no lock.
      const lockCaller = async (tx: Tx): Promise<{ level: ActorLevel; target?: UserRow }> =>
        add ? lockActorAndTarget(tx, actor, caller.level, body.user_id, clock) : callerLevel(caller)(tx);
      return adminChange(chatplatformId, lockCaller, async (g, tx, { target }) => {
        if (add && !target) throw appError('ERR_USER_NOT_FOUND');
        // Stamped once the rows are held, not when the request began.
        const now = clock.now();
        const changed = add
          ? await store.addSponsor(g.id, body.user_id, now, tx)
          : await store.removeSponsor(g.id, body.user_id, tx);
        if (!changed) return g;
        await audit.record(
          {
            actor,
            code: add ? AuditCodes.GUILD_SPONSOR_ADD : AuditCodes.GUILD_SPONSOR_REMOVE,
            action: add ? 'add' : 'remove',
            targetUserId: body.user_id,
            reason: body.reason ?? null,
            data: { guild_id: g.chatplatformId },
          },
          tx,
        );
        return updated(g.id, { updatedAt: now }, tx);
      });
    },
  };
}
