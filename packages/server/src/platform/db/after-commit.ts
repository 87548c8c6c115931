import type { Db } from './index.js';

type Work = () => Promise<void>;

/** Each open transaction of a tracked database (by its drizzle handle) → work queued for its commit. */
const queues = new WeakMap<object, Work[]>();

/**
 * The same database, but its `transaction()` runs the work queued with `afterCommit` once the
 * transaction has committed, before its promise resolves (so before the caller answers). A
 * transaction that rolls back drops its queue. Other methods are the database's own.
 */
export function trackCommits(db: Db): Db {
  const tracked = Object.create(db) as Db;
  const transaction = async <T>(fn: (tx: object) => Promise<T>, config?: unknown): Promise<T> => {
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
