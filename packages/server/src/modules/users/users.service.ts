import { AuditCodes, BotType, type FullUser, PermissionLevel, type PublicUser, type User } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { afterCommit } from '../../platform/db/after-commit.js';
import { appError } from '../../platform/errors.js';
import { type CachedProfile, frozenProfile, type ProfileCache } from './users.cache.js';
import { isValidUsername, makeOwnAccount, USERNAME_RULE } from './users.own.js';
import {
  effectiveAvatar,
  hasPremium,
  nextChangeAt,
  toBotUser,
  toFullUser,
  toPublicUser,
  toPunishment,
  toUser,
} from './users.presenter.js';
import type { Tx, UserRow, UsersStore } from './users.store.js';

// The username and avatar rules live with the own account's update (users.own.ts).
export { AVATAR_SOURCE_RULE, isValidUsername, USERNAME_RULE } from './users.own.js';

const SUBSCRIPTION_CODES = [AuditCodes.SUBSCRIPTION_GRANT, AuditCodes.SUBSCRIPTION_REVOKE];

/**
 * Whether a viewer sees another user's full detail: Admin and above, of every user (spec 2.1 and
 * 5: "full detail (no redaction …) for Admin and above"). Which users an Admin's search lists is
 * another rule (below the Admin's level, users.store.ts).
 */
export function seesFullDetail(viewerLevel: number | null): boolean {
  return viewerLevel !== null && viewerLevel >= PermissionLevel.ADMIN;
}

/**
 * Whether a bot of `botType` may rename a user at `targetLevel` (POST /v1/bot/users/{id}/update):
 * an Official bot (first-party) anyone; a Verified or Community bot only users below Admin. Those
 * are third parties, and an Admin may register them, so without the ceiling any bot key would
 * reach Admins and Owners, which the Admin itself may not touch (spec 2.11, docs/api.md Bots).
 */
export function botMayRename(botType: number, targetLevel: number): boolean {
  return botType === BotType.OFFICIAL || targetLevel < PermissionLevel.ADMIN;
}

const botRenameForbidden = () => appError('ERR_FORBIDDEN', 'Only official bots rename Admins and Owners.');

export interface UsersDeps {
  store: UsersStore;
  clock: Clock;
  publicUrl: string;
  /** Own profiles for GET /v1/users/me, kept right by the user-change channel; none: SQL every time. */
  profiles?: ProfileCache;
}

/** Told of a user whose rename has committed (UsersService.onRenamed). */
export type RenamedListener = (userId: number) => void;

export function makeUsersService({ store, clock, publicUrl, profiles }: UsersDeps) {
  const renameListeners: RenamedListener[] = [];
  const renamed = (userId: number) => {
    for (const listener of renameListeners) listener(userId);
  };
  // The caller's own account: its row, update and subscription (users.own.ts).
  const own = makeOwnAccount({ store, clock, publicUrl, renamed });
  const { ownRow, avatarSourceRule } = own;

  const present = async (u: UserRow): Promise<User> => toUser(u, await store.platformsOf(u.id), publicUrl, clock.now());

  /** A user as `viewerLevel` sees it, its platforms and history read through `tx` (default: the pool). */
  const presentFor = async (u: UserRow, viewerLevel: number | null, tx?: Tx): Promise<FullUser | PublicUser> => {
    const platforms = await store.platformsOf(u.id, tx);
    if (seesFullDetail(viewerLevel)) {
      return toFullUser(u, platforms, await store.auditFor(u.id, SUBSCRIPTION_CODES, tx), publicUrl, clock.now());
    }
    return toPublicUser(u, platforms, publicUrl, clock.now());
  };

  const mustGet = async (id: number): Promise<UserRow> => {
    const u = await store.byId(id);
    if (!u) throw appError('ERR_USER_NOT_FOUND');
    return u;
  };

  /**
   * A registered account for the bot routes: an anonymous stranger is no chat-platform user a bot
   * looks up or renames (404, as the admin routes answer), else a bot could give a stranger a name
   * of its choosing (`support-team`) that its matched peer then reads.
   */
  const mustGetRegistered = async (id: number): Promise<UserRow> => {
    const u = await mustGet(id);
    if (u.isStranger) throw appError('ERR_USER_NOT_FOUND');
    return u;
  };

  /** The bot update route's answer: the bot-visible user with avatar_url (spec 4.3), platforms read in `tx`. */
  const botUpdatedOf = async (u: UserRow, tx?: Tx) => {
    const { id, username, subscription_tier, permission_level, state } = toBotUser(u, clock.now());
    const avatar = effectiveAvatar(u.avatarSource, await store.platformsOf(u.id, tx), publicUrl);
    return { id, username, avatar_url: avatar.url, subscription_tier, permission_level, state };
  };

  /** Why this user cannot use an avatar source, or null when it can (spec 2.1 avatar_source). */
  const avatarSourceProblem = async (id: number, source: string): Promise<string | null> =>
    avatarSourceRule(await store.platformsOf(id), source);

  return {
    present,
    mustGet,
    avatarSourceProblem,

    /**
     * Called once a rename made here (the user's own, a bot's) has committed, e.g. to drop the
     * user's sockets, which carry the name their handshake read. An admin's rename is
     * AdminService.updateUser's, which drops them itself (after a level change's notification).
     */
    onRenamed(listener: RenamedListener) {
      renameListeners.push(listener);
    },

    /**
     * The own profile: from the profile cache when it holds it (no SQL), else read and cached. An
     * entry is served only until its next deadline (a timeout or subscription running out), after
     * which the profile is presented anew.
     */
    async me(userId: number): Promise<User> {
      const read = async (): Promise<CachedProfile> => {
        const u = await ownRow(userId);
        const now = clock.now();
        return { user: frozenProfile(await present(u)), until: nextChangeAt(u, now) };
      };
      const current = (e: CachedProfile | null | undefined): e is CachedProfile =>
        !!e && (e.until === null || e.until > clock.now().getTime());
      if (!profiles) return (await read()).user;
      const cached = profiles.get(userId);
      if (current(cached)) return cached.user;
      if (cached) profiles.delete(userId);
      const loaded = await profiles.load(userId, read);
      return (current(loaded) ? loaded : await read()).user;
    },

    /** POST /v1/users/me/update (users.own.ts). */
    updateMe: own.updateMe,

    /** GET /v1/users/me/subscription: its caller's account gone, 401 (users.own.ts). */
    subscription: own.subscription,

    /**
     * The subscription status of a user row, its trial read in `tx`: SubscriptionsService answers
     * a grant or revoke with the row its transaction wrote, so a deletion right after the commit
     * cannot turn the committed change into an error.
     */
    subscriptionOf: own.subscriptionOf,

    async punishments(userId: number, offset: number, limit: number) {
      const now = clock.now();
      return (await store.punishments(userId, offset, limit)).map((p) => toPunishment(p, now));
    },

    /** Admins see full detail of users below their level only; everyone else public profiles. */
    async search(q: string, viewerLevel: number, offset: number, limit: number) {
      const staff = viewerLevel >= 2;
      const belowLevel = staff && viewerLevel < 3 ? viewerLevel : null;
      const rows = await store.search(q, { belowLevel, offset, limit });
      return Promise.all(rows.map((u) => presentFor(u, staff ? viewerLevel : null)));
    },

    async profile(id: number, viewerLevel: number | null) {
      return presentFor(await mustGet(id), viewerLevel);
    },

    /**
     * `profile` of a user row the transaction `tx` holds and has just written, read inside it: what
     * an admin update answers, so that a deletion committed right after it cannot turn a committed
     * change into a 404 (docs/api.md, Governance › Users).
     */
    async profileIn(u: UserRow, viewerLevel: number | null, tx: Tx) {
      return presentFor(u, viewerLevel, tx);
    },

    /** Whether a user has an active non-Basic tier now (chat slots, direct-chat slots). */
    async hasPremium(id: number): Promise<boolean> {
      return hasPremium(await mustGet(id), clock.now());
    },

    async botView(id: number) {
      return toBotUser(await mustGetRegistered(id), clock.now());
    },

    /**
     * The checks of a bot rename made before any lock, so a refusal locks and writes nothing:
     * an unknown user 404, a target above the bot's ceiling 403 (botMayRename), a bad name 400
     * (one field, so no errors object). BotsService.renameUser decides again under the lock.
     */
    async botRenameCheck(bot: { type: number }, id: number, username: string | undefined): Promise<void> {
      const target = await mustGetRegistered(id);
      if (!botMayRename(bot.type, target.permissionLevel)) throw botRenameForbidden();
      if (username !== undefined && !isValidUsername(username))
        throw appError('ERR_VALIDATION', undefined, { errors: [{ path: 'body/username', message: USERNAME_RULE }] });
    },

    /**
     * A bot's rename, inside the caller's transaction (BotsService.renameUser, which audits it):
     * decided on the target's row locked here, so a user promoted to Admin or deleted since the
     * early check is refused (403, 404) and nothing is written; and on the bot's type as `heldBot`
     * reads it after that lock (its row held: users rows before bot rows), not as the request's
     * key resolved it, so a bot made Verified meanwhile is refused too. A name taken by someone else is
     * 409 (two renames racing for one name: the unique index decides, and the caller maps it).
     * Answers the change (null when the user has that name already: nothing written) and the
     * route's answer, built from the row written here and read in `tx`: a deletion committed right
     * after the rename cannot turn it into a 404. The `onRenamed` listeners are told once the
     * transaction commits.
     */
    async botRenameIn(
      heldBot: () => Promise<{ type: number }>,
      id: number,
      username: string,
      tx: Tx,
    ): Promise<{ change: { from: string; to: string } | null; user: Awaited<ReturnType<typeof botUpdatedOf>> }> {
      const locked = await store.byIdForUpdate(id, tx);
      if (!locked || locked.isStranger) throw appError('ERR_USER_NOT_FOUND');
      if (!botMayRename((await heldBot()).type, locked.permissionLevel)) throw botRenameForbidden();
      if (username === locked.username) return { change: null, user: await botUpdatedOf(locked, tx) };
      const holder = await store.byUsername(username, tx);
      if (holder && holder.id !== id) throw appError('ERR_USERNAME_TAKEN');
      // The row is held, so the update returns it: `?? locked` only types it.
      const written = (await store.update(id, { username, updatedAt: clock.now() }, tx)) ?? locked;
      await afterCommit(tx, async () => renamed(id));
      return { change: { from: locked.username, to: username }, user: await botUpdatedOf(written, tx) };
    },

    /** The answer of the bot update route without a username (a rename's is botRenameIn's). */
    async botUpdated(id: number) {
      return botUpdatedOf(await mustGet(id));
    },
  };
}

export type UsersService = ReturnType<typeof makeUsersService>;
