import { Limits } from '@parlor/protocol';
import type { StateStore } from '../../platform/state/index.js';

/** An attempt the limits let through: the address and the windows its points went to, which a give-back names. */
export interface Attempt {
  key: string;
  own: string;
  all: string;
}

/**
 * The failed-verification limits (docs/security.md, "Guessing login codes"): per client address
 * (addressKey) and service-wide, both in the coordination store, so shared by every node.
 *
 * An attempt is counted before its code is looked at, so parallel guesses from one address cannot
 * all pass a check made before any of them has failed: each takes a point of the address's
 * allowance atomically (the limiter's consume), and the one past VERIFY_FAILURES_PER_IP in a window
 * is refused. The service-wide budget is spent the same way; once it is gone, addresses that
 * already spent a point in their window are refused (both points given back, as the attempt is
 * never checked), while clean addresses still verify, so an attacker cannot lock everyone out. A
 * verify that finds its code gives its points back: only failures count.
 */
export function makeVerifyAttempts(state: Pick<StateStore, 'limiter'>) {
  const perAddress = state.limiter('verify-fail-ip', Limits.VERIFY_FAILURES_PER_IP, Limits.VERIFY_FAILURE_WINDOW_MS);
  const global = state.limiter('verify-fail-all', Limits.VERIFY_FAILURES_GLOBAL, Limits.VERIFY_FAILURE_WINDOW_MS);

  const giveBack = async (attempt: Attempt) => {
    await Promise.all([perAddress.refund(attempt.key, attempt.own), global.refund('all', attempt.all)]);
  };

  return {
    /** Spends an attempt of the address `key`: the attempt when it may be checked, else the wait (ms) before the next. */
    async spend(key: string): Promise<Attempt | number> {
      const own = await perAddress.consume(key);
      if (!own.allowed) return own.retryAfterMs;
      const clean = own.remaining === Limits.VERIFY_FAILURES_PER_IP - 1;
      const all = await global.consume('all');
      const attempt = { key, own: own.window, all: all.window };
      if (all.allowed || clean) return attempt;
      await giveBack(attempt);
      return all.retryAfterMs;
    },

    /** Gives back the points of an attempt that found its code. */
    giveBack,
  };
}
