import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  CRASH_CAP_MS,
  handleProcessEvents,
  LAST_RESORT_MS,
  SHUTDOWN_CAP_MS,
  START_CAP_MS,
} from './process-lifecycle.js';

/** What was logged, as [level, message]. */
function fakeLog() {
  const lines: [string, string][] = [];
  const at = (level: string) => (_obj: object, msg: string) => void lines.push([level, msg]);
  const log = { info: at('info'), warn: at('warn'), error: at('error'), fatal: at('fatal') } as unknown as Logger;
  return { log, lines };
}

/** A shutdown whose close never ends, with what happened in order. */
function stuckShutdown(lastResort: () => Promise<void>) {
  return stuck(lastResort).started;
}

/** The same, with the emitter, so a test can add events after the SIGTERM. */
function stuck(lastResort: () => Promise<void>) {
  const { log, lines } = fakeLog();
  const events = new EventEmitter();
  const order: string[] = [];
  handleProcessEvents({
    log,
    close: () => new Promise<void>(() => {}),
    lastResort: () => {
      order.push('last resort');
      return lastResort();
    },
    events,
    exit: (code) => void order.push(`exit ${code}`),
  });
  events.emit('SIGTERM', 'SIGTERM');
  return { started: { order, lines }, events };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('handleProcessEvents', () => {
  it('past the cap with close unfinished, runs the last resort (the database close), then exits 1', async () => {
    let closed: () => void = () => {};
    const { order, lines } = stuckShutdown(
      () =>
        new Promise<void>((resolve) => {
          closed = resolve;
        }),
    );
    await vi.advanceTimersByTimeAsync(SHUTDOWN_CAP_MS - 1);
    expect(order).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(order).toEqual(['last resort']);
    closed();
    await vi.advanceTimersByTimeAsync(0);
    expect(order).toEqual(['last resort', 'exit 1']);
    expect(lines).toContainEqual(['error', 'shutdown did not finish in time; closing the database and exiting']);
  });

  it('a crash during a signal shutdown runs the last resort at the crash cap, once, then exits 1', async () => {
    const { started, events } = stuck(async () => {});
    events.emit('uncaughtException', new Error('boom'));
    await vi.advanceTimersByTimeAsync(CRASH_CAP_MS - 1);
    expect(started.order).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(started.order).toEqual(['last resort', 'exit 1']);
    // The signal's own cap, later, does not run it again.
    await vi.advanceTimersByTimeAsync(SHUTDOWN_CAP_MS);
    expect(started.order).toEqual(['last resort', 'exit 1']);
    expect(started.lines).toContainEqual(['fatal', 'uncaught exception']);
  });

  it('exits 1 after LAST_RESORT_MS when the last resort does not end either, and once only', async () => {
    const { order } = stuckShutdown(() => new Promise<void>(() => {}));
    await vi.advanceTimersByTimeAsync(SHUTDOWN_CAP_MS + LAST_RESORT_MS - 1);
    expect(order).toEqual(['last resort']);
    await vi.advanceTimersByTimeAsync(1);
    expect(order).toEqual(['last resort', 'exit 1']);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(order).toEqual(['last resort', 'exit 1']);
  });

  it('exits 1 when the last resort fails, and logs why', async () => {
    const { order, lines } = stuckShutdown(() => Promise.reject(new Error('disk gone')));
    await vi.advanceTimersByTimeAsync(SHUTDOWN_CAP_MS);
    expect(order).toEqual(['last resort', 'exit 1']);
    expect(lines).toContainEqual(['error', 'last-resort close failed']);
  });

  describe('a signal while the start (migrations) is still in progress', () => {
    /** A start that ends when the test says, and a close that ends at once unless told otherwise. */
    function starting(closeNever = false) {
      const { log, lines } = fakeLog();
      const events = new EventEmitter();
      const order: string[] = [];
      let end: (ok: boolean) => void = () => {};
      const start = new Promise<void>((resolve, reject) => {
        end = (ok) => (ok ? resolve() : reject(new Error('start failed')));
      });
      handleProcessEvents({
        log,
        started: () => start,
        close: async () => {
          order.push('close');
          if (closeNever) await new Promise<void>(() => {});
        },
        lastResort: async () => void order.push('last resort'),
        events,
        exit: (code) => void order.push(`exit ${code}`),
      });
      events.emit('SIGTERM', 'SIGTERM');
      return { order, lines, end, events };
    }

    it('lets the start finish however long past the shutdown cap, then closes and exits 0', async () => {
      const { order, end } = starting();
      await vi.advanceTimersByTimeAsync(SHUTDOWN_CAP_MS * 5);
      expect(order).toEqual([]);
      end(true);
      await vi.advanceTimersByTimeAsync(0);
      expect(order).toEqual(['close', 'exit 0']);
    });

    it('closes as well when the start fails', async () => {
      const { order, end } = starting();
      end(false);
      await vi.advanceTimersByTimeAsync(0);
      expect(order).toEqual(['close', 'exit 0']);
    });

    it('counts the shutdown cap from the end of the start', async () => {
      const { order, end } = starting(true);
      await vi.advanceTimersByTimeAsync(30_000);
      end(true);
      await vi.advanceTimersByTimeAsync(SHUTDOWN_CAP_MS - 1);
      expect(order).toEqual(['close']);
      await vi.advanceTimersByTimeAsync(1);
      expect(order).toEqual(['close', 'last resort', 'exit 1']);
    });

    it('gives up on a start that hangs at START_CAP_MS: the last resort, exit 1, nothing after', async () => {
      const { order, lines, end } = starting();
      await vi.advanceTimersByTimeAsync(START_CAP_MS - 1);
      expect(order).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(order).toEqual(['last resort', 'exit 1']);
      expect(lines).toContainEqual(['error', 'the start in progress did not end in time; exiting']);
      end(true);
      await vi.advanceTimersByTimeAsync(SHUTDOWN_CAP_MS);
      expect(order).toEqual(['last resort', 'exit 1']);
    });

    it('still exits at once on a second signal', async () => {
      const { order, events } = starting();
      events.emit('SIGINT', 'SIGINT');
      expect(order).toEqual(['exit 130']);
    });
  });
});
