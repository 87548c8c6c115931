import type { FastifyBaseLogger } from 'fastify';
import { TIMED_OUT, withinTime } from './timeout.js';

/**
 * How long one run of a background task may take before it is reported overdue (logged once at
 * warn). It is not cancelled, and no new run starts until it ends: during a database stall each
 * task holds one stuck run, not one more per interval.
 */
export const RUN_TIMEOUT_MS = 60_000;

/**
 * How long `stop` waits for the run in progress to end, so the stores are not closed under it;
 * well inside the 10 s shutdown cap (main.ts), since every task is stopped at once.
 */
export const STOP_WAIT_MS = 3_000;

export type TaskLog = Pick<FastifyBaseLogger, 'error' | 'warn'>;

/**
 * Runs `task` every `ms` on this node, never two runs at once (ticks are skipped while a run, even
 * an overdue one, is going), errors logged. Every task must be safe when all nodes run it (row
 * locks, SKIP LOCKED, atomic scripts). Returns the stop function: no new run starts, and the one in
 * progress is awaited (STOP_WAIT_MS).
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
      )
      .finally(() => {
        current = null;
      });
    current = run;
    void withinTime(run, runTimeoutMs).then((outcome) => {
      if (outcome === TIMED_OUT)
        log.warn(
          { task: name, timeout_ms: runTimeoutMs },
          'background task overdue: the run did not end in time; no new run starts until it does',
        );
    });
  }, ms);
  timer.unref();
  return async () => {
    clearInterval(timer);
    if (current && (await withinTime(current, STOP_WAIT_MS)) === TIMED_OUT)
      log.warn({ task: name, timeout_ms: STOP_WAIT_MS }, 'background task still running at stop');
  };
}

/** One named step of a task (`runSteps`). */
export interface TaskStep<T> {
  /** What the step does, logged with its failure. */
  name: string;
  run: () => Promise<T>;
}

/** A part of a task that failed: its error, and the fields that name the part (`step`, `userId`; never a secret). */
export interface PartFailure {
  err: unknown;
  part: Record<string, string | number>;
}

/**
 * How many failed parts one error carries in full (partsFailed): a tick in which every part fails
 * (the database refusing them all) logs a line of bounded size, the rest counted.
 */
const PARTS_REPORTED = 20;

/**
 * The parts of task `task` that failed while the others were done (its steps, or the rows it
 * handles one at a time), as one error to throw once every part ran: the node's `every` logs it
 * (`background task failed`, with the task's name), each member naming its part (its fields) with
 * the part's error as its cause; beyond PARTS_REPORTED, `unreported` counts the others.
 */
export function partsFailed(task: string, failures: readonly PartFailure[]): AggregateError {
  const members = failures.slice(0, PARTS_REPORTED).map(({ err, part }) => {
    const named = Object.entries(part).map(([field, value]) => `${field} ${value}`);
    return Object.assign(new Error(`${task} failed for ${named.join(', ')}`, { cause: err }), part);
  });
  const error = new AggregateError(members, `${task}: ${failures.length} part(s) failed, the others were done`);
  const unreported = failures.length - members.length;
  return unreported > 0 ? Object.assign(error, { unreported }) : error;
}

/**
 * Runs the steps of task `task` one after another, each on its own: a step that fails is logged
 * (`background task step failed`, with the task's and the step's name) and the next ones still
 * run, so one broken step (a table's statement) does not stop the others on every tick. Answers
 * each step's result by its name; a failed step has none. Without a `log` (a task that has none),
 * the failed steps are thrown together once every step ran (partsFailed), for `every` to log.
 */
export async function runSteps<T>(
  task: string,
  steps: readonly TaskStep<T>[],
  log?: TaskLog,
): Promise<Record<string, T>> {
  const results: Record<string, T> = {};
  const failures: PartFailure[] = [];
  for (const step of steps) {
    try {
      results[step.name] = await step.run();
    } catch (err) {
      if (log) log.error({ err, task, step: step.name }, 'background task step failed');
      else failures.push({ err, part: { step: step.name } });
    }
  }
  if (failures.length > 0) throw partsFailed(task, failures);
  return results;
}

/**
 * The node's background work: tasks started with `every` (and other stops `add`ed), all stopped by
 * `stopAll` at once, in parallel, so shutdown waits STOP_WAIT_MS at most for all of them together
 * rather than one bound after another (the shutdown cap is 10 s: process-lifecycle.ts).
 */
export interface BackgroundTasks {
  /** Starts `task` every `ms` (see `every`); stopped with the others. */
  every(ms: number, name: string, task: () => Promise<unknown>): void;
  /** Adds a stop, bounded by its owner, to run with the others. */
  add(name: string, stop: () => Promise<void>): void;
  /** The names of the tasks, in the order they were added. */
  readonly names: readonly string[];
  /** Runs every stop at once and waits for all of them. */
  stopAll(): Promise<void>;
}

export function backgroundTasks(log: TaskLog): BackgroundTasks {
  const stops: { name: string; stop: () => Promise<void> }[] = [];
  const add = (name: string, stop: () => Promise<void>) => void stops.push({ name, stop });
  return {
    every: (ms, name, task) => add(name, every(ms, name, task, log)),
    add,
    get names() {
      return stops.map((s) => s.name);
    },
    stopAll: async () => {
      await Promise.all(stops.map((s) => s.stop()));
    },
  };
}
