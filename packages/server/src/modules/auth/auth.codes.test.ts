import { Limits } from '@parlor/protocol';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { clearRedisPrefix, redisForUnitCases, SERVICE_URLS } from '../../../test/support/services.js';
import { FakeClock, systemClock } from '../../platform/clock.js';
import type { StateStore } from '../../platform/state/index.js';
import { MemoryState } from '../../platform/state/memory.js';
import { RedisState } from '../../platform/state/redis.js';
import { makeCodeStore } from './auth.codes.js';

const identity = 'codeid:platform_a:1001';

/**
 * Runs `between` once, the first time the identity key is touched after it is armed: after a read
 * has read (before it answers) or before a compare-and-delete compares. That is another node's
 * flow landing inside this one's round trip to the store.
 */
class InterleavingState extends MemoryState {
  between: (() => Promise<void>) | null = null;
  private async fire(key: string) {
    const run = key === identity ? this.between : null;
    if (!run) return;
    this.between = null;
    await run();
  }
  override async get(key: string) {
    const value = await super.get(key);
    await this.fire(key);
    return value;
  }
  override async delIf(key: string, expected: string) {
    await this.fire(key);
    return super.delIf(key, expected);
  }
}

describe('login code store: the identity entry under concurrent issue, take and revoke', () => {
  const states: MemoryState[] = [];
  afterEach(async () => {
    for (const s of states.splice(0)) await s.close();
  });
  const store = () => {
    const clock = new FakeClock(Date.UTC(2026, 10, 25));
    const state = new MemoryState(clock);
    states.push(state);
    return { state, codes: makeCodeStore(state, clock) };
  };

  it('a take that finishes after a new code was issued leaves the new code as the identity’s one', async () => {
    const { state, codes } = store();
    const web = await codes.issue('web', 'platform_a', '1001', '203.0.113.5');
    if (!('code' in web)) throw new Error('expected a code');
    // Interleaving: the take has consumed the web code, a new bot code is issued before the
    // take's clean-up runs. The clean-up must not remove the new code's identity entry.
    const raw = await state.take(`code:web:${web.code}`);
    expect(raw).not.toBeNull();
    const bot = await codes.issue('bot', 'platform_a', '1001', null);
    if (!('code' in bot)) throw new Error('expected a code');
    expect(bot.code).not.toBe(web.code);
    await state.set(`code:web:${web.code}`, raw as string, 60_000);
    await codes.take('web', web.code, '203.0.113.5');
    expect(await codes.active('platform_a', '1001')).toMatchObject({ code: bot.code });
    // A repeated request returns that same code (one active code per identity).
    const again = await codes.issue('bot', 'platform_a', '1001', null);
    expect(again).toMatchObject({ code: bot.code });
  });

  it('a take whose clean-up is overtaken by bot/send-code (revoke, then issue) leaves the new code the identity’s one', async () => {
    const clock = new FakeClock(Date.UTC(2026, 10, 25));
    const state = new InterleavingState(clock);
    states.push(state);
    const codes = makeCodeStore(state, clock);
    const web = await codes.issue('web', 'platform_a', '1001', '203.0.113.5');
    if (!('code' in web)) throw new Error('expected a code');
    let bot: { code: string } | null = null;
    // While verify's take clears the web code's identity entry, bot/send-code revokes the same
    // web code and issues a bot code (what it does with a web code it finds).
    state.between = async () => {
      await codes.revoke(web.code, web.rec);
      const issued = await codes.issue('bot', 'platform_a', '1001', null);
      if ('code' in issued) bot = issued;
    };
    expect(await codes.take('web', web.code, '203.0.113.5')).not.toBeNull();
    expect(state.between).toBeNull();
    expect(bot).not.toBeNull();
    const botCode = (bot as unknown as { code: string }).code;
    // The bot code stays the identity's one code: a repeated request returns it (spec 5).
    expect(await codes.active('platform_a', '1001')).toMatchObject({ code: botCode });
    expect(await codes.issue('bot', 'platform_a', '1001', null)).toMatchObject({ code: botCode });
  });

  it('a join that lands after a take collected the code’s requesters leaves no pending entry for its address', async () => {
    const { state, codes } = store();
    const web = await codes.issue('web', 'platform_a', '1001', '203.0.113.5');
    if (!('code' in web)) throw new Error('expected a code');
    // Another address read the code (request) before the verify took it, and joins only after
    // the take's clean-up: nothing is left to free its slot but the join itself.
    expect(await codes.take('web', web.code, '203.0.113.5')).not.toBeNull();
    expect(await codes.join(web.code, web.rec, '198.51.100.7')).toBeNull();
    expect(await state.countExpiring('codeip:198.51.100.7')).toBe(0);
  });

  it('an identity entry naming a code that is gone is replaced by the next issue, not spun on', async () => {
    const { state, codes } = store();
    await state.set(identity, 'web:ABCDEFGH', 600_000);
    const issued = await codes.issue('web', 'platform_a', '1001', '203.0.113.5');
    if (!('code' in issued)) throw new Error('expected a code');
    expect(issued.code).not.toBe('ABCDEFGH');
    expect(await state.get(identity)).toBe(`web:${issued.code}`);
  });
});

const redisProblem = await redisForUnitCases('the RedisState cases of the pending web codes');
const redisPrefix = `parlor-codes-unit:${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}:`;
const stores: [string, (() => Promise<StateStore>) | null][] = [
  ['MemoryState', async () => new MemoryState()],
  [
    'RedisState',
    redisProblem === null
      ? async () => {
          const state = new RedisState(SERVICE_URLS.redis, redisPrefix);
          await state.connect();
          return state;
        }
      : null,
  ],
];

describe.each(stores)('pending web codes per address on %s', (_name, make) => {
  let state: StateStore | undefined;
  afterEach(async () => {
    await state?.close();
    state = undefined;
  });
  afterAll(async () => {
    if (make && redisProblem === null) await clearRedisPrefix(redisPrefix);
  });
  let n = 0;
  const next = () => {
    n += 1;
    return n;
  };
  const address = () => `198.51.${next() >> 8}.${n & 255}`;
  const identity = () => `${Date.now()}${next()}`;

  it.skipIf(!make)(
    `with ${Limits.PENDING_WEB_CODES_PER_IP - 1} pending, concurrent issues for one identity share one code, counted once`,
    async () => {
      state = await (make as () => Promise<StateStore>)();
      const codes = makeCodeStore(state, systemClock);
      for (let round = 0; round < 10; round++) {
        const ip = address();
        for (let i = 0; i < Limits.PENDING_WEB_CODES_PER_IP - 1; i++)
          expect(await codes.issue('web', 'platform_a', identity(), ip)).toHaveProperty('code');
        const id = identity();
        const answers = await Promise.all([0, 1, 2].map(() => codes.issue('web', 'platform_a', id, ip)));
        const got = answers.map((a) => ('code' in a ? a.code : 'limited'));
        expect(got[0]).not.toBe('limited');
        expect(got).toEqual(got.map(() => got[0]));
        expect(await state.countExpiring(`codeip:${ip}`)).toBe(Limits.PENDING_WEB_CODES_PER_IP);
        // The address is full now: a code for another identity is refused and leaves nothing behind.
        const other = identity();
        expect(await codes.issue('web', 'platform_a', other, ip)).toHaveProperty('limited');
        expect(await codes.active('platform_a', other)).toBeNull();
      }
    },
  );

  it.skipIf(!make)(
    'of concurrent issues for different identities from one address, only as many as it may have pending get a code',
    async () => {
      state = await (make as () => Promise<StateStore>)();
      const codes = makeCodeStore(state, systemClock);
      const ip = address();
      const ids = Array.from({ length: 12 }, () => identity());
      const answers = await Promise.all(ids.map((id) => codes.issue('web', 'platform_a', id, ip)));
      expect(answers.filter((a) => 'code' in a)).toHaveLength(Limits.PENDING_WEB_CODES_PER_IP);
      expect(await state.countExpiring(`codeip:${ip}`)).toBe(Limits.PENDING_WEB_CODES_PER_IP);
      const refused = ids.filter((_, i) => 'limited' in (answers[i] as object));
      for (const id of refused) expect(await codes.active('platform_a', id)).toBeNull();
    },
  );
});
