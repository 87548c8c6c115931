import { runSteps } from '../../platform/background.js';
import type { Clock } from '../../platform/clock.js';
import { drain } from '../../platform/drain.js';
import type { ModerationStore } from './moderation.store.js';

/** Punishments lifted, or users restored, per statement of the expiry sweep. */
export const EXPIRY_BATCH = 500;
/** Batches per step and tick (30 s): up to 5,000 of each per node, then the next tick goes on. */
export const EXPIRY_MAX_BATCHES = 10;
/** The sweep's name in what its failures say (app.ts runs it as the `punishment-expiry` task). */
const EXPIRY_TASK = 'punishment-expiry';

/**
 * Lifts records whose time is up and settles users whose timeout or ban ended to the state their
 * other records still give: each in batches of `batch` while they come back full, at most
 * `maxBatches` a tick (the next tick goes on). `restored` counts the users back to Active (a user
 * whose timeout outlasts a temporary ban moves to Timeout, and is not counted). Safe on many nodes.
 * The two steps run on their own (runSteps): the settling reads the records' expiries, not whether
 * they were lifted, so a lift that fails holds up no user's return to Active. A failed step is
 * thrown once the other ran, named by its step, for the task to log.
 */
export function makeExpirySweep(store: Pick<ModerationStore, 'liftExpired' | 'restoreExpiredStates'>, clock: Clock) {
  return async (opts: { batch?: number; maxBatches?: number } = {}): Promise<{ lifted: number; restored: number }> => {
    const size = opts.batch ?? EXPIRY_BATCH;
    const maxBatches = opts.maxBatches ?? EXPIRY_MAX_BATCHES;
    const now = clock.now();
    const lift = () => drain(size, maxBatches, async () => (await store.liftExpired(now, size)).length);
    let restored = 0;
    const restore = () =>
      drain(size, maxBatches, async () => {
        const settled = await store.restoreExpiredStates(now, size);
        restored += settled.filter((u) => u.state === 0).length;
        return settled.length;
      });
    const done = await runSteps(EXPIRY_TASK, [
      { name: 'lift', run: lift },
      { name: 'restore', run: restore },
    ]);
    return { lifted: done.lift ?? 0, restored };
  };
}
