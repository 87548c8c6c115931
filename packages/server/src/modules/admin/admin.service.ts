import {
  type AdminUserUpdateBody,
  AuditCodes,
  type AuditPage,
  type AuditQuery,
  type FullUser,
  Limits,
  PermissionLevel,
  type PublicUser,
} from '@parlor/protocol';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import { toAuditEntry } from '../audit/audit.presenter.js';
import type { Actor, AuditStore } from '../audit/audit.store.js';
import type { BotsService } from '../bots/bots.service.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MatchmakingService } from '../matchmaking/matchmaking.service.js';
import type { NotificationsService } from '../notifications/notifications.service.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import { isValidUsername, USERNAME_RULE, type UsersService } from '../users/users.service.js';
import { isUniqueViolation, type Tx, type UserRow, type UsersStore } from '../users/users.store.js';
import { makeAdminChats } from './admin.chats.js';
import { lockActorAndTarget } from './admin.locks.js';
import { type ActorLevel, canActOn, canSetLevel, mayAdminister } from './admin.rules.js';

const LEVEL_NAMES = ['User', 'Moderator', 'Admin', 'Owner'];

export interface AdminDeps {
  db: Db;
  clock: Clock;
  usersStore: UsersStore;
  users: UsersService;
  sessions: SessionsService;
  notifications: NotificationsService;
  audit: AuditStore;
  bots: Pick<BotsService, 'releaseOwner'>;
  chats: Pick<ChatsService, 'createOfficial' | 'updateConfig' | 'remove' | 'leaveAllDirect' | 'announceLeft'>;
  keys: Pick<KeysService, 'bumpEpochs' | 'announceRekey' | 'lockChatsOf'>;
  /** The chats a user is a member of, read inside the deletion's transaction. */
  chatIdsOf: (userId: number, tx: Tx) => Promise<number[]>;
  /** Revokes the live invites a user being deleted made to private chats (chats.invites.store). */
  revokePrivateInvitesOf: (userId: number, now: Date, tx: Tx) => Promise<number>;
  /** Writes a `leave` entry in the history of every chat but direct ones the user is a member of. */
  logLeavesOfDeleted: (userId: number, actorUserId: number | null, now: Date, tx: Tx) => Promise<number>;
  matchmaking: Pick<MatchmakingService, 'endSearch'>;
  realtime: Pick<Realtime, 'disconnectSessions' | 'emitTo' | 'io'>;
  log: Pick<FastifyBaseLogger, 'error'>;
}

const selfError = (what: string) => appError('ERR_FORBIDDEN', `You cannot ${what} yourself.`);

export function makeAdminService(deps: AdminDeps) {
  const { db, clock, usersStore, users, sessions, notifications, audit } = deps;

  /**
   * Drops every socket of a user, on every node, once a change of what its handshake read has
   * committed: the level (room:join, VM moderation) or the name (presence, VM control requests).
   * The client reconnects, and the new handshake reads the user as it is now (docs/security.md).
   */
  const dropSockets = (userId: number) => deps.realtime.io.in(rooms.user(userId)).disconnectSockets(true);

  /**
   * Changes a locked user's level inside the caller's transaction: the rules of spec 2.11, staff
   * session expiry, the audit entry (100) and the notification, which the caller publishes once the
   * transaction has committed. Null when the level is unchanged.
   */
  const changePermission = async (tx: Tx, actor: Actor, actorLevel: ActorLevel, target: UserRow, level: number) => {
    // The level the target has already is no change, so none of the rules on changes refuses it:
    // an Owner renaming itself with a form that sends every field names its own level.
    if (target.permissionLevel === level) return null;
    if (actor.kind === 'user' && actor.id === target.id)
      throw appError('ERR_FORBIDDEN', 'You cannot change your own permission level.');
    if (!canSetLevel(actorLevel, target.permissionLevel, level)) throw appError('ERR_FORBIDDEN');
    const now = clock.now();
    await usersStore.update(target.id, { permissionLevel: level, permissionSince: now, updatedAt: now }, tx);
    // Staff sessions last a day: a promotion shortens live sessions accordingly.
    if (level >= 2)
      await sessions.store.clampExpiry(target.id, new Date(now.getTime() + Limits.SESSION_TTL_STAFF_MS), now, tx);
    await audit.record(
      {
        actor,
        code: AuditCodes.USER_PERMISSION_CHANGE,
        action: 'set-permission',
        targetUserId: target.id,
        data: { from: target.permissionLevel, to: level },
      },
      tx,
    );
    return notifications.automated(target.id, 'permission_changed', { level: LEVEL_NAMES[level] ?? String(level) }, tx);
  };

  /**
   * Locks the target's users row and, for a user caller, the caller's own with it (one statement,
   * id order: lockActorAndTarget), and answers the target as read under its lock (undefined when gone)
   * and the caller's level as read under its lock. The level the route read when the request began
   * may be stale by then: two Owners demoting each other at once both passed that check, and both
   * demotions committed, leaving no Owner. Under the caller's lock the second of them sees its
   * caller demoted and is refused. A caller deleted, banned or timed out meanwhile, or no longer
   * Admin or above, gets 403 ERR_FORBIDDEN. The operator (and any other non-user actor) has no row: its level stands.
   */
  const lockParties = async (tx: Tx, actor: Actor, actorLevel: ActorLevel, targetId: number) => {
    const locked = await lockActorAndTarget(tx, actor, actorLevel, targetId, clock);
    if (!mayAdminister(locked.level)) throw appError('ERR_FORBIDDEN');
    return locked;
  };

  /**
   * The quick refusal before a transaction, on the levels as read now (no lock): 404 for no
   * such user, 403 for one the caller cannot act on. The levels read under the row locks
   * (lockParties) decide. An anonymous stranger is no user here either (404, as for
   * subscriptions, notifications, bot owners and guild sponsors): it may match and use its
   * direct chats, nothing else, so no level, name or deletion of an admin's applies to it (a level
   * would let it moderate its peer's messages; moderators block it from matchmaking instead). An
   * account never becomes or stops being a stranger, so this check holds under the locks too.
   */
  const reachable = async (actorLevel: ActorLevel, targetId: number): Promise<void> => {
    const target = await users.mustGet(targetId);
    if (target.isStranger) throw appError('ERR_USER_NOT_FOUND');
    if (!canActOn(actorLevel, target.permissionLevel)) throw appError('ERR_FORBIDDEN');
  };

  /** 400 ERR_VALIDATION naming one body field, as the schema validator would. */
  const invalid = (field: string, message: string) =>
    appError('ERR_VALIDATION', undefined, { errors: [{ path: `body/${field}`, message }] });
  return {
    /**
     * POST /v1/admin/users/{id}/update and `parlor users set-permission|update`. Every field is
     * checked before any is applied, so a bad username or avatar source changes nothing. The level
     * rules are decided on the caller's and the target's rows as read under their locks. The answer
     * is the user as this transaction wrote it, never read again after the commit.
     */
    async updateUser(actor: Actor, actorLevel: ActorLevel, targetId: number, body: AdminUserUpdateBody) {
      await reachable(actorLevel, targetId);
      if (body.username !== undefined && !isValidUsername(body.username)) throw invalid('username', USERNAME_RULE);
      const avatarProblem =
        body.avatar_source === undefined ? null : await users.avatarSourceProblem(targetId, body.avatar_source);
      if (avatarProblem) throw invalid('avatar_source', avatarProblem);

      // One transaction for every field: a taken username after a level change leaves nothing changed.
      // The checks above used the levels read when the request began: a fast refusal. What decides
      // is the caller's and the target's levels as read under their row locks (lockParties).
      let done: { note: Awaited<ReturnType<typeof changePermission>>; renamed: boolean; user: FullUser | PublicUser };
      try {
        done = await db.transaction(async (tx) => {
          const { level, target: locked } = await lockParties(tx, actor, actorLevel, targetId);
          if (!locked) throw appError('ERR_USER_NOT_FOUND');
          if (!canActOn(level, locked.permissionLevel)) throw appError('ERR_FORBIDDEN');
          const changed =
            body.permission_level === undefined
              ? null
              : await changePermission(tx, actor, level, locked, body.permission_level);
          // Each changed field is written and audited (101) on its own: 'rename' or 'avatar'.
          const apply = async (action: string, values: Partial<UserRow>, from: string, to: string) => {
            await usersStore.update(targetId, { ...values, updatedAt: clock.now() }, tx);
            const entry = { actor, code: AuditCodes.USER_UPDATE, action, targetUserId: targetId, data: { from, to } };
            await audit.record(entry, tx);
          };
          const username = body.username !== locked.username ? body.username : undefined;
          if (username !== undefined) {
            const holder = await usersStore.byUsername(username, tx);
            if (holder && holder.id !== targetId) throw appError('ERR_USERNAME_TAKEN');
            await apply('rename', { username }, locked.username, username);
          }
          if (body.avatar_source !== undefined && body.avatar_source !== locked.avatarSource)
            await apply('avatar', { avatarSource: body.avatar_source }, locked.avatarSource, body.avatar_source);
          // The answer is read here, the row still held (so it is there: `?? locked` only types it).
          // A deletion waiting for the row commits after this change, and must not turn the
          // committed change into a 404 (docs/api.md, Governance › Users).
          const written = (await usersStore.byId(targetId, tx)) ?? locked;
          const user = await users.profileIn(written, level === 'operator' ? 3 : level, tx);
          return { note: changed, renamed: username !== undefined, user };
        });
      } catch (e) {
        // Two renames racing for one name: the unique index decides, and the loser changes nothing.
        if (isUniqueViolation(e)) throw appError('ERR_USERNAME_TAKEN');
        throw e;
      }
      if (done.note) notifications.publish(done.note);
      // Sockets carry the level and name they signed in with: after a change of either they drop
      // on every node, as for a ban or timeout (after the notification, so that it reaches them).
      if (done.note || done.renamed) dropSockets(targetId);
      return done.user;
    },

    /**
     * POST /v1/admin/users/{id}/delete and `parlor users delete`: the account row is deleted (see
     * docs/api.md). In one transaction: every session ends, the user's chats move to a new epoch,
     * owned bots lose their owner, its invites to private chats are revoked (no join honours them
     * once it is gone), each chat but direct ones gets a `leave` history entry for its membership,
     * the audit entry (103) is written and the row goes, with its
     * linked identities (so the person can sign up again), memberships, notifications and records.
     * Its active direct chats end first, as at a leave (archived, the peer told). Then, as a ban
     * does: sockets drop on every node, chats hear the keys are gone, and the user leaves the
     * match queue. The level rule is decided on the caller's and the target's rows as read under
     * their locks, taken after the target's chat rows (the lock order of docs/api.md Moderation).
     */
    async deleteUser(actor: Actor, actorLevel: ActorLevel, targetId: number): Promise<void> {
      if (actor.kind === 'user' && actor.id === targetId) throw selfError('delete');
      // A quick refusal on the levels as read now, before the transaction locks anything: an
      // Admin's delete of an Owner would otherwise hold the Owner's chat rows before its 403.
      // The levels read under the row locks below decide.
      await reachable(actorLevel, targetId);
      const done = await db.transaction(async (tx) => {
        // Lock order (docs/api.md Moderation): the target's chat rows first (their epochs rise
        // below), in id order, as a ban of the target and the target's own key changes and
        // logouts take them, then the users rows.
        await deps.keys.lockChatsOf(targetId, tx);
        // The caller's level as read under its row lock decides, not the one the request began
        // with: an Admin demoted while this ran deletes nobody (lockParties).
        const { level, target } = await lockParties(tx, actor, actorLevel, targetId);
        if (!target) throw appError('ERR_USER_NOT_FOUND');
        if (!canActOn(level, target.permissionLevel)) throw appError('ERR_FORBIDDEN');
        const ended = await sessions.endAll(targetId, 'deleted', tx);
        // Its direct chats end as at a leave, before the epochs rise (an archived chat's stays).
        const left = await deps.chats.leaveAllDirect(targetId, tx);
        const chatIds = await deps.chatIdsOf(targetId, tx);
        const bumped = await deps.keys.bumpEpochs(chatIds, tx);
        const bots = await deps.bots.releaseOwner(targetId, tx);
        // Its invites to private chats open nothing once it is gone: revoked, they free their
        // places of the chat's invite limit (docs/api.md, Chats).
        await deps.revokePrivateInvitesOf(targetId, clock.now(), tx);
        // Its memberships go with its row: each chat's history says it left (by the caller).
        await deps.logLeavesOfDeleted(targetId, actor.kind === 'user' ? actor.id : null, clock.now(), tx);
        await audit.record(
          {
            actor,
            code: AuditCodes.USER_DELETE,
            action: 'delete',
            targetUserId: targetId,
            data: { username: target.username, permission_level: target.permissionLevel, released_bots: bots },
          },
          tx,
        );
        await usersStore.remove(targetId, tx);
        return { ended, chatIds, bumped, left };
      });
      const { realtime } = deps;
      realtime.disconnectSessions(done.ended);
      realtime.io.in(rooms.user(targetId)).disconnectSockets(true);
      for (const chatId of done.chatIds)
        realtime.emitTo(rooms.chat(chatId), 'portal:key_removed', {
          chat_id: chatId,
          user_id: targetId,
          session_id: null,
        });
      deps.keys.announceRekey(done.bumped);
      // The deletion is committed: a failure here is logged, not reported as a failed deletion.
      await deps.chats
        .announceLeft(done.left)
        .catch((err: unknown) => deps.log.error({ err, userId: targetId }, 'direct chat leave announcement failed'));
      // As a ban ends it (endSearch): an enqueue already in flight is refused too, not queued for
      // an account that is gone.
      await deps.matchmaking
        .endSearch(targetId)
        .catch((err: unknown) => deps.log.error({ err, userId: targetId }, 'match queue cleanup failed'));
    },

    // Official chats, chat updates and deletions (admin.chats.ts).
    ...makeAdminChats(deps),

    /**
     * GET /v1/admin/audit: newest first, `next_before` while more remain. An Admin reads only the
     * entries about users below its level (and those about deleted users or no user): the users it
     * acts on (spec 2.11) and its search lists (spec 5). What was done to Admins and Owners is for
     * Owners and the operator, who read everything. A rule of the log only: an Admin sees every
     * user's full detail (seesFullDetail, docs/api.md Audit log).
     */
    async auditLog(level: ActorLevel, query: AuditQuery): Promise<AuditPage> {
      const targetsBelow = level === 'operator' || canActOn(level, PermissionLevel.OWNER) ? undefined : level;
      const rows = await audit.page(
        { before: query.before, code: query.code, targetUserId: query.target_user_id, targetsBelow },
        query.limit + 1,
      );
      const page = rows.slice(0, query.limit);
      const last = page.at(-1);
      return { entries: page.map(toAuditEntry), next_before: rows.length > query.limit && last ? last.id : null };
    },
  };
}

export type AdminService = ReturnType<typeof makeAdminService>;
