import { describe, expect, it } from 'vitest';
import { afterCommit, inTransaction, trackCommits } from './after-commit.js';
import type { Db } from './index.js';

type Fn = (tx: object) => Promise<unknown>;

/** A database whose transactions and savepoints (drizzle's `tx.transaction`) only log what they do. */
function fakeDb(log: string[]) {
  const handle = (depth: number) => ({
    async transaction(fn: Fn) {
      log.push(`savepoint ${depth + 1}`);
      try {
        const result = await fn(handle(depth + 1));
        log.push(`release ${depth + 1}`);
        return result;
      } catch (err) {
        log.push(`rollback to ${depth + 1}`);
        throw err;
      }
    },
  });
  const raw = {
    async transaction(fn: Fn) {
      log.push('begin');
      const result = await fn(handle(0));
      log.push('commit');
      return result;
    },
  };
  return trackCommits(raw as unknown as Db);
}

const savepointOf = (tx: object) => (tx as { transaction: (fn: Fn) => Promise<unknown> }).transaction;

describe('afterCommit in savepoints', () => {
  it('runs work handed in through a savepoint (and one inside it) once the whole transaction commits', async () => {
    const log: string[] = [];
    const db = fakeDb(log);
    await db.transaction(async (tx) => {
      await savepointOf(tx)(async (sp) => {
        expect(inTransaction(sp)).toBe(true);
        await afterCommit(sp, async () => {
          log.push('work 1');
        });
        await savepointOf(sp)(async (inner) => {
          await afterCommit(inner, async () => {
            log.push('work 2');
          });
        });
      });
    });
    expect(log).toEqual([
      'begin',
      'savepoint 1',
      'savepoint 2',
      'release 2',
      'release 1',
      'commit',
      'work 1',
      'work 2',
    ]);
  });

  it('drops the work of a savepoint that rolls back, and keeps the transaction’s own', async () => {
    const log: string[] = [];
    const db = fakeDb(log);
    await db.transaction(async (tx) => {
      await afterCommit(tx, async () => {
        log.push('kept');
      });
      await savepointOf(tx)(async (sp) => {
        await afterCommit(sp, async () => {
          log.push('dropped');
        });
        throw new Error('undone');
      }).catch(() => {});
    });
    expect(log).toEqual(['begin', 'savepoint 1', 'rollback to 1', 'commit', 'kept']);
  });
});

describe('a deadlock victim', () => {
  /** A database whose transactions fail with `failures` (in order), then succeed. */
  function failingDb(failures: unknown[], runs: { n: number }) {
    const raw = {
      async transaction(fn: Fn) {
        runs.n++;
        const failure = failures.shift();
        if (failure) throw failure;
        return fn({});
      },
    };
    return trackCommits(raw as unknown as Db);
  }
  // As drivers raise it: the PostgreSQL error wrapped by the query builder.
  const deadlock = () =>
    new Error('Failed query', { cause: Object.assign(new Error('deadlock detected'), { code: '40P01' }) });

  it('is run again, and answers what the run that commits answers', async () => {
    const runs = { n: 0 };
    const db = failingDb([deadlock(), deadlock()], runs);
    await expect(db.transaction(async () => 'done')).resolves.toBe('done');
    expect(runs.n).toBe(3);
  });

  it('answers 503 ERR_SERVICE_UNAVAILABLE after three runs lost, and other errors at once', async () => {
    const runs = { n: 0 };
    const db = failingDb([deadlock(), deadlock(), deadlock(), deadlock()], runs);
    await expect(db.transaction(async () => 'done')).rejects.toMatchObject({ code: 'ERR_SERVICE_UNAVAILABLE' });
    expect(runs.n).toBe(3);
    const other = { n: 0 };
    const failing = failingDb([Object.assign(new Error('unique'), { code: '23505' })], other);
    await expect(failing.transaction(async () => 'done')).rejects.toThrow('unique');
    expect(other.n).toBe(1);
  });
});
