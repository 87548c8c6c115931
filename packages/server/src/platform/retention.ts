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

/**
 * The retention sweep: for each rule, batches while they come back full, bounded per tick. Safe on
 * every node at once (each batch skips rows another node is deleting).
 */
export function makeRetention(clock: Clock, rules: RetentionRule[]) {
  return {
    /** Runs every rule once; answers the rows deleted per rule. */
    async run(opts: { batch?: number; maxBatches?: number } = {}): Promise<Record<string, number>> {
      const size = opts.batch ?? RETENTION_BATCH;
      const maxBatches = opts.maxBatches ?? RETENTION_MAX_BATCHES;
      const now = clock.now().getTime();
      const deleted: Record<string, number> = {};
      for (const rule of rules) {
        const before = new Date(now - rule.keepMs);
        deleted[rule.name] = await drain(size, maxBatches, () => rule.prune(before, size));
      }
      return deleted;
    },
  };
}

export type Retention = ReturnType<typeof makeRetention>;
