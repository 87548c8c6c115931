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
 * `write` gets the key and the batch (arrival order, at most `maxBatch` items) and answers one
 * result per item, in the same order. If it throws, every write of that batch fails with the error;
 * the next batch still runs.
 */
export function groupCommit<K, In, Out>(
  write: (key: K, batch: In[]) => Promise<Out[]>,
  maxBatch = 64,
): GroupCommit<K, In, Out> {
  const queues = new Map<K, Entry<In, Out>[]>();

  const runBatch = async (key: K, batch: Entry<In, Out>[]) => {
    try {
      const out = await write(
        key,
        batch.map((e) => e.item),
      );
      if (out.length !== batch.length)
        throw new Error(`group commit: ${out.length} results for ${batch.length} writes`);
      for (const [i, e] of batch.entries()) e.resolve(out[i] as Out);
    } catch (err) {
      for (const e of batch) e.reject(err);
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
