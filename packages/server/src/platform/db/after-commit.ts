import { appError } from '../errors.js';
import type { Db } from './index.js';

type Work = () => Promise<void>;

/** Each open transaction of a tracked database (by its drizzle handle) → work queued for its commit. */
const queues = new WeakMap<object, Work[]>();

/** PostgreSQL's `deadlock_detected`: it aborted this transaction so that the other one goes on. */
const DEADLOCK = '40P01';
/** Runs of a transaction that PostgreSQL keeps choosing as a deadlock's victim, the first included. */
const DEADLOCK_ATTEMPTS = 3;

/**
 * Thrown inside a tracked transaction that finds it needs a lock ahead of those it holds already
 * (the lock order of docs/api.md Moderation): a row it read unlocked to decide what to lock first
 * changed before it locked the rest (a key registered meanwhile). It rolls back and runs again, as
 * a deadlock's victim does, and the next run reads the change and takes that lock first.
 */
export class RunAgain extends Error {
  constructor(why: string) {
    super(`run the transaction again: ${why}`);
    this.name = 'RunAgain';
  }
}

/** Runs of tracked transactions that threw RunAgain, in this process (tests read it). */
let runsAgain = 0;
/** How many runs of tracked transactions threw RunAgain so far in this process (a test's before and after). */
export const runAgainRuns = (): number => runsAgain;

/** Runs of tracked transactions that PostgreSQL aborted as a deadlock's victim, in this process (tests read it). */
let deadlockVictims = 0;
/** How many runs of tracked transactions were deadlock victims so far in this process (a test's before and after). */
export const deadlockVictimRuns = (): number => deadlockVictims;

/** True when a statement failed as a deadlock's victim, whichever driver raised it (and wrapped it). */
export function isDeadlock(e: unknown): boolean {
  let cur: unknown = e;
  for (let i = 0; i < 4 && cur && typeof cur === 'object'; i++) {
    if ((cur as { code?: unknown }).code === DEADLOCK) return true;
    cur = (cur as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * The same database, but its `transaction()` runs the work queued with `afterCommit` once the
 * transaction has committed, before its promise resolves (so before the caller answers). A
 * transaction that rolls back drops its queue. Other methods are the database's own.
 *
 * A transaction PostgreSQL aborts as a deadlock's victim, or one that throws RunAgain, is run again
 * (up to DEADLOCK_ATTEMPTS runs, after a short random pause; then 503 ERR_SERVICE_UNAVAILABLE):
 * nothing of it was written, and the other side has gone on.
 * The modules take their row locks in one order (the user's chat rows in id order, then the users
 * row, then session rows: docs/api.md Moderation), deciding what to lock first on an unlocked read
 * (RunAgain when it was wrong); what cannot keep to it (an admin action on a user racing a block
 * between the two users, which locks the blocker's row first) would otherwise answer 500 for a
 * request that is valid.
 * Callbacks write to the database only (what else they do goes through `afterCommit`), so a
 * second run does what the first would have done.
 * Two callbacks act inside, as what they do must come before a removal of the memberships they
 * hold can commit (docs/api.md, Presence): the room:join's `enter` (chats.join.ts enterUnderLock
 * and welcomeMember: the socket enters the chat's room, its session is said online) and
 * `underMemberships` (chats.membership.ts: a recovered socket said online, or sent room:left).
 * A rerun is harmless there. In each, the statements a deadlock can abort are the locking reads
 * before the callback acts (lockById, holdMembership, holdMemberships: SELECT … FOR UPDATE or FOR
 * SHARE), and only the commit follows what it does; were a member's `enter` run again, it would
 * find the socket in the room already and say nothing again.
 */
export function trackCommits(db: Db): Db {
  const tracked = Object.create(db) as Db;
  const run = async <T>(fn: (tx: object) => Promise<T>, config?: unknown): Promise<T> => {
    const queue: Work[] = [];
    const result = await (db.transaction as (f: (tx: object) => Promise<T>, c?: unknown) => Promise<T>)(async (tx) => {
      track(tx, queue);
      try {
        return await fn(tx);
      } finally {
        // Work handed in after this point (nothing should) runs at once instead of never.
        queues.delete(tx);
      }
    }, config);
    for (const work of queue) await work();
    return result;
  };
  const transaction = async <T>(fn: (tx: object) => Promise<T>, config?: unknown): Promise<T> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await run(fn, config);
      } catch (err) {
        if (isDeadlock(err)) deadlockVictims++;
        else if (err instanceof RunAgain) runsAgain++;
        else throw err;
        // The victim every time: a transient collision, not a fault (the client sends it again).
        if (attempt >= DEADLOCK_ATTEMPTS)
          throw appError(
            'ERR_SERVICE_UNAVAILABLE',
            'The request met other writes to the same rows again and again; send it again.',
          );
        await new Promise((resolve) => setTimeout(resolve, attempt * (5 + Math.random() * 20)));
      }
    }
  };
  Object.defineProperty(tracked, 'transaction', { value: transaction });
  return tracked;
}

type Nested = <T>(fn: (tx: object) => Promise<T>, config?: unknown) => Promise<T>;

/**
 * Queues the work handed in through `tx` on `queue`, and so through its savepoints (drizzle's
 * `tx.transaction()`): their work runs once the whole transaction commits, and the work of a
 * savepoint that rolls back is dropped with it.
 */
function track(tx: object, queue: Work[]): void {
  queues.set(tx, queue);
  const nested = (tx as { transaction?: unknown }).transaction;
  if (typeof nested !== 'function') return;
  const savepoint = (fn: (sp: object) => Promise<unknown>, config?: unknown) =>
    (nested as Nested).call(
      tx,
      async (sp): Promise<unknown> => {
        const mark = queue.length;
        track(sp, queue);
        try {
          return await fn(sp);
        } catch (err) {
          queue.length = mark;
          throw err;
        } finally {
          queues.delete(sp);
        }
      },
      config,
    );
  Object.defineProperty(tx, 'transaction', { value: savepoint, configurable: true });
}

/** Whether `handle` is a transaction of a tracked database whose callback is still running. */
export function inTransaction(handle: object): boolean {
  return queues.has(handle);
}

/**
 * Runs `work` once `handle`'s transaction commits; when `handle` is no tracked transaction (the
 * database itself, whose statements commit one by one), runs it now.
 */
export async function afterCommit(handle: object, work: Work): Promise<void> {
  const queue = queues.get(handle);
  if (queue) queue.push(work);
  else await work();
}
