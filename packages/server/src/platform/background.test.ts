import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { fakeTaskLog } from '../../test/support/task-log.js';
import { every, RUN_TIMEOUT_MS, runSteps, STOP_WAIT_MS } from './background.js';

/** A task whose runs end when the test says so; counts its runs. */
function controlledTask() {
  const ends: (() => void)[] = [];
  return {
    runs: () => ends.length,
    task: () =>
      new Promise<void>((resolve) => {
        ends.push(resolve);
      }),
    /** Ends run `i` (0-based). */
    end: (i: number) => ends[i]?.(),
  };
}

/** The promise's state so far. */
function track(p: Promise<unknown>) {
  const state = { settled: false };
  void p.then(() => {
    state.settled = true;
  });
  return state;
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('every', () => {
  it('runs the task each interval, never two runs at once, and logs a failure', async () => {
    const { log, lines } = fakeTaskLog();
    const t = controlledTask();
    const stop = every(1_000, 'sweep', t.task, log);
    await vi.advanceTimersByTimeAsync(1_000);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(t.runs()).toBe(1);
    t.end(0);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(t.runs()).toBe(2);
    t.end(1);
    await stop();

    const failing = every(1_000, 'broken', () => Promise.reject(new Error('boom')), log);
    await vi.advanceTimersByTimeAsync(1_000);
    await failing();
    expect(lines).toEqual([['error', 'background task failed', { err: new Error('boom'), task: 'broken' }]]);
  });

  it('stop waits for the run in progress, so the stores are not closed under it', async () => {
    const { log } = fakeTaskLog();
    const t = controlledTask();
    const stop = every(1_000, 'sweep', t.task, log);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(t.runs()).toBe(1);
    const stopped = track(stop());
    await vi.advanceTimersByTimeAsync(STOP_WAIT_MS - 1);
    expect(stopped.settled).toBe(false);
    t.end(0);
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped.settled).toBe(true);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(t.runs()).toBe(1);
  });

  it('stop waits STOP_WAIT_MS at most for a run that does not end, and says so', async () => {
    const { log, lines } = fakeTaskLog();
    const t = controlledTask();
    const stop = every(1_000, 'sweep', t.task, log);
    await vi.advanceTimersByTimeAsync(1_000);
    const stopped = track(stop());
    await vi.advanceTimersByTimeAsync(STOP_WAIT_MS);
    expect(stopped.settled).toBe(true);
    expect(lines).toEqual([
      ['warn', 'background task still running at stop', { task: 'sweep', timeout_ms: STOP_WAIT_MS }],
    ]);
  });

  it('reports a run that hangs past RUN_TIMEOUT_MS once, starts no other until it ends, and stop awaits it', async () => {
    const { log, lines } = fakeTaskLog();
    const t = controlledTask();
    const stop = every(1_000, 'sweep', t.task, log);
    await vi.advanceTimersByTimeAsync(1_000);
    await vi.advanceTimersByTimeAsync(RUN_TIMEOUT_MS - 1_000);
    expect(t.runs()).toBe(1);
    expect(lines).toEqual([]);
    await vi.advanceTimersByTimeAsync(1_000);
    const overdue = [
      'warn',
      'background task overdue: the run did not end in time; no new run starts until it does',
      { task: 'sweep', timeout_ms: RUN_TIMEOUT_MS },
    ];
    expect(lines).toEqual([overdue]);
    // A stall: minutes of ticks start nothing more and log nothing more.
    await vi.advanceTimersByTimeAsync(3 * RUN_TIMEOUT_MS);
    expect(t.runs()).toBe(1);
    expect(lines).toEqual([overdue]);
    // Stop waits for the overdue run too.
    const stopped = track(stop());
    await vi.advanceTimersByTimeAsync(STOP_WAIT_MS - 1);
    expect(stopped.settled).toBe(false);
    t.end(0);
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped.settled).toBe(true);
  });

  it('starts the next run once an overdue run ends', async () => {
    const { log } = fakeTaskLog();
    const t = controlledTask();
    const stop = every(1_000, 'sweep', t.task, log);
    await vi.advanceTimersByTimeAsync(1_000 + RUN_TIMEOUT_MS + 5_000);
    expect(t.runs()).toBe(1);
    t.end(0);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(t.runs()).toBe(2);
    t.end(1);
    await stop();
  });
});

describe('runSteps', () => {
  it('runs every step in turn; one that fails is logged with its name and the later ones still run', async () => {
    const { log, lines } = fakeTaskLog();
    const ran: string[] = [];
    const step = (name: string, fails = false) => ({
      name,
      run: async () => {
        ran.push(name);
        if (fails) throw new Error(`${name} broke`);
        return name.length;
      },
    });
    const results = await runSteps('sweep', [step('first'), step('broken', true), step('last')], log);
    expect(ran).toEqual(['first', 'broken', 'last']);
    expect(results).toEqual({ first: 5, last: 4 });
    expect(lines).toEqual([
      ['error', 'background task step failed', { err: new Error('broken broke'), task: 'sweep', step: 'broken' }],
    ]);
  });
});
