import { runSteps, type TaskLog } from './background.js';
import type { Clock } from './clock.js';
import { drain } from './drain.js';

/** One table's retention: rows older than `keepMs` (by the rule's own moment) are deleted. */
export interface RetentionRule {
  /** What the rule deletes (the key of `run`'s answer). */
  name: string;
  /** How long a row is kept, in milliseconds, after the moment the rule measures from. */
  keepMs: number;
  /** Deletes up to `limit` rows due at or before `before` (one statement); answers how many. */
  prune(before: Date, limit: number): Promise<number>;
}

/** How often every node runs the retention sweep. */
export const RETENTION_INTERVAL_MS = 10 * 60_000;
/** Rows a statement deletes (and locks) at most. */
export const RETENTION_BATCH = 1000;
/** Batches per rule and tick: 20,000 rows of each table per node every 10 minutes at most. */
export const RETENTION_MAX_BATCHES = 20;

/** The background task that runs the sweep (its failures are logged under this name). */
export const RETENTION_TASK = 'data-retention';

/**
 * The retention sweep: for each rule, batches while they come back full, bounded per tick. Safe on
 * every node at once (each batch skips rows another node is deleting). Each rule runs on its own:
 * one that fails is logged with its name, and the others still run (runSteps).
 */
export function makeRetention(clock: Clock, rules: RetentionRule[], log: TaskLog) {
  return {
    /** Runs every rule once; answers the rows deleted per rule (none for a rule that failed). */
    async run(opts: { batch?: number; maxBatches?: number } = {}): Promise<Record<string, number>> {
      const size = opts.batch ?? RETENTION_BATCH;
      const maxBatches = opts.maxBatches ?? RETENTION_MAX_BATCHES;
      const now = clock.now().getTime();
      return runSteps(
        RETENTION_TASK,
        rules.map((rule) => ({
          name: rule.name,
          run: () => drain(size, maxBatches, () => rule.prune(new Date(now - rule.keepMs), size)),
        })),
        log,
      );
    },
  };
}

export type Retention = ReturnType<typeof makeRetention>;
