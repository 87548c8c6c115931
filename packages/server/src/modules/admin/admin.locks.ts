import { stateRefusal } from '../../platform/auth.js';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import type { Actor } from '../audit/audit.store.js';
import { type CallerRead, storedCallerLevel } from '../users/users.caller.js';
import { effectiveState } from '../users/users.presenter.js';
import type { Tx, UserRow } from '../users/users.store.js';
import type { ActorLevel } from './admin.rules.js';
import { lockUsersInIdOrder } from './admin.store.js';

/**
 * Locks a user caller's users row and its target's together (one statement, id order:
 * lockUsersInIdOrder) and answers the caller's level and the target (undefined when gone) as read
 * under those locks, which the admin actions on a user, the platform punishments and the chat
 * actions then decide on: the request's session read the caller's level and state when it began,
 * and either may have changed since. A caller deleted meanwhile, or Banned or timed out (its
 * effective state, as the session guard reads it: stateRefusal, and the guard refuses either from
 * these routes), is refused 403 ERR_FORBIDDEN: so two Owners demoting, deleting, banning or timing
 * out each other at once wait for each other, and the second, its caller changed by the first,
 * does nothing. Take it after the chat rows the transaction locks and before session rows (the
 * lock order of docs/api.md Moderation). The caller's state is judged at the time the rows are held
 * (`clock`, read after the lock), not when the request began: a timeout that ended while it waited
 * for them has ended.
 */
export async function lockCallerAndTarget(
  tx: Tx,
  callerId: number,
  targetId: number,
  clock: Clock,
): Promise<{ level: number; target: UserRow | undefined }> {
  const rows = await lockUsersInIdOrder([callerId, targetId], tx);
  const caller = rows.find((r) => r.id === callerId);
  if (!caller || stateRefusal(effectiveState(caller, clock.now())) !== null) throw appError('ERR_FORBIDDEN');
  return { level: caller.permissionLevel, target: rows.find((r) => r.id === targetId) };
}

/**
 * lockCallerAndTarget for any actor: a user caller's row is locked with the target's and its level
 * is the one read there; the operator (and any other non-user actor) has no row, so only the
 * target's is locked and `actorLevel` stands. The target is undefined when gone.
 */
export async function lockActorAndTarget(
  tx: Tx,
  actor: Actor,
  actorLevel: ActorLevel,
  targetId: number,
  clock: Clock,
): Promise<{ level: ActorLevel; target: UserRow | undefined }> {
  if (actor.kind === 'user') return lockCallerAndTarget(tx, actor.id, targetId, clock);
  const [target] = await lockUsersInIdOrder([targetId], tx);
  return { level: actorLevel, target };
}

/**
 * storedCallerLevel for any actor of an admin route without a target user row: a user caller's
 * level as stored (its row held FOR SHARE, or read: CallerRead), refused when its account is gone
 * or it is Banned or timed out; the operator (and any other non-user actor) has no row, so
 * `actorLevel` stands.
 */
export async function callerLevelOf(
  tx: Tx,
  actor: Actor,
  actorLevel: ActorLevel,
  clock: Clock,
  read: CallerRead = 'share',
): Promise<ActorLevel> {
  if (actor.kind !== 'user') return actorLevel;
  return storedCallerLevel(tx, actor.id, clock, read);
}
