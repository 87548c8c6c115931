import { type RateLimiterAbstract, RateLimiterRes } from 'rate-limiter-flexible';
import type { Limiter, LimitResult } from './types.js';

/** Adapts a rate-limiter-flexible limiter (memory or Redis backend) to the narrow Limiter port. */
export function wrapLimiter(rl: RateLimiterAbstract, points: number): Limiter {
  const fromRes = (res: RateLimiterRes, allowed: boolean): LimitResult => ({
    allowed,
    remaining: Math.max(0, res.remainingPoints),
    retryAfterMs: allowed ? 0 : Math.max(1, res.msBeforeNext),
  });
  return {
    async consume(key, n = 1) {
      try {
        return fromRes(await rl.consume(key, n), true);
      } catch (e) {
        if (e instanceof RateLimiterRes) return fromRes(e, false);
        throw e;
      }
    },
    async refund(key, n = 1) {
      await rl.reward(key, n);
    },
    async peek(key) {
      const res = await rl.get(key);
      if (!res) return { allowed: true, remaining: points, retryAfterMs: 0 };
      const allowed = res.consumedPoints < points;
      return {
        allowed,
        remaining: Math.max(0, points - res.consumedPoints),
        retryAfterMs: allowed ? 0 : res.msBeforeNext,
      };
    },
    async reset(key) {
      await rl.delete(key);
    },
  };
}
