import { eq } from 'drizzle-orm';
import { stateRefusal } from '../../platform/auth.js';
import type { Clock } from '../../platform/clock.js';
import { users } from '../../platform/db/schema.js';
import { appError } from '../../platform/errors.js';
import { effectiveState } from './users.presenter.js';
import type { Tx } from './users.store.js';

/**
 * How a mutation reads its caller's row: `share` holds it FOR SHARE until the commit (a demotion,
 * ban, timeout or deletion, each an UPDATE or DELETE of the row, then either committed before and
 * is read, or waits for the mutation); `read` reads it as committed, without a lock, for a
 * transaction that must not hold a users row before the others it reads (a broadcast's, which
 * takes every user's row in id order).
 */
export type CallerRead = 'share' | 'read';

/**
 * A user caller's permission level as stored now, for a mutation whose right depends on it
 * (docs/api.md, "Levels as they are at the commit"): the request's session, or a socket's
 * handshake, read the level and state when it began, and a change committed on another node, or
 * while the request waited for a lock, may not have reached this node's session cache yet. A
 * caller whose account is gone answers 401 ERR_UNAUTHENTICATED, one Banned or timed out (its
 * effective state, as the session guard reads it) ERR_BANNED or ERR_TIMED_OUT: what the request
 * would have answered had the node known. Take it in the lock order of docs/api.md Moderation:
 * after the chat and guild rows the mutation changes, before a bot's row (as bots.admin.ts takes
 * it). A target user's row is locked with the caller's by lockCallerAndTarget (admin.locks.ts)
 * instead. The state is judged at the time the row is read (`clock`, read after it), not when the
 * request began: a timeout that ended while the request waited for the row has ended.
 */
export async function storedCallerLevel(
  tx: Tx,
  userId: number,
  clock: Clock,
  read: CallerRead = 'share',
): Promise<number> {
  const query = tx
    .select({
      permissionLevel: users.permissionLevel,
      state: users.state,
      stateExpiresAt: users.stateExpiresAt,
      thenState: users.thenState,
      thenStateExpiresAt: users.thenStateExpiresAt,
    })
    .from(users)
    .where(eq(users.id, userId))
    .limit(1);
  const [row] = read === 'share' ? await query.for('share') : await query;
  if (!row) throw appError('ERR_UNAUTHENTICATED');
  const refusal = stateRefusal(effectiveState(row, clock.now()));
  if (refusal) throw appError(refusal);
  return row.permissionLevel;
}
