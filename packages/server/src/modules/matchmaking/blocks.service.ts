import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import type { MatchQueue } from '../../platform/state/match-queue.js';
import type { Actor, AuditStore } from '../audit/audit.store.js';
import type { UsersService } from '../users/users.service.js';
import type { UsersStore } from '../users/users.store.js';
import type { BlocksStore } from './blocks.store.js';

/** Audit code of a moderator blocking a stranger from matchmaking (Parlor's, 4xx punishments). */
export const STRANGER_BLOCK_CODE = 410;

export function makeBlocksService(deps: {
  store: BlocksStore;
  usersStore: UsersStore;
  users: Pick<UsersService, 'mustGet'>;
  queue: MatchQueue;
  audit: AuditStore;
  clock: Clock;
}) {
  const { store, clock } = deps;
  return {
    async list(userId: number) {
      return (await store.listBy(userId)).map((b) => ({ user_id: b.blockedId, created_at: b.createdAt.toISOString() }));
    },
    async block(userId: number, targetId: number) {
      if (userId === targetId) throw appError('ERR_VALIDATION', 'You cannot block yourself.');
      await deps.users.mustGet(targetId);
      await store.add(userId, targetId, clock.now());
    },
    async unblock(userId: number, targetId: number) {
      return store.remove(userId, targetId);
    },
    /** Spec v1.12: a moderator blocks a stranger session from matchmaking; it leaves the queue too. */
    async blockStranger(actor: Actor, targetId: number) {
      const target = await deps.users.mustGet(targetId);
      if (!target.isStranger)
        throw appError('ERR_FORBIDDEN', 'Only anonymous (stranger) accounts are blocked this way.');
      await deps.usersStore.update(targetId, { matchBlockedAt: clock.now() });
      await deps.queue.dequeue(targetId);
      await deps.audit.record({ actor, code: STRANGER_BLOCK_CODE, action: 'block-stranger', targetUserId: targetId });
    },
  };
}

export type BlocksService = ReturnType<typeof makeBlocksService>;
