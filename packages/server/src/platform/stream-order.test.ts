import type { FastifyBaseLogger } from 'fastify';
import { describe, expect, it, vi } from 'vitest';
import { compareStreamIds, type StreamReader, trackStreamOrder } from './stream-order.js';

const quietLog = () => ({ warn: vi.fn() }) as unknown as FastifyBaseLogger & { warn: ReturnType<typeof vi.fn> };

/** An adapter whose reader is driven by the test, over a stream whose tail the test sets. */
function setUp(opts: { tail: string | null; floor?: string | null; maxWaitMs?: number }) {
  const seen: string[] = [];
  const adapter: StreamReader = {
    onRawMessage(_raw, offset) {
      seen.push(offset);
    },
  };
  const stream = { tail: opts.tail, reads: 0 };
  let first = true;
  const log = quietLog();
  const order = trackStreamOrder(adapter, {
    tail: async () => {
      if (first) {
        first = false;
        return opts.floor ?? null;
      }
      stream.reads += 1;
      return stream.tail;
    },
    log,
    maxWaitMs: opts.maxWaitMs ?? 2_000,
  });
  const read = (offset: string) => adapter.onRawMessage({ nsp: '/' }, offset);
  return { order, read, seen, stream, log };
}

/** Whether the promise settles within the current turns (no timer runs). */
const settlesNow = async (p: Promise<unknown>) => {
  let done = false;
  void p.then(() => {
    done = true;
  });
  for (let i = 0; i < 10; i++) await Promise.resolve();
  return done;
};

describe('compareStreamIds', () => {
  it('orders by time, then by sequence, as numbers', () => {
    expect(compareStreamIds('10-0', '9-5')).toBe(1);
    expect(compareStreamIds('5-2', '5-10')).toBe(-1);
    expect(compareStreamIds('5-3', '5-3')).toBe(0);
  });
});

describe('trackStreamOrder catchUp', () => {
  it('adds no wait when the reader has applied the tail: one read of it, no timer', async () => {
    const t = setUp({ tail: '100-3' });
    t.read('100-2');
    t.read('100-3');
    expect(t.seen).toEqual(['100-2', '100-3']);
    vi.useFakeTimers();
    try {
      expect(await settlesNow(t.order.catchUp())).toBe(true);
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
    expect(t.stream.reads).toBe(1);
  });

  it('adds no wait on an empty stream, nor for entries from before the node started', async () => {
    expect(await settlesNow(setUp({ tail: null }).order.catchUp())).toBe(true);
    const started = setUp({ tail: '50-0', floor: '50-0' });
    await Promise.resolve();
    expect(await settlesNow(started.order.catchUp())).toBe(true);
  });

  it('waits, when the reader is behind, until it applies the tail', async () => {
    const t = setUp({ tail: '200-1' });
    t.read('199-9');
    let done = false;
    const waiting = t.order.catchUp().then(() => {
      done = true;
    });
    await settlesNow(Promise.resolve());
    expect(done).toBe(false);
    t.read('200-0');
    await settlesNow(Promise.resolve());
    expect(done).toBe(false);
    t.read('200-1');
    await waiting;
    expect(done).toBe(true);
    expect(t.log.warn).not.toHaveBeenCalled();
  });

  it('stops waiting after maxWaitMs and logs it', async () => {
    vi.useFakeTimers();
    try {
      const t = setUp({ tail: '300-0', maxWaitMs: 2_000 });
      t.read('299-0');
      let done = false;
      const waiting = t.order.catchUp().then(() => {
        done = true;
      });
      await vi.advanceTimersByTimeAsync(1_999);
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      await waiting;
      expect(t.log.warn).toHaveBeenCalledTimes(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it('enters without waiting when the tail cannot be read', async () => {
    const log = quietLog();
    let calls = 0;
    const order = trackStreamOrder(
      { onRawMessage() {} },
      {
        tail: async () => {
          calls += 1;
          if (calls > 1) throw new Error('redis down');
          return null;
        },
        log,
      },
    );
    await order.catchUp();
    expect(log.warn).toHaveBeenCalledTimes(1);
  });
});
