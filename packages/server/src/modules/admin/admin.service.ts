import { type AdminUserUpdateBody, AuditCodes, Limits } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import type { Actor, AuditStore } from '../audit/audit.store.js';
import type { NotificationsService } from '../notifications/notifications.service.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import type { UsersService } from '../users/users.service.js';
import type { UsersStore } from '../users/users.store.js';
import { type ActorLevel, canActOn, canSetLevel } from './admin.rules.js';

const LEVEL_NAMES = ['User', 'Moderator', 'Admin', 'Owner'];

export interface AdminDeps {
  db: Db;
  clock: Clock;
  usersStore: UsersStore;
  users: UsersService;
  sessions: SessionsService;
  notifications: NotificationsService;
  audit: AuditStore;
}

export function makeAdminService(deps: AdminDeps) {
  const { db, clock, usersStore, users, sessions, notifications, audit } = deps;

  const setPermission = async (actor: Actor, actorLevel: ActorLevel, targetId: number, level: number) => {
    const note = await db.transaction(async (tx) => {
      const target = await usersStore.byIdForUpdate(targetId, tx);
      if (!target) throw appError('ERR_USER_NOT_FOUND');
      if (actor.kind === 'user' && actor.id === targetId)
        throw appError('ERR_FORBIDDEN', 'You cannot change your own permission level.');
      if (!canSetLevel(actorLevel, target.permissionLevel, level)) throw appError('ERR_FORBIDDEN');
      if (target.permissionLevel === level) return null;
      const now = clock.now();
      await usersStore.update(targetId, { permissionLevel: level, permissionSince: now, updatedAt: now }, tx);
      // Staff sessions last a day: a promotion shortens live sessions accordingly.
      if (level >= 2)
        await sessions.store.clampExpiry(targetId, new Date(now.getTime() + Limits.SESSION_TTL_STAFF_MS), now, tx);
      await audit.record(
        {
          actor,
          code: AuditCodes.USER_PERMISSION_CHANGE,
          action: 'set-permission',
          targetUserId: targetId,
          data: { from: target.permissionLevel, to: level },
        },
        tx,
      );
      return notifications.automated(
        targetId,
        'permission_changed',
        { level: LEVEL_NAMES[level] ?? String(level) },
        tx,
      );
    });
    if (note) notifications.publish(note);
  };

  return {
    /** POST /v1/admin/users/{id}/update and `parlor users set-permission`. */
    async updateUser(actor: Actor, actorLevel: ActorLevel, targetId: number, body: AdminUserUpdateBody) {
      const target = await users.mustGet(targetId);
      if (!canActOn(actorLevel, target.permissionLevel)) throw appError('ERR_FORBIDDEN');
      if (body.permission_level !== undefined) await setPermission(actor, actorLevel, targetId, body.permission_level);
      if (body.username !== undefined) {
        const problem = await users.rename(targetId, body.username);
        if (problem === 'is taken') throw appError('ERR_USERNAME_TAKEN');
        if (problem)
          throw appError('ERR_VALIDATION', undefined, { errors: [{ path: 'body/username', message: problem }] });
        await audit.record({
          actor,
          code: AuditCodes.USER_UPDATE,
          action: 'rename',
          targetUserId: targetId,
          data: { from: target.username, to: body.username },
        });
      }
      return users.profile(targetId, actorLevel === 'operator' ? 3 : actorLevel);
    },
  };
}

export type AdminService = ReturnType<typeof makeAdminService>;
