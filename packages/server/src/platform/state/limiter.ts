import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { CONSUME_WINDOW, REFUND_WINDOW } from './redis.lua.js';
import type { Consumed, Limiter, LimitResult } from './types.js';

/** Where a Redis limiter keeps its keys: `<counts><key>` and `<windows><key>`. */
export interface LimiterKeys {
  counts: string;
  windows: string;
}

/**
 * The cluster mode's fixed-window limiter (MemoryState has its WindowLimiter; both pass
 * state.contract.ts). A key's window is its counter, the points spent in it, which expires when the
 * window ends (the integer rate-limiter-flexible keeps, so nodes of an older version count with
 * this one during an upgrade), and its identity beside it, which ends with it: a give-back names
 * the window it spent in, and a window opened after that one ended gets nothing of it (the
 * library reports no window, so it is not used here).
 */
export class RedisLimiter implements Limiter {
  constructor(
    private readonly client: Redis,
    private readonly keys: LimiterKeys,
    private readonly points: number,
    private readonly durationMs: number,
  ) {}

  private keysOf(key: string): [string, string] {
    return [this.keys.counts + key, this.keys.windows + key];
  }

  async consume(key: string, points = 1): Promise<Consumed> {
    const [spent, ttl, window] = (await this.client.eval(
      CONSUME_WINDOW,
      2,
      ...this.keysOf(key),
      String(points),
      String(this.durationMs),
      randomBytes(12).toString('base64url'),
    )) as [number, number, string];
    const allowed = spent <= this.points;
    return { ...this.result(spent, ttl, allowed), window };
  }

  async refund(key: string, window: string, points = 1): Promise<void> {
    await this.client.eval(REFUND_WINDOW, 2, ...this.keysOf(key), String(points), window);
  }

  async peek(key: string): Promise<LimitResult> {
    const [counter] = this.keysOf(key);
    const answers = await this.client.multi().get(counter).pttl(counter).exec();
    const [spent, ttl] = (answers ?? []).map(([err, value]) => {
      if (err) throw err;
      return Number(value ?? 0);
    }) as [number, number];
    // Allowed when one more point would be: the window has not spent them all.
    return this.result(spent, ttl, spent < this.points);
  }

  async reset(key: string): Promise<void> {
    await this.client.del(...this.keysOf(key));
  }

  private result(spent: number, ttl: number, allowed: boolean): LimitResult {
    return {
      allowed,
      remaining: Math.max(0, this.points - spent),
      retryAfterMs: allowed ? 0 : Math.max(1, ttl),
    };
  }
}
