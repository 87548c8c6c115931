import type { FastifyBaseLogger } from 'fastify';
import { TIMED_OUT, withinTime } from './timeout.js';

/**
 * How long one run of a background task may take. A run still going then is abandoned (logged at
 * warn): the next tick starts a new one instead of the task stopping for good behind a run that
 * hangs (a lock or a connection that never answers). The abandoned run is not cancelled.
 */
export const RUN_TIMEOUT_MS = 60_000;

/**
 * How long `stop` waits for the run in progress to end, so the stores are not closed under it;
 * well inside the 10 s shutdown cap (main.ts), since every task is stopped at once.
 */
export const STOP_WAIT_MS = 3_000;

export type TaskLog = Pick<FastifyBaseLogger, 'error' | 'warn'>;

/**
 * Runs `task` every `ms` on this node, never two runs at once (but see RUN_TIMEOUT_MS), errors
 * logged. Every task must be safe when all nodes run it (row locks, SKIP LOCKED, atomic scripts).
 * Returns the stop function: no new run starts, and the one in progress is awaited (STOP_WAIT_MS).
 */
export function every(
  ms: number,
  name: string,
  task: () => Promise<unknown>,
  log: TaskLog,
  runTimeoutMs = RUN_TIMEOUT_MS,
): () => Promise<void> {
  let current: Promise<void> | null = null;
  const timer = setInterval(() => {
    if (current) return;
    const run = Promise.resolve()
      .then(task)
      .then(
        () => {},
        (err: unknown) => log.error({ err, task: name }, 'background task failed'),
      );
    current = withinTime(run, runTimeoutMs).then((outcome) => {
      if (outcome === TIMED_OUT)
        log.warn({ task: name, timeout_ms: runTimeoutMs }, 'background task abandoned: the run did not end in time');
      current = null;
    });
  }, ms);
  timer.unref();
  return async () => {
    clearInterval(timer);
    if (current && (await withinTime(current, STOP_WAIT_MS)) === TIMED_OUT)
      log.warn({ task: name, timeout_ms: STOP_WAIT_MS }, 'background task still running at stop');
  };
}
