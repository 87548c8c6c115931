import { constants } from 'node:os';
import type { Logger } from 'pino';

/** How long a shutdown on SIGTERM/SIGINT may take before the process exits 1 regardless. */
export const SHUTDOWN_CAP_MS = 10_000;

/**
 * How long a signal waits for a start in progress (migrations) before SHUTDOWN_CAP_MS begins. A
 * start is not cut short: PGlite's migrations are one transaction that a kill would make run again
 * at the next start, and a slow machine takes several seconds for a first start. This bounds a
 * start that hangs (a store that never answers); a second signal still exits at once.
 */
export const START_CAP_MS = 120_000;

/** How long the shutdown after a crash may take: the process is in an unknown state. */
export const CRASH_CAP_MS = 3_000;

/** How long the last resort (closing the database, releasing DATA_DIR) may take once a cap has passed. */
export const LAST_RESORT_MS = 1_000;

export interface ProcessEventsOptions {
  log: Logger;
  /**
   * Settles when the start in progress (if any) has ended, either way: a signal's shutdown waits
   * for it (START_CAP_MS at most) before `close` and its SHUTDOWN_CAP_MS begin.
   */
  started?: () => Promise<unknown>;
  /** Closes the app (or what the start opened). */
  close: () => Promise<void>;
  /**
   * Run when a cap passes with `close` unfinished, for LAST_RESORT_MS at most, before the exit:
   * closes what must not be left open (the embedded database, so its files are written and its
   * DATA_DIR lock released).
   */
  lastResort?: () => Promise<void>;
  /** Where the signals and crashes come from (tests: an emitter); `process` by default. */
  events?: Pick<NodeJS.EventEmitter, 'on'>;
  /** How the process exits (tests: a stub); `process.exit` by default. */
  exit?: (code: number) => void;
}

export interface ProcessEvents {
  /** True from the first signal or crash on: a start still in progress must not begin serving. */
  readonly stopping: boolean;
}

/**
 * The process's signals and crashes, installed before anything is opened (a SIGTERM during the
 * migrations would otherwise kill the process mid-write, PGlite unclosed):
 * - SIGTERM/SIGINT: waits for a start in progress (`started`, START_CAP_MS at most), then
 *   `close()`, then exit 0; 1 if it fails or takes over SHUTDOWN_CAP_MS. A second signal exits at
 *   once, 128 + its number (130 for a second Ctrl-C).
 * - uncaughtException/unhandledRejection: logged at fatal (the logger's serializer keeps query
 *   values out), the same `close()` capped at CRASH_CAP_MS, then exit 1. Node's default would print
 *   a non-JSON stack and leave the stores unclosed.
 * Past a cap, `lastResort()` gets LAST_RESORT_MS before the exit 1.
 */
export function handleProcessEvents(opts: ProcessEventsOptions): ProcessEvents {
  const { log } = opts;
  const exit = opts.exit ?? ((code: number) => process.exit(code));
  let stopping = false;
  let crashed = false;

  let lastResortStarted = false;
  const lastResortThenExit = () => {
    if (lastResortStarted) return;
    lastResortStarted = true;
    if (!opts.lastResort) return exit(1);
    const bound = setTimeout(() => exit(1), LAST_RESORT_MS);
    Promise.resolve()
      .then(opts.lastResort)
      .catch((err: unknown) => log.error({ err }, 'last-resort close failed'))
      .finally(() => {
        clearTimeout(bound);
        exit(1);
      });
  };

  const shutDown = (capMs: number) => {
    const cap = setTimeout(() => {
      log.error({ cap_ms: capMs }, 'shutdown did not finish in time; closing the database and exiting');
      lastResortThenExit();
    }, capMs);
    cap.unref();
    closeAndExit();
  };

  const closeAndExit = () => {
    opts.close().then(
      () => exit(crashed ? 1 : 0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        exit(1);
      },
    );
  };

  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting at once');
      exit(128 + constants.signals[signal]);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
    if (!opts.started) return shutDown(SHUTDOWN_CAP_MS);
    // The cap counts from the end of the start: a start (migrations) is let finish, not cut off.
    const startCap = setTimeout(() => {
      log.error({ cap_ms: START_CAP_MS }, 'the start in progress did not end in time; exiting');
      lastResortThenExit();
    }, START_CAP_MS);
    startCap.unref();
    opts
      .started()
      .catch(() => {})
      .then(() => {
        clearTimeout(startCap);
        if (!lastResortStarted) shutDown(SHUTDOWN_CAP_MS);
      });
  };

  const onCrash = (what: string) => (err: unknown) => {
    log.fatal({ err }, what);
    crashed = true;
    if (stopping) {
      // A shutdown is under way: it exits 1 when done, or at the crash cap after the last resort.
      setTimeout(lastResortThenExit, CRASH_CAP_MS).unref();
      return;
    }
    stopping = true;
    shutDown(CRASH_CAP_MS);
  };

  const events = opts.events ?? process;
  events.on('SIGTERM', onSignal);
  events.on('SIGINT', onSignal);
  events.on('uncaughtException', onCrash('uncaught exception'));
  events.on('unhandledRejection', onCrash('unhandled rejection'));
  return {
    get stopping() {
      return stopping;
    },
  };
}
