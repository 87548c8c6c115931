import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { type Clock, systemClock } from '../clock.js';
import { wrapLimiter } from './limiter.js';
import type { Limiter, StateStore } from './types.js';

/** Adds a member with its deadline, drops expired members, returns the live count; atomic. */
const ADD_EXPIRING = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], top[2])
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {redis.call('ZCARD', KEYS[1]), first[2]}`;

/** Redis coordination for the cluster mode; every key carries the configured prefix. */
export class RedisState implements StateStore {
  readonly kind = 'redis' as const;
  readonly client: Redis;

  constructor(
    url: string,
    private readonly prefix: string,
    private readonly clock: Clock = systemClock,
  ) {
    this.client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 3, enableOfflineQueue: true });
    // ioredis reconnects by itself; without a listener a dropped connection is an unhandled error.
    this.client.on('error', () => {});
  }

  async connect(): Promise<void> {
    await this.client.connect();
  }

  private k(key: string) {
    return this.prefix + key;
  }

  async get(key: string) {
    return this.client.get(this.k(key));
  }
  async set(key: string, value: string, ttlMs: number) {
    await this.client.set(this.k(key), value, 'PX', Math.max(1, Math.ceil(ttlMs)));
  }
  async setIfAbsent(key: string, value: string, ttlMs: number) {
    return (await this.client.set(this.k(key), value, 'PX', Math.max(1, Math.ceil(ttlMs)), 'NX')) === 'OK';
  }
  async take(key: string) {
    return this.client.getdel(this.k(key));
  }
  async del(...keys: string[]) {
    if (keys.length > 0) await this.client.del(...keys.map((k) => this.k(k)));
  }
  async addExpiring(setKey: string, member: string, expiresAtMs: number) {
    const [n, first] = (await this.client.eval(
      ADD_EXPIRING,
      1,
      this.k(setKey),
      member,
      String(expiresAtMs),
      String(this.clock.now().getTime()),
    )) as [number, string];
    return { count: Number(n), earliest: Number(first) };
  }
  async removeExpiring(setKey: string, member: string) {
    await this.client.zrem(this.k(setKey), member);
  }
  async countExpiring(setKey: string) {
    return this.client.zcount(this.k(setKey), `(${this.clock.now().getTime()}`, '+inf');
  }
  async hasExpiring(setKey: string, member: string) {
    const score = await this.client.zscore(this.k(setKey), member);
    return score !== null && Number(score) > this.clock.now().getTime();
  }
  limiter(name: string, points: number, durationMs: number): Limiter {
    const rl = new RateLimiterRedis({
      storeClient: this.client,
      keyPrefix: `${this.prefix}rl:${name}`,
      points,
      duration: durationMs / 1000,
    });
    return wrapLimiter(rl, points);
  }
  async close() {
    await this.client.quit().catch(() => this.client.disconnect());
  }
}
