import { BotType, Limits, LOGIN_CODE_ALPHABET } from '@parlor/protocol';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { clearRedisPrefix, redisForUnitCases, SERVICE_URLS } from '../../../test/support/services.js';
import { FakeClock, systemClock } from '../../platform/clock.js';
import type { AppError } from '../../platform/errors.js';
import type { Limiter, StateStore } from '../../platform/state/index.js';
import { MemoryState } from '../../platform/state/memory.js';
import { RedisState } from '../../platform/state/redis.js';
import type { UsersStore } from '../users/users.store.js';
import { type CodeRecord, makeCodeStore } from './auth.codes.js';
import { type AuthDeps, type CallingBot, makeAuthService, STRANGER_GRACE_MS } from './auth.service.js';

/** The service with the users store faked: `dead` ids are handed out batch by batch. */
function setup(dead: number) {
  const clock = new FakeClock(Date.UTC(2026, 5, 1));
  const calls: { cutoff: Date; limit: number }[] = [];
  let left = Array.from({ length: dead }, (_, i) => i + 1);
  const users = {
    removeDeadStrangers: async (cutoff: Date, limit: number) => {
      calls.push({ cutoff, limit });
      const batch = left.slice(0, limit);
      left = left.slice(limit);
      return batch;
    },
  } as unknown as UsersStore;
  const deps = { clock, state: new MemoryState(clock), users } as unknown as AuthDeps;
  return { auth: makeAuthService(deps), calls, clock };
}

describe('sweepStrangers', () => {
  it('asks the store for accounts whose sessions ended before now minus the grace period', async () => {
    const { auth, calls, clock } = setup(0);
    expect(await auth.sweepStrangers()).toEqual([]);
    expect(calls).toEqual([{ cutoff: new Date(clock.now().getTime() - STRANGER_GRACE_MS), limit: 500 }]);
  });

  it('runs batches until one comes back short and answers every deleted id', async () => {
    const { auth, calls } = setup(7);
    expect(await auth.sweepStrangers(3)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(calls).toHaveLength(3);
  });

  it('stops after 20 full batches (the next run takes the rest)', async () => {
    const { auth, calls } = setup(100);
    expect(await auth.sweepStrangers(2)).toHaveLength(40);
    expect(calls).toHaveLength(20);
  });
});

/**
 * A store where a web request for identity 1001, from another address, wins the identity each time
 * an identity entry is removed (a revoke's compare-and-delete): requests arriving without pause.
 */
class RacingRequests extends MemoryState {
  request: (() => Promise<unknown>) | null = null;
  override async delIf(key: string, expected: string) {
    const deleted = await super.delIf(key, expected);
    const run = key === 'codeid:platform_a:1001' ? this.request : null;
    if (run) {
      this.request = null;
      await run();
      this.request = run;
    }
    return deleted;
  }
}

describe('botSendCode', () => {
  it('answers a bot code, which verifies from any address, even when web requests win the identity back again and again', async () => {
    const clock = new FakeClock(Date.UTC(2026, 5, 1));
    const state = new RacingRequests(clock);
    const codes = makeCodeStore(state, clock);
    const user = { id: 7, state: 0, botLoginsSinceWeb: 0 };
    const users = { byIdentity: async () => user } as unknown as UsersStore;
    const auth = makeAuthService({ clock, state, codes, users } as unknown as AuthDeps);
    const web = await codes.issue('web', 'platform_a', '1001', '203.0.113.5');
    if (!('code' in web)) throw new Error('expected a code');
    state.request = () => codes.issue('web', 'platform_a', '1001', '198.51.100.9');
    const official = { id: 1, type: BotType.OFFICIAL } as CallingBot;

    const sent = await auth.botSendCode(official, 'platform_a', '1001');
    state.request = null;
    const held = await codes.active('platform_a', '1001');
    expect(held).toMatchObject({ code: sent.code, rec: { pool: 'bot', ip: null } });
    expect(await codes.usableFrom(sent.code, (held as { rec: CodeRecord }).rec, '192.0.2.1')).toBe(true);
    await state.close();
  });
});

/** A store that answers each call a turn of the event loop later, as one over the network does. */
function yielding(inner: StateStore): StateStore {
  const later = async <T>(p: Promise<T>): Promise<T> => {
    const value = await p;
    await new Promise((resolve) => setImmediate(resolve));
    return value;
  };
  const wrap = <T extends object>(target: T): T =>
    new Proxy(target, {
      get(t, prop) {
        const v = Reflect.get(t, prop) as unknown;
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) => {
          const r = (v as (...a: unknown[]) => unknown).apply(t, args);
          if (prop === 'limiter') return wrap(r as Limiter);
          return r instanceof Promise ? later(r) : r;
        };
      },
    });
  return wrap(inner);
}

const redisProblem = await redisForUnitCases('the RedisState cases of verify');
const redisPrefix = `parlor-auth-unit:${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}:`;
let prefixes = 0;
const stores: [string, (() => Promise<StateStore>) | null][] = [
  ['MemoryState', async () => new MemoryState()],
  ['MemoryState answering a turn later', async () => yielding(new MemoryState())],
  [
    'RedisState',
    redisProblem === null
      ? async () => {
          prefixes += 1;
          const state = new RedisState(SERVICE_URLS.redis, `${redisPrefix}${prefixes}:`);
          await state.connect();
          return state;
        }
      : null,
  ],
];

describe.each(stores)('verify on %s', (_name, make) => {
  let state: StateStore;
  let checked: number;
  beforeEach(async () => {
    if (!make) return;
    state = await make();
    checked = 0;
  });
  afterEach(async () => {
    await state?.close();
  });
  afterAll(async () => {
    if (make && redisProblem === null) await clearRedisPrefix(redisPrefix);
  });

  /** The service over `state`, counting the codes it looks up (one per checked attempt). */
  const service = () => {
    const codes = makeCodeStore(state, systemClock);
    const read = codes.read;
    codes.read = async (pool, code) => {
      if (pool === 'web') checked += 1;
      return read(pool, code);
    };
    return makeAuthService({ clock: systemClock, state, codes } as unknown as AuthDeps);
  };
  /** The answers' error codes, in order. */
  const outcomes = (results: PromiseSettledResult<unknown>[]) =>
    results.map((r) => (r.status === 'rejected' ? (r.reason as AppError).code : 'ok'));
  const guess = (auth: ReturnType<typeof service>, ip: string, i = 0) =>
    auth.verify(`ZZZZZZ${LOGIN_CODE_ALPHABET[i % LOGIN_CODE_ALPHABET.length]}Y`, ip, 'test');
  const count = (list: string[], code: string) => list.filter((c) => c === code).length;

  it.skipIf(!make)(
    `checks at most ${Limits.VERIFY_FAILURES_PER_IP} of 50 parallel wrong guesses from one address; the rest answer 429`,
    async () => {
      const auth = service();
      const results = outcomes(
        await Promise.allSettled(Array.from({ length: 50 }, (_, i) => guess(auth, '203.0.113.5', i))),
      );
      expect(count(results, 'ERR_INVALID_CODE')).toBe(Limits.VERIFY_FAILURES_PER_IP);
      expect(count(results, 'ERR_RATE_LIMITED')).toBe(50 - Limits.VERIFY_FAILURES_PER_IP);
      expect(checked).toBe(Limits.VERIFY_FAILURES_PER_IP);
    },
  );

  it.skipIf(!make)(
    'checks no more guesses from addresses that failed before than the service-wide budget has left',
    async () => {
      const auth = service();
      const perIp = Limits.VERIFY_FAILURES_PER_IP;
      const full = Math.floor((Limits.VERIFY_FAILURES_GLOBAL - 10) / perIp);
      for (let a = 0; a < full; a++) {
        const filled = outcomes(
          await Promise.allSettled(Array.from({ length: perIp }, (_, i) => guess(auth, `198.18.1.${a}`, i))),
        );
        expect(filled).toEqual(Array.from({ length: perIp }, () => 'ERR_INVALID_CODE'));
      }
      // Five addresses fail once each: the budget has 300 - 290 - 5 = 5 failures left.
      const dirty = Array.from({ length: 5 }, (_, a) => `198.18.2.${a}`);
      for (const ip of dirty) await expect(guess(auth, ip)).rejects.toMatchObject({ code: 'ERR_INVALID_CODE' });
      const left = Limits.VERIFY_FAILURES_GLOBAL - full * perIp - dirty.length;
      expect(left).toBe(5);
      // Every one of those failures was a checked guess.
      expect(checked).toBe(full * perIp + dirty.length);
      checked = 0;
      const results = outcomes(
        await Promise.allSettled(dirty.flatMap((ip) => Array.from({ length: 4 }, (_, i) => guess(auth, ip, i)))),
      );
      expect(count(results, 'ERR_INVALID_CODE')).toBe(left);
      expect(count(results, 'ERR_RATE_LIMITED')).toBe(20 - left);
      expect(checked).toBe(left);
      // An address with no failure is still checked once the budget is gone.
      expect(outcomes(await Promise.allSettled([guess(auth, '198.18.3.1')]))).toEqual(['ERR_INVALID_CODE']);
    },
  );
});
