import { describe, expect, it } from 'vitest';
import { batched, batchedWrite, groupCommit } from './group-commit.js';

/** A write whose batches the test completes by hand, recording what each batch held. */
function manualWrite() {
  const batches: { key: string; items: number[]; done: (err?: Error) => void }[] = [];
  const write = (key: string, items: number[]) =>
    new Promise<string[]>((resolve, reject) => {
      batches.push({
        key,
        items,
        done: (err) => (err ? reject(err) : resolve(items.map((i) => `${key}:${i}`))),
      });
    });
  return { batches, write };
}

const tick = () => new Promise((r) => setImmediate(r));

/** PostgreSQL's answer to a statement it refused, as postgres.js and PGlite report it. */
const refused = (code: string, at?: number) =>
  Object.assign(new Error(`refused ${code}${at === undefined ? '' : ` at ${at}`}`), { code, severity: 'ERROR' });

/**
 * A write that, like one SQL statement, fails as a whole with the error `fails` gives the first of
 * its items that has one, recording each batch it ran. It answers a turn later, as a database would.
 */
function statementWrite(fails: (item: number) => Error | undefined) {
  const calls: number[][] = [];
  const write = async (key: string, items: number[]) => {
    calls.push(items);
    await tick();
    for (const i of items) {
      const err = fails(i);
      if (err) throw err;
    }
    return items.map((i) => `${key}:${i}`);
  };
  return { calls, write };
}

describe('groupCommit', () => {
  it('gathers the writes of one event-loop turn into the first batch', async () => {
    const { batches, write } = manualWrite();
    const gc = groupCommit(write);
    const all = [1, 2, 3].map((i) => gc.submit('a', i));
    expect(batches).toEqual([]); // nothing leaves before the end of the turn
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1, 2, 3]]);
    batches[0]?.done();
    expect(await Promise.all(all)).toEqual(['a:1', 'a:2', 'a:3']);
  });

  it('sends a lone write after the turn, and what arrives meanwhile as the next batch, in arrival order', async () => {
    const { batches, write } = manualWrite();
    const gc = groupCommit(write);
    const first = gc.submit('a', 1);
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1]]);
    const rest = [2, 3, 4].map((i) => gc.submit('a', i));
    await tick();
    expect(batches).toHaveLength(1); // nothing more goes out while the first batch is in flight
    batches[0]?.done();
    expect(await first).toBe('a:1');
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1], [2, 3, 4]]);
    batches[1]?.done();
    expect(await Promise.all(rest)).toEqual(['a:2', 'a:3', 'a:4']);
    await tick();
    expect(gc.busyKeys()).toBe(0);
  });

  it('runs different keys independently', async () => {
    const { batches, write } = manualWrite();
    const gc = groupCommit(write);
    const a = gc.submit('a', 1);
    const b = gc.submit('b', 1);
    await tick();
    expect(batches.map((x) => x.key)).toEqual(['a', 'b']);
    expect(gc.busyKeys()).toBe(2);
    batches[1]?.done();
    expect(await b).toBe('b:1');
    batches[0]?.done();
    expect(await a).toBe('a:1');
  });

  it('caps a batch at maxBatch and sends the remainder next', async () => {
    const { batches, write } = manualWrite();
    const gc = groupCommit(write, 2);
    const first = gc.submit('k', 1);
    await tick();
    const rest = [2, 3, 4, 5, 6].map((i) => gc.submit('k', i));
    for (let i = 0; i < 3; i++) {
      batches[i]?.done();
      await tick();
    }
    expect(batches.map((b) => b.items)).toEqual([[1], [2, 3], [4, 5], [6]]);
    const all = [first, ...rest];
    batches[3]?.done();
    expect(await Promise.all(all)).toEqual(['k:1', 'k:2', 'k:3', 'k:4', 'k:5', 'k:6']);
  });

  it('fails every write of a batch with an error the database did not answer, and still runs the next batch', async () => {
    const { batches, write } = manualWrite();
    const gc = groupCommit(write);
    const first = gc.submit('k', 1);
    await tick();
    const second = gc.submit('k', 2);
    const third = gc.submit('k', 3);
    batches[0]?.done(new Error('connection lost'));
    await expect(first).rejects.toThrow('connection lost');
    await tick();
    batches[1]?.done(new Error('deadlock'));
    await expect(second).rejects.toThrow('deadlock');
    await expect(third).rejects.toThrow('deadlock');
    const fourth = gc.submit('k', 4);
    await tick();
    batches[2]?.done();
    expect(await fourth).toBe('k:4');
  });

  it('runs each write of a batch whose statement the database refused again alone: only the refused one fails', async () => {
    const { calls, write } = statementWrite((i) => (i === 2 ? refused('P0001', i) : undefined));
    const gc = groupCommit(write);
    const all = [1, 2, 3, 4].map((i) => gc.submit('k', i));
    await tick();
    expect(calls).toEqual([[1, 2, 3, 4]]);
    const next = gc.submit('k', 5); // arrives while the batch runs: goes out after its writes run again
    const settled = await Promise.allSettled([...all, next]);
    expect(settled.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message))).toEqual([
      'k:1',
      'refused P0001 at 2',
      'k:3',
      'k:4',
      'k:5',
    ]);
    expect(calls).toEqual([[1, 2, 3, 4], [1], [2], [3], [4], [5]]);
  });

  it('finds the refusal inside a wrapper (Drizzle), and fails each write the database refuses on its own', async () => {
    const wrapped = (i: number) => Object.assign(new Error('Failed query'), { cause: refused('23505', i) });
    const { calls, write } = statementWrite((i) => (i % 2 === 0 ? wrapped(i) : undefined));
    const gc = groupCommit(write);
    const settled = await Promise.allSettled([1, 2, 3, 4].map((i) => gc.submit('k', i)));
    expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'rejected']);
    expect(
      settled.map((r) => (r.status === 'rejected' ? (r.reason as Error & { cause: Error }).cause.message : '')),
    ).toEqual(['', 'refused 23505 at 2', '', 'refused 23505 at 4']);
    expect(calls).toEqual([[1, 2, 3, 4], [1], [2], [3], [4]]);
  });

  it('runs nothing again after a lost connection, a wait that ran out, a FATAL or an error of no database', async () => {
    const lost = Object.assign(new Error('write CONNECTION_CLOSED'), { code: 'CONNECTION_CLOSED' });
    const shutdown = Object.assign(new Error('terminating connection'), { code: '57P01', severity: 'FATAL' });
    const broken = refused('08006'); // connection_failure: whatever PostgreSQL says, the outcome is unknown
    for (const err of [lost, broken, shutdown, refused('57014'), refused('55P03'), new Error('boom')]) {
      const { calls, write } = statementWrite((i) => (i === 2 ? err : undefined));
      const gc = groupCommit(write);
      const settled = await Promise.allSettled([1, 2, 3].map((i) => gc.submit('k', i)));
      expect([err.message, settled.map((r) => r.status)]).toEqual([err.message, ['rejected', 'rejected', 'rejected']]);
      expect([err.message, calls]).toEqual([err.message, [[1, 2, 3]]]);
    }
  });

  it('fails a lone write the database refused with its error, once', async () => {
    const { calls, write } = statementWrite((i) => refused('P0001', i));
    const gc = groupCommit(write);
    await expect(gc.submit('k', 1)).rejects.toThrow('refused P0001 at 1');
    expect(calls).toEqual([[1]]);
  });

  it('fails the batch when the write answers a different number of results', async () => {
    const gc = groupCommit<string, number, number>(async () => [1]);
    const first = gc.submit('k', 1);
    await tick();
    const both = [gc.submit('k', 2), gc.submit('k', 3)];
    expect(await first).toBe(1);
    for (const p of both) await expect(p).rejects.toThrow(/1 results for 2 writes/);
  });

  it('batched: one key, the calls of one turn share a batch and each gets its own result', async () => {
    const batches: number[][] = [];
    const double = batched(async (items: number[]) => {
      batches.push(items);
      return items.map((i) => i * 2);
    });
    expect(await Promise.all([1, 2, 3].map(double))).toEqual([2, 4, 6]);
    expect(batches).toEqual([[1, 2, 3]]);
  });

  it('batchedWrite: the writes of one turn are one call, each item once', async () => {
    const batches: number[][] = [];
    const touch = batchedWrite(async (items: number[]) => {
      batches.push(items);
    });
    await Promise.all([5, 6, 5, 7].map(touch));
    expect(batches).toEqual([[5, 6, 7]]);
  });
});
