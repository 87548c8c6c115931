import { constants } from 'node:os';
import type { Logger } from 'pino';

/** How long a shutdown on SIGTERM/SIGINT may take before the process exits 1 regardless. */
export const SHUTDOWN_CAP_MS = 10_000;

/** How long the shutdown after a crash may take: the process is in an unknown state. */
export const CRASH_CAP_MS = 3_000;

export interface ProcessEvents {
  /** True from the first signal or crash on: a start still in progress must not begin serving. */
  readonly stopping: boolean;
}

/**
 * The process's signals and crashes, installed before anything is opened (a SIGTERM during the
 * migrations would otherwise kill the process mid-write, PGlite unclosed):
 * - SIGTERM/SIGINT: `close()` (the app, or what a start in progress has opened), then exit 0; 1
 *   if it fails or takes over SHUTDOWN_CAP_MS. A second signal exits at once, 128 + its number
 *   (130 for a second Ctrl-C).
 * - uncaughtException/unhandledRejection: logged at fatal (the logger's serializer keeps query
 *   values out), the same `close()` capped at CRASH_CAP_MS, then exit 1. Node's default would print
 *   a non-JSON stack and leave the stores unclosed.
 */
export function handleProcessEvents(opts: { log: Logger; close: () => Promise<void> }): ProcessEvents {
  const { log } = opts;
  let stopping = false;
  let crashed = false;

  const shutDown = (capMs: number) => {
    const cap = setTimeout(() => {
      log.error({ cap_ms: capMs }, 'shutdown did not finish in time; exiting');
      process.exit(1);
    }, capMs);
    cap.unref();
    opts.close().then(
      () => process.exit(crashed ? 1 : 0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };

  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting at once');
      process.exit(128 + constants.signals[signal]);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
    shutDown(SHUTDOWN_CAP_MS);
  };

  const onCrash = (what: string) => (err: unknown) => {
    log.fatal({ err }, what);
    crashed = true;
    if (stopping) {
      // A shutdown is under way: it exits 1 when done, or at the crash cap.
      setTimeout(() => process.exit(1), CRASH_CAP_MS).unref();
      return;
    }
    stopping = true;
    shutDown(CRASH_CAP_MS);
  };

  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  process.on('uncaughtException', onCrash('uncaught exception'));
  process.on('unhandledRejection', onCrash('unhandled rejection'));
  return {
    get stopping() {
      return stopping;
    },
  };
}
