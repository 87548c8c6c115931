/**
 * Group commit: writes for one key go out one batch at a time, and whatever arrives while a batch
 * is in flight goes out together in the next one. The first batch of an idle key leaves at the end
 * of the current event-loop turn (setImmediate: no timer, microseconds when idle), so the requests
 * Node read in the same turn join it. That matters most for an engine that runs on the event loop
 * (PGlite): its statements block the loop, so while one runs nothing else can arrive, and without
 * the turn every batch would hold one write. Under load, N concurrent writes to one key cost a few
 * statements instead of N.
 *
 * Batches of one key run in arrival order, so anything a batch assigns in order (message ids) is in
 * the order the writes arrived on this node. Different keys run independently.
 */
import { connectionFailure } from './errors.js';

export interface GroupCommit<K, In, Out> {
  /** Queues one write; resolves with its result once its batch has committed. */
  submit(key: K, item: In): Promise<Out>;
  /** Keys with a batch in flight or queued (0 when idle; for tests and statistics). */
  busyKeys(): number;
}

interface Entry<In, Out> {
  item: In;
  resolve: (out: Out) => void;
  reject: (err: unknown) => void;
}

/**
 * SQLSTATEs of refusals that running each write again alone would only repeat, each after the same
 * wait: a statement cut by its timeout or cancelled (57014 query_canceled) and a lock not had
 * within lock_timeout (55P03 lock_not_available).
 */
const WAITED_OUT = new Set(['57014', '55P03']);

/**
 * Whether `err` is PostgreSQL's refusal of the statement itself: an ERROR with a SQLSTATE, as
 * postgres.js and PGlite both report it (perhaps inside Drizzle's wrapper). Such a statement wrote
 * nothing and the session goes on, so its writes may run again. Not a connection that failed (the
 * outcome is unknown: nothing may run twice), nor a FATAL that ended the session, nor a wait that
 * ran out (WAITED_OUT).
 */
function refusedStatement(err: unknown): boolean {
  if (connectionFailure(err)) return false;
  let cur: unknown = err;
  for (let i = 0; i < 4 && cur && typeof cur === 'object'; i++) {
    const { code, severity, cause } = cur as { code?: unknown; severity?: unknown; cause?: unknown };
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && severity === 'ERROR') return !WAITED_OUT.has(code);
    cur = cause;
  }
  return false;
}

/**
 * `write` gets the key and the batch (arrival order, at most `maxBatch` items) and answers one
 * result per item, in the same order. If it throws, every write of that batch fails with the error,
 * except when the database refused the statement (`refusedStatement`: one bad item, say a row a
 * trigger or a constraint refuses): then each write of the batch runs again alone, in order, so
 * that only those the database refuses on their own fail, each with its own error, and the others
 * commit as they would have. The next batch runs after them either way.
 *
 * So `write` must be safe to run again for part of a batch it failed: one statement (PostgreSQL
 * undoes all of it), a transaction, or writes that set the same again (sessions' touch).
 */
export function groupCommit<K, In, Out>(
  write: (key: K, batch: In[]) => Promise<Out[]>,
  maxBatch = 64,
): GroupCommit<K, In, Out> {
  const queues = new Map<K, Entry<In, Out>[]>();

  const runBatch = async (key: K, batch: Entry<In, Out>[]): Promise<void> => {
    try {
      const out = await write(
        key,
        batch.map((e) => e.item),
      );
      if (out.length !== batch.length)
        throw new Error(`group commit: ${out.length} results for ${batch.length} writes`);
      for (const [i, e] of batch.entries()) e.resolve(out[i] as Out);
    } catch (err) {
      if (batch.length > 1 && refusedStatement(err)) for (const e of batch) await runBatch(key, [e]);
      else for (const e of batch) e.reject(err);
    }
  };

  const drain = async (key: K, queue: Entry<In, Out>[]) => {
    while (queue.length > 0) await runBatch(key, queue.splice(0, maxBatch));
    queues.delete(key);
  };

  return {
    submit(key, item) {
      return new Promise<Out>((resolve, reject) => {
        const queued = queues.get(key);
        if (queued) {
          queued.push({ item, resolve, reject });
          return;
        }
        const queue = [{ item, resolve, reject }];
        queues.set(key, queue);
        setImmediate(() => void drain(key, queue));
      });
    },
    busyKeys: () => queues.size,
  };
}

/**
 * Group commit with one key: every call of one turn (or made while a batch runs) shares the next
 * batch. For reads and writes that are not per chat, like the session look-ups of a burst of
 * handshakes.
 */
export function batched<In, Out>(run: (batch: In[]) => Promise<Out[]>, maxBatch = 64): (item: In) => Promise<Out> {
  const gc = groupCommit<null, In, Out>((_key, batch) => run(batch), maxBatch);
  return (item) => gc.submit(null, item);
}

/**
 * `batched` for writes that answer nothing: the items of one turn (and those made while a write
 * runs) go to one `run`, once each (duplicates dropped), like the activity touches of a reconnect
 * storm.
 */
export function batchedWrite<In>(run: (batch: In[]) => Promise<void>, maxBatch = 64): (item: In) => Promise<void> {
  return batched(async (batch: In[]) => {
    await run([...new Set(batch)]);
    return batch.map(() => undefined);
  }, maxBatch);
}
