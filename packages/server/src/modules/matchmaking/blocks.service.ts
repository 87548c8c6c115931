import { Limits, PermissionLevel } from '@parlor/protocol';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { MatchQueue, QueueEntry } from '../../platform/state/match-queue.js';
import type { AuditStore } from '../audit/audit.store.js';
import { storedCallerLevel } from '../users/users.caller.js';
import type { UsersService } from '../users/users.service.js';
import type { Tx, UsersStore } from '../users/users.store.js';
import type { BlocksStore } from './blocks.store.js';

/** Audit code of a moderator blocking a stranger from matchmaking (Parlor's, 4xx punishments). */
export const STRANGER_BLOCK_CODE = 410;

/**
 * How long the match queue refuses a stranger being blocked, from before the block commits. The
 * queue checks a bar at the time an enqueue began (before it read the account), so an enqueue that
 * read the account before the block committed is refused if the bar outlasts the block's own
 * transaction; one that began after the commit reads the stored block. A block whose transaction
 * takes more than half of it bars again from its commit, and an enqueue that reaches the queue more
 * than MATCH_PRECHECK_MAX_MS (30 s) after it began is refused (503), so neither a slow database
 * (DATABASE_STATEMENT_TIMEOUT_MS may be 0) nor a pruned bar lets a stale read in. Short, so the
 * queue's barred set holds only recent blocks.
 */
export const STRANGER_BAR_MS = 10 * 60_000;

/**
 * Told once a stranger block has committed, with the client address that made the stranger's
 * session: it bars that address from making new strangers (wiring/services.ts, AuthService
 * barStrangerAddress), so the block does not end at the stranger's next logout.
 */
export type StrangerBlockedHook = (e: { userId: number; address: string }) => Promise<void>;

/** Who blocks a stranger from matchmaking: Moderators and above. */
export function mayBlockStrangers(permissionLevel: number): boolean {
  return permissionLevel >= PermissionLevel.MODERATOR;
}

/**
 * Refuses (403) a caller that may not block strangers on its level as stored (storedCallerLevel,
 * its row held FOR SHARE; 401 for an account gone and ERR_BANNED or ERR_TIMED_OUT for one refused
 * now): the session's view of it may predate a demotion committed on another node.
 */
async function mustMayBlockAsStored(tx: Tx, callerId: number, clock: Clock): Promise<void> {
  if (!mayBlockStrangers(await storedCallerLevel(tx, callerId, clock))) throw appError('ERR_FORBIDDEN');
}

export function makeBlocksService(deps: {
  db: Db;
  store: BlocksStore;
  usersStore: UsersStore;
  users: Pick<UsersService, 'mustGet'>;
  queue: MatchQueue;
  audit: AuditStore;
  clock: Clock;
  realtime: Pick<Realtime, 'emitTo'>;
  log: Pick<FastifyBaseLogger, 'error'>;
}) {
  const { store, clock } = deps;
  const blockedHooks: StrangerBlockedHook[] = [];
  /** A search the block's bar took out of the queue has ended: its user hears `match:timeout`, as at its deadline. */
  const tellEnded = (e: QueueEntry | null) => {
    if (e) deps.realtime.emitTo(rooms.user(e.userId), 'match:timeout', { interests: e.tags });
  };
  return {
    /** Runs each time a stranger block commits (blockStranger): what it throws is the block's answer. */
    onStrangerBlocked(hook: StrangerBlockedHook) {
      blockedHooks.push(hook);
    },
    async list(userId: number) {
      return (await store.listBy(userId)).map((b) => ({ user_id: b.blockedId, created_at: b.createdAt.toISOString() }));
    },
    /**
     * Blocks a user (idempotent), up to Limits.BLOCKS_PER_USER (409 ERR_BLOCK_LIMIT past it;
     * blocking someone already blocked is fine at the limit). Both users' rows are locked
     * (BlocksStore.lockPair): concurrent blocks by one user cannot pass the count together, and
     * an account deleted meanwhile answers as if it were gone before (the target: 404
     * ERR_USER_NOT_FOUND; the caller: 401 ERR_UNAUTHENTICATED, its session ended with it), never
     * a foreign-key error.
     */
    async block(userId: number, targetId: number) {
      if (userId === targetId)
        throw appError('ERR_VALIDATION', 'You cannot block yourself.', {
          errors: [{ path: 'body/user_id', message: 'must not be your own id' }],
        });
      await deps.users.mustGet(targetId);
      await deps.db.transaction(async (tx) => {
        const exist = await store.lockPair(userId, targetId, tx);
        if (!exist.blocker) throw appError('ERR_UNAUTHENTICATED');
        if (!exist.blocked) throw appError('ERR_USER_NOT_FOUND');
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
     * Moderators and above (mayBlockStrangers), decided on the caller's level and state as stored
     * (docs/api.md, Strangers), not on its session's view of them: in the block's transaction,
     * under the caller's row held FOR SHARE, before anything of the block happens (the queue's bar
     * included), so a demotion either committed before (403: the stranger's search goes on) or
     * waits for the block. A stranger deleted meanwhile answers 404, as one gone before, and
     * nothing is barred or written.
     * The queue lives in the state store, not SQL, so the steps are ordered for failure. Once the
     * caller is decided and the stranger's row written (not committed), the queue bars the user
     * (out of the queue, its enqueues refused for STRANGER_BAR_MS, one atomic step): an enqueue
     * that read the account before the block commits is refused when it reaches the queue. A
     * search the bar ended is told at once (`match:timeout`, as at its deadline): it has ended
     * whatever follows. Then the audit entry, and the commit; enqueues read the stored block from
     * then on. If the transaction fails the bar is lifted (logged if that fails too), so nothing
     * of the block stands but the queue left; a concurrent block of the same stranger keeps its
     * own bar (the queue counts them). The bar is placed once however often the transaction runs
     * (a deadlock's victim runs again: platform/db/after-commit.ts), and lifted once.
     * Once it has committed, the address that made the stranger's session is told to the
     * `onStrangerBlocked` hooks (read in the block's transaction), which bar it from making new
     * strangers: logging out and asking for a new stranger does not lift the block. A failure
     * there is the request's answer (the block stands; repeating it bars the address).
     */
    async blockStranger(caller: { id: number; permissionLevel: number }, targetId: number) {
      // A quick refusal on the session's view of the caller; its level as stored decides.
      if (!mayBlockStrangers(caller.permissionLevel)) throw appError('ERR_FORBIDDEN');
      const target = await deps.users.mustGet(targetId);
      if (!target.isStranger)
        throw appError('ERR_FORBIDDEN', 'Only anonymous (stranger) accounts are blocked this way.');
      let barredAt: number | null = null;
      let address: string | null;
      try {
        address = await deps.db.transaction(async (tx) => {
          // Users rows in id order, as admin actions and punishments take two (lockUsersInIdOrder;
          // a punishment of this stranger by this caller takes these two): the caller's FOR SHARE,
          // then the stranger's by its update, or the other way round. A user block between the
          // two takes the blocker's row FOR NO KEY UPDATE, then the other's FOR KEY SHARE, which
          // conflicts with neither lock here, so it closes no cycle either.
          if (caller.id < targetId) await mustMayBlockAsStored(tx, caller.id, clock);
          const blocked = await deps.usersStore.update(targetId, { matchBlockedAt: clock.now() }, tx);
          // Deleted since it was read (its session ended): nothing to block.
          if (!blocked) throw appError('ERR_USER_NOT_FOUND');
          if (caller.id > targetId) await mustMayBlockAsStored(tx, caller.id, clock);
          if (barredAt === null) {
            const at = clock.now().getTime();
            tellEnded(await deps.queue.bar(targetId, at + STRANGER_BAR_MS, at));
            barredAt = at;
          }
          await deps.audit.record(
            {
              actor: { kind: 'user', id: caller.id },
              code: STRANGER_BLOCK_CODE,
              action: 'block-stranger',
              targetUserId: targetId,
            },
            tx,
          );
          return store.firstSessionAddress(targetId, tx);
        });
      } catch (err) {
        if (barredAt !== null)
          await deps.queue
            .unbar(targetId)
            .catch((e: unknown) => deps.log.error({ err: e, userId: targetId }, 'match queue bar not lifted'));
        throw err;
      }
      // Committed. After a slow transaction the first bar may end (or be pruned) before enqueues
      // that read the account before the commit reach the queue: bar again from here, which also
      // takes out one that got in. The block stands either way; a failure here is only logged.
      const committedAt = clock.now().getTime();
      if (barredAt !== null && committedAt - barredAt > STRANGER_BAR_MS / 2)
        await deps.queue.bar(targetId, committedAt + STRANGER_BAR_MS, committedAt).then(tellEnded, (e: unknown) => {
          deps.log.error({ err: e, userId: targetId }, 'match queue bar not renewed');
        });
      if (address !== null) for (const hook of blockedHooks) await hook({ userId: targetId, address });
    },
  };
}

export type BlocksService = ReturnType<typeof makeBlocksService>;
