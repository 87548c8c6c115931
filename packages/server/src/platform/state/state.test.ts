import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { clearRedisPrefix, redisReachable, SERVICE_URLS } from '../../../test/support/services.js';
import { MemoryState } from './memory.js';
import { RedisState } from './redis.js';
import { describeStateContract } from './state.contract.js';

describeStateContract('MemoryState', { make: async () => new MemoryState() });

/**
 * RedisState runs the same contract against the local Redis, under a key prefix of its own that is
 * emptied afterwards. Without Redis the run is skipped with a loud notice, or fails when
 * REQUIRE_SERVICES=1 (as the cluster-mode integration suites do).
 */
const redisProblem = await redisReachable();
const requireServices = process.env.REQUIRE_SERVICES === '1';
if (redisProblem !== null && !requireServices) {
  const line = '!'.repeat(78);
  process.stderr.write(`\n${line}\n!! SKIPPING the RedisState contract run: ${redisProblem}\n${line}\n\n`);
}

const prefix = `parlor-contract:${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}:`;

if (redisProblem !== null && requireServices) {
  describe('RedisState (REQUIRE_SERVICES=1)', () => {
    it('needs a reachable Redis', () => {
      expect.fail(`REQUIRE_SERVICES=1 but ${redisProblem}`);
    });
  });
}

describeStateContract(
  'RedisState',
  {
    make: async () => {
      const state = new RedisState(SERVICE_URLS.redis, prefix);
      await state.connect();
      return state;
    },
    // Another node: its own connections under the same prefix.
    peer: async () => {
      const state = new RedisState(SERVICE_URLS.redis, prefix);
      await state.connect();
      return state;
    },
    release: () => clearRedisPrefix(prefix),
  },
  { skip: redisProblem !== null },
);

describe.skipIf(redisProblem !== null)('RedisState keys', () => {
  const raw = new Redis(SERVICE_URLS.redis, { lazyConnect: true, maxRetriesPerRequest: 1 });
  const ownPrefix = `${prefix}own:`;
  afterAll(async () => {
    await clearRedisPrefix(ownPrefix);
    raw.disconnect();
  });

  it('puts every key, limiter keys included, under its prefix with a TTL, and nothing outside it', async () => {
    await raw.connect();
    const state = new RedisState(SERVICE_URLS.redis, ownPrefix);
    await state.connect();
    try {
      await state.set('plain', 'v', 60_000);
      await state.addExpiring('set', ['m'], Date.now() + 60_000);
      await state.limiter('lim', 3, 60_000).consume('who');
      const keys = await raw.keys(`${ownPrefix}*`);
      expect(keys.sort()).toEqual(
        [`${ownPrefix}plain`, `${ownPrefix}rl:lim:who`, `${ownPrefix}rlw:lim:who`, `${ownPrefix}set`].sort(),
      );
      for (const k of keys) {
        const ttl = await raw.pttl(k);
        expect(ttl, `TTL of ${k}`).toBeGreaterThan(0);
        expect(ttl).toBeLessThanOrEqual(60_000);
      }
      expect(await raw.exists('plain', 'set', 'rl:lim:who', 'rlw:lim:who')).toBe(0);
    } finally {
      await state.close();
    }
  });

  it('publishes and subscribes on channels under its prefix', async () => {
    const listener = raw.duplicate();
    const state = new RedisState(SERVICE_URLS.redis, ownPrefix);
    await state.connect();
    try {
      const heard: [string, string][] = [];
      listener.on('message', (channel: string, message: string) => heard.push([channel, message]));
      await listener.subscribe(`${ownPrefix}news`, 'news');
      const got: string[] = [];
      await state.subscribe('news', (m) => got.push(m));
      await state.publish('news', 'from-state');
      await raw.publish(`${ownPrefix}news`, 'from-raw');
      await raw.publish('news', 'unprefixed');
      for (let i = 0; i < 200 && (heard.length < 3 || got.length < 2); i++) await sleep(10);
      expect(heard).toEqual([
        [`${ownPrefix}news`, 'from-state'],
        [`${ownPrefix}news`, 'from-raw'],
        ['news', 'unprefixed'],
      ]);
      expect(got).toEqual(['from-state', 'from-raw']);
    } finally {
      listener.disconnect();
      await state.close();
    }
  });

  it('tells subscribers when delivery stops and when it is back, and delivers again after a reconnection', async () => {
    const state = new RedisState(SERVICE_URLS.redis, ownPrefix);
    await state.connect();
    try {
      const got: string[] = [];
      const delivery: boolean[] = [];
      await state.subscribe(
        'flaky',
        (m) => got.push(m),
        (live) => delivery.push(live),
      );
      // Kill the subscriber connection from the server side, as a network drop would. Its address
      // tells it apart from other clients of the same Redis (a private field, read for this test).
      const { stream } = (state as unknown as { subscriber: Redis }).subscriber;
      const addr = `${stream.localAddress}:${stream.localPort}`;
      expect(await raw.client('KILL', 'ADDR', addr)).toBe(1);
      for (let i = 0; i < 300 && delivery.length < 2; i++) await sleep(10);
      expect(delivery).toEqual([false, true]);
      await state.publish('flaky', 'after');
      for (let i = 0; i < 200 && got.length < 1; i++) await sleep(10);
      expect(got).toEqual(['after']);
    } finally {
      await state.close();
    }
  });
});
