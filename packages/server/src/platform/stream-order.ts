import type { FastifyBaseLogger } from 'fastify';

/**
 * How long a fresh room:join waits (`catchUp`) for this node's stream reader before it enters
 * anyway, and logs: a reader this far behind delivers late whatever it does.
 */
export const STREAM_CATCH_UP_MAX_MS = 2_000;

/** The streams adapter's entry point for what its reader reads, one stream entry at a time. */
export interface StreamReader {
  onRawMessage(raw: unknown, offset: string): void;
}

/** Orders two Redis stream ids (`<ms>-<seq>`): negative, zero or positive as `a` is before, at or after `b`. */
export function compareStreamIds(a: string, b: string): number {
  const [am = '0', as = '0'] = a.split('-');
  const [bm = '0', bs = '0'] = b.split('-');
  const ms = BigInt(am) - BigInt(bm);
  if (ms !== 0n) return ms < 0n ? -1 : 1;
  const seq = BigInt(as) - BigInt(bs);
  return seq === 0n ? 0 : seq < 0n ? -1 : 1;
}

/**
 * Tracks how far this node's stream reader has applied the cluster's stream, and lets a caller
 * wait until it has applied everything in the stream now (`catchUp`).
 *
 * Room changes of other nodes (a kick's `socketsLeave` of `user:<id>`) reach this node through the
 * stream, in order, when its reader gets to them. A socket that enters a room here at once, while a
 * leave of another node is still unread, is taken out by that leave when it is read: a member who
 * was kicked on node A and joins again at once through a lagging node B would get nothing of the
 * chat. Waiting, before such an entry, until the reader has applied the stream's tail as read now
 * (which holds every leave committed before) orders the entry after them.
 *
 * `tail` reads the stream's last id (null when empty). The wrapper is installed on the adapter's
 * `onRawMessage`, so the offset is noted once the entry has been applied.
 */
export function trackStreamOrder(
  adapter: StreamReader,
  opts: { tail: () => Promise<string | null>; log: FastifyBaseLogger; maxWaitMs?: number },
) {
  const maxWaitMs = opts.maxWaitMs ?? STREAM_CATCH_UP_MAX_MS;
  /** The id of the last entry this node's reader applied; null until it applied one. */
  let applied: string | null = null;
  const waiters = new Set<{ id: string; done: () => void }>();
  // The reader starts at the stream's end ('$'): entries older than this are never read here.
  const floor = opts.tail().catch(() => null);
  const read = adapter.onRawMessage;
  adapter.onRawMessage = function (this: StreamReader, raw: unknown, offset: string) {
    try {
      read.call(this, raw, offset);
    } finally {
      applied = offset;
      for (const w of waiters) if (compareStreamIds(offset, w.id) >= 0) w.done();
    }
  };

  /** Whether the reader has applied `tail` (checked in the same turn as a waiter is added). */
  const reached = (tail: string) => applied !== null && compareStreamIds(applied, tail) >= 0;

  return {
    /** The last entry id applied here (null: none yet). */
    applied: () => applied,
    /**
     * Resolves once this node's reader has applied every entry in the stream as it is now: at once
     * when it has (one Redis read), else when it gets there or after `maxWaitMs` (logged). Never
     * rejects: a failed read of the tail enters without waiting.
     */
    async catchUp(): Promise<void> {
      let tail: string | null;
      try {
        tail = await opts.tail();
      } catch (err) {
        opts.log.warn({ err }, 'stream tail could not be read; entering without waiting for the reader');
        return;
      }
      if (tail === null || reached(tail)) return;
      // Nothing applied yet (a node just started): what the stream held then is never read here.
      const start = applied === null ? await floor : null;
      if (start !== null && compareStreamIds(tail, start) <= 0) return;
      const id = tail;
      const started = Date.now();
      await new Promise<void>((resolve) => {
        if (reached(id)) return resolve();
        const waiter = {
          id,
          done: () => {
            clearTimeout(timer);
            waiters.delete(waiter);
            resolve();
          },
        };
        const timer = setTimeout(() => {
          opts.log.warn(
            { tail: id, applied, waited_ms: Date.now() - started },
            'stream reader is behind; entering anyway',
          );
          waiter.done();
        }, maxWaitMs);
        waiters.add(waiter);
      });
    },
  };
}

export type StreamOrder = ReturnType<typeof trackStreamOrder>;
