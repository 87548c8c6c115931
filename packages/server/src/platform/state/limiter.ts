import { type RateLimiterAbstract, RateLimiterRes } from 'rate-limiter-flexible';
import type { Limiter, LimitResult } from './types.js';

/**
 * Adapts a rate-limiter-flexible limiter (the Redis backend; MemoryState has its WindowLimiter) to
 * the narrow Limiter port, but for `refund`: rate-limiter-flexible's reward, once its window has
 * ended, opens the next one with the points credited, so the backend gives points back its own way
 * (RedisState limiter: to the open window only).
 */
export function wrapLimiter(rl: RateLimiterAbstract, points: number): Omit<Limiter, 'refund'> {
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
