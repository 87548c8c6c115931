import { Limits } from '@parlor/protocol';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import type { MatchQueue } from '../../platform/state/match-queue.js';
import type { Actor, AuditStore } from '../audit/audit.store.js';
import type { UsersService } from '../users/users.service.js';
import type { UsersStore } from '../users/users.store.js';
import type { BlocksStore } from './blocks.store.js';

/** Audit code of a moderator blocking a stranger from matchmaking (Parlor's, 4xx punishments). */
export const STRANGER_BLOCK_CODE = 410;

export function makeBlocksService(deps: {
  db: Db;
  store: BlocksStore;
  usersStore: UsersStore;
  users: Pick<UsersService, 'mustGet'>;
  queue: MatchQueue;
  audit: AuditStore;
  clock: Clock;
  log: Pick<FastifyBaseLogger, 'error'>;
}) {
  const { store, clock } = deps;
  return {
    async list(userId: number) {
      return (await store.listBy(userId)).map((b) => ({ user_id: b.blockedId, created_at: b.createdAt.toISOString() }));
    },
    /**
     * Blocks a user (idempotent), up to Limits.BLOCKS_PER_USER (409 ERR_BLOCK_LIMIT past it;
     * blocking someone already blocked is fine at the limit). The blocker's row is locked, so
     * concurrent blocks by one user cannot pass the count together.
     */
    async block(userId: number, targetId: number) {
      if (userId === targetId) throw appError('ERR_VALIDATION', 'You cannot block yourself.');
      await deps.users.mustGet(targetId);
      await deps.db.transaction(async (tx) => {
        await deps.usersStore.byIdForUpdate(userId, tx);
        if (await store.has(userId, targetId, tx)) return;
        if ((await store.countBy(userId, tx)) >= Limits.BLOCKS_PER_USER) throw appError('ERR_BLOCK_LIMIT');
        await store.add(userId, targetId, clock.now(), tx);
      });
    },
    async unblock(userId: number, targetId: number) {
      return store.remove(userId, targetId);
    },
    /**
     * Spec v1.12: a moderator blocks a stranger session from matchmaking; it leaves the queue too.
     * The queue lives in the state store, not SQL, so the steps are ordered for failure: leave the
     * queue (failing here changes nothing), then the block and its audit entry in one transaction
     * (failing here leaves only the queue left, which the stranger may do itself at any time), then
     * leave the queue once more, for an enqueue that read the account before the block committed.
     * That last step follows a committed block (enqueues now refuse), so its failure is logged.
     */
    async blockStranger(actor: Actor, targetId: number) {
      const target = await deps.users.mustGet(targetId);
      if (!target.isStranger)
        throw appError('ERR_FORBIDDEN', 'Only anonymous (stranger) accounts are blocked this way.');
      await deps.queue.dequeue(targetId);
      await deps.db.transaction(async (tx) => {
        await deps.usersStore.update(targetId, { matchBlockedAt: clock.now() }, tx);
        await deps.audit.record(
          { actor, code: STRANGER_BLOCK_CODE, action: 'block-stranger', targetUserId: targetId },
          tx,
        );
      });
      await deps.queue
        .dequeue(targetId)
        .catch((err: unknown) => deps.log.error({ err, userId: targetId }, 'match queue cleanup failed'));
    },
  };
}

export type BlocksService = ReturnType<typeof makeBlocksService>;
