import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { StateStore } from './types.js';

/** Makes a store for one test; `release` (optional) runs once after the whole suite. */
export interface StateHarness {
  make(): Promise<StateStore>;
  /**
   * A store as another node sees the same coordination (Redis: another connection, same prefix).
   * Without it the suite uses `state` itself (one process is one node in memory).
   */
  peer?(of: StateStore): Promise<StateStore>;
  release?(): Promise<void>;
}

/** Short real TTLs: long enough to read back before expiry on a busy machine, short enough to wait out. */
const TTL_MS = 80;
const PAST_TTL_MS = 200;
/** Long enough never to expire during a test. */
const LONG_MS = 60_000;

/** How long a published message may take to arrive (Redis delivers asynchronously). */
const DELIVERY_MS = 2_000;

/** Resolves once `done()` holds, failing after DELIVERY_MS. */
async function until(done: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + DELIVERY_MS;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

let keyCounter = 0;
/** A key no other test (nor an earlier run sharing the store) uses. */
function freshKey(label: string): string {
  keyCounter += 1;
  return `contract:${label}:${process.pid}:${Date.now().toString(36)}:${keyCounter}`;
}

/**
 * The coordination port's contract (types.ts): every StateStore implementation runs this suite
 * (state.test.ts runs it against MemoryState and RedisState). Times are real, so TTL expiry is
 * exercised with short TTLs and waits.
 */
export function describeStateContract(name: string, harness: StateHarness, opts: { skip?: boolean } = {}): void {
  describe.skipIf(opts.skip === true)(`StateStore contract: ${name}`, () => {
    let state: StateStore;
    beforeEach(async () => {
      state = await harness.make();
    });
    afterEach(async () => {
      await state?.close();
    });
    afterAll(async () => {
      await harness.release?.();
    });

    describe('get / set', () => {
      it('reads back what was set, and null for a key never set', async () => {
        const k = freshKey('get');
        await state.set(k, 'value-1', LONG_MS);
        expect(await state.get(k)).toBe('value-1');
        expect(await state.get(freshKey('missing'))).toBeNull();
      });

      it('keeps values exactly, including unicode, JSON and the empty string', async () => {
        const values = ['', 'päß ✓ 日本 🎉', JSON.stringify({ a: [1, 'two', null] }), 'x'.repeat(10_000)];
        for (const v of values) {
          const k = freshKey('exact');
          await state.set(k, v, LONG_MS);
          expect(await state.get(k)).toBe(v);
        }
      });

      it('overwrites a value and its TTL', async () => {
        const k = freshKey('overwrite');
        await state.set(k, 'old', TTL_MS);
        await state.set(k, 'new', LONG_MS);
        await sleep(PAST_TTL_MS);
        expect(await state.get(k)).toBe('new');
      });

      it(`forgets a value after its TTL (${TTL_MS} ms)`, async () => {
        const k = freshKey('ttl');
        await state.set(k, 'short-lived', TTL_MS);
        expect(await state.get(k)).toBe('short-lived');
        await sleep(PAST_TTL_MS);
        expect(await state.get(k)).toBeNull();
      });

      it('keeps separate keys separate', async () => {
        const [a, b] = [freshKey('a'), freshKey('b')];
        await state.set(a, 'A', LONG_MS);
        await state.set(b, 'B', LONG_MS);
        expect([await state.get(a), await state.get(b)]).toEqual(['A', 'B']);
      });
    });

    describe('setIfAbsent', () => {
      it('sets only the first time: later calls answer false and leave the value', async () => {
        const k = freshKey('nx');
        expect(await state.setIfAbsent(k, 'first', LONG_MS)).toBe(true);
        expect(await state.setIfAbsent(k, 'second', LONG_MS)).toBe(false);
        expect(await state.get(k)).toBe('first');
      });

      it('does not set over a value written by set', async () => {
        const k = freshKey('nx-over-set');
        await state.set(k, 'existing', LONG_MS);
        expect(await state.setIfAbsent(k, 'other', LONG_MS)).toBe(false);
        expect(await state.get(k)).toBe('existing');
      });

      it('sets again once the earlier value has expired', async () => {
        const k = freshKey('nx-expired');
        expect(await state.setIfAbsent(k, 'first', TTL_MS)).toBe(true);
        await sleep(PAST_TTL_MS);
        expect(await state.setIfAbsent(k, 'second', LONG_MS)).toBe(true);
        expect(await state.get(k)).toBe('second');
      });

      it('gives its TTL to the value it sets', async () => {
        const k = freshKey('nx-ttl');
        expect(await state.setIfAbsent(k, 'v', TTL_MS)).toBe(true);
        await sleep(PAST_TTL_MS);
        expect(await state.get(k)).toBeNull();
      });

      it('of 20 concurrent calls, exactly one wins, and its value is the one kept', async () => {
        const k = freshKey('nx-race');
        const results = await Promise.all(
          Array.from({ length: 20 }, (_, i) => state.setIfAbsent(k, `caller-${i}`, LONG_MS)),
        );
        expect(results.filter(Boolean)).toHaveLength(1);
        expect(await state.get(k)).toBe(`caller-${results.indexOf(true)}`);
      });
    });

    describe('delIf / replaceIf (compare-and-delete, compare-and-set)', () => {
      it('delIf deletes only while the key holds the expected value', async () => {
        const k = freshKey('delif');
        await state.set(k, 'mine', LONG_MS);
        expect(await state.delIf(k, 'theirs')).toBe(false);
        expect(await state.get(k)).toBe('mine');
        expect(await state.delIf(k, 'mine')).toBe(true);
        expect(await state.get(k)).toBeNull();
        expect(await state.delIf(k, 'mine')).toBe(false);
      });

      it('delIf leaves a value that replaced the expected one, and finds an expired key gone', async () => {
        const k = freshKey('delif-late');
        await state.set(k, 'old', LONG_MS);
        await state.set(k, 'new', LONG_MS);
        expect(await state.delIf(k, 'old')).toBe(false);
        expect(await state.get(k)).toBe('new');
        const gone = freshKey('delif-expired');
        await state.set(gone, 'v', TTL_MS);
        await sleep(PAST_TTL_MS);
        expect(await state.delIf(gone, 'v')).toBe(false);
      });

      it('replaceIf sets value and lifetime only over the expected value, never over an absent key', async () => {
        const k = freshKey('replaceif');
        expect(await state.replaceIf(k, 'x', 'y', LONG_MS)).toBe(false);
        expect(await state.get(k)).toBeNull();
        await state.set(k, 'v1', TTL_MS);
        expect(await state.replaceIf(k, 'other', 'v2', LONG_MS)).toBe(false);
        expect(await state.replaceIf(k, 'v1', 'v2', LONG_MS)).toBe(true);
        // The new lifetime holds: the first one (TTL_MS) has passed.
        await sleep(PAST_TTL_MS);
        expect(await state.get(k)).toBe('v2');
      });

      it('is atomic: of 20 concurrent replaceIf from one value, exactly one wins', async () => {
        const k = freshKey('replaceif-race');
        await state.set(k, 'start', LONG_MS);
        const results = await Promise.all(
          Array.from({ length: 20 }, (_, i) => state.replaceIf(k, 'start', `caller-${i}`, LONG_MS)),
        );
        expect(results.filter(Boolean)).toHaveLength(1);
        expect(await state.get(k)).toBe(`caller-${results.indexOf(true)}`);
      });
    });

    describe('take', () => {
      it('returns the value once and deletes it', async () => {
        const k = freshKey('take');
        await state.set(k, 'once', LONG_MS);
        expect(await state.take(k)).toBe('once');
        expect(await state.take(k)).toBeNull();
        expect(await state.get(k)).toBeNull();
      });

      it('returns null for a missing key and for an expired one', async () => {
        expect(await state.take(freshKey('take-missing'))).toBeNull();
        const k = freshKey('take-expired');
        await state.set(k, 'gone', TTL_MS);
        await sleep(PAST_TTL_MS);
        expect(await state.take(k)).toBeNull();
      });

      it('is atomic: of 20 concurrent takes exactly one gets the value', async () => {
        const k = freshKey('take-race');
        await state.set(k, 'prize', LONG_MS);
        const got = await Promise.all(Array.from({ length: 20 }, () => state.take(k)));
        expect(got.filter((v) => v !== null)).toEqual(['prize']);
        expect(await state.get(k)).toBeNull();
      });

      it('frees the key for setIfAbsent', async () => {
        const k = freshKey('take-then-nx');
        await state.set(k, 'a', LONG_MS);
        await state.take(k);
        expect(await state.setIfAbsent(k, 'b', LONG_MS)).toBe(true);
      });
    });

    describe('del', () => {
      it('deletes several keys at once and leaves the others', async () => {
        const [a, b, c] = [freshKey('del-a'), freshKey('del-b'), freshKey('del-c')];
        for (const k of [a, b, c]) await state.set(k, k, LONG_MS);
        await state.del(a, b);
        expect([await state.get(a), await state.get(b), await state.get(c)]).toEqual([null, null, c]);
      });

      it('accepts missing keys and an empty list', async () => {
        await expect(state.del(freshKey('del-missing'))).resolves.toBeUndefined();
        await expect(state.del()).resolves.toBeUndefined();
      });

      it('frees the key for setIfAbsent', async () => {
        const k = freshKey('del-then-nx');
        await state.set(k, 'a', LONG_MS);
        await state.del(k);
        expect(await state.setIfAbsent(k, 'b', LONG_MS)).toBe(true);
        expect(await state.get(k)).toBe('b');
      });
    });

    describe('expiring sets', () => {
      it('counts members and reports the earliest deadline as members come', async () => {
        const s = freshKey('set');
        const now = Date.now();
        expect(await state.addExpiring(s, ['a'], now + 30_000)).toEqual({ count: 1, earliest: now + 30_000 });
        expect(await state.addExpiring(s, ['b'], now + 10_000)).toEqual({ count: 2, earliest: now + 10_000 });
        expect(await state.addExpiring(s, ['c'], now + 50_000)).toEqual({ count: 3, earliest: now + 10_000 });
        expect(await state.countExpiring(s)).toBe(3);
      });

      it('counts a member added twice once, with its latest deadline', async () => {
        const s = freshKey('set-readd');
        const now = Date.now();
        await state.addExpiring(s, ['a'], now + 10_000);
        await state.addExpiring(s, ['b'], now + 20_000);
        expect(await state.addExpiring(s, ['a'], now + 40_000)).toEqual({ count: 2, earliest: now + 20_000 });
        expect(await state.countExpiring(s)).toBe(2);
      });

      it('removes members, and ignores removing one that is not there', async () => {
        const s = freshKey('set-remove');
        const now = Date.now();
        await state.addExpiring(s, ['a'], now + 10_000);
        await state.addExpiring(s, ['b'], now + 20_000);
        await state.removeExpiring(s, 'a');
        await state.removeExpiring(s, 'never-added');
        expect(await state.countExpiring(s)).toBe(1);
        expect(await state.addExpiring(s, ['c'], now + 30_000)).toEqual({ count: 2, earliest: now + 20_000 });
      });

      it('counts 0 for a set never used, and accepts removal from it', async () => {
        const s = freshKey('set-empty');
        expect(await state.countExpiring(s)).toBe(0);
        await expect(state.removeExpiring(s, 'x')).resolves.toBeUndefined();
      });

      it('drops members whose deadline has passed, from the count and from the earliest deadline', async () => {
        const s = freshKey('set-expire');
        const now = Date.now();
        await state.addExpiring(s, ['short'], now + TTL_MS);
        await state.addExpiring(s, ['long'], now + 20_000);
        expect(await state.countExpiring(s)).toBe(2);
        await sleep(PAST_TTL_MS);
        expect(await state.countExpiring(s)).toBe(1);
        expect(await state.addExpiring(s, ['new'], now + 30_000)).toEqual({ count: 2, earliest: now + 20_000 });
      });

      it('forgets a whole set once every deadline has passed', async () => {
        const s = freshKey('set-all-expire');
        const now = Date.now();
        await state.addExpiring(s, ['a'], now + TTL_MS);
        await state.addExpiring(s, ['b'], now + TTL_MS);
        await sleep(PAST_TTL_MS);
        expect(await state.countExpiring(s)).toBe(0);
        expect(await state.addExpiring(s, ['c'], now + 20_000)).toEqual({ count: 1, earliest: now + 20_000 });
      });

      it('tells whether a member is present and not expired', async () => {
        const s = freshKey('set-has');
        const now = Date.now();
        await state.addExpiring(s, ['live'], now + 20_000);
        await state.addExpiring(s, ['short'], now + TTL_MS);
        await state.addExpiring(s, ['removed'], now + 20_000);
        await state.removeExpiring(s, 'removed');
        expect(await state.hasExpiring(s, 'live')).toBe(true);
        expect(await state.hasExpiring(s, 'short')).toBe(true);
        expect(await state.hasExpiring(s, 'removed')).toBe(false);
        expect(await state.hasExpiring(s, 'never-added')).toBe(false);
        expect(await state.hasExpiring(freshKey('set-has-none'), 'live')).toBe(false);
        await sleep(PAST_TTL_MS);
        expect(await state.hasExpiring(s, 'short')).toBe(false);
        expect(await state.hasExpiring(s, 'live')).toBe(true);
      });

      it('keeps separate sets separate', async () => {
        const [s1, s2] = [freshKey('set-1'), freshKey('set-2')];
        const now = Date.now();
        await state.addExpiring(s1, ['m'], now + 10_000);
        await state.addExpiring(s1, ['n'], now + 10_000);
        await state.addExpiring(s2, ['m'], now + 10_000);
        expect([await state.countExpiring(s1), await state.countExpiring(s2)]).toEqual([2, 1]);
      });

      it('adds 2,500 members in one call (more than one script call on Redis), and each keeps its own deadline', async () => {
        const s = freshKey('set-many');
        const now = Date.now();
        await state.addExpiring(s, ['early'], now + 5_000);
        const many = Array.from({ length: 2_500 }, (_, i) => `u${i}`);
        expect(await state.addExpiring(s, many, now + 30_000)).toEqual({ count: 2_501, earliest: now + 5_000 });
        expect(await state.hasExpiring(s, 'u2499')).toBe(true);
        expect(await state.addExpiring(s, [], now + 60_000)).toEqual({ count: 2_501, earliest: now + 5_000 });
      });

      it('takeExpiring answers the live members and deletes the set; a set never used answers none', async () => {
        const s = freshKey('set-take');
        const now = Date.now();
        await state.addExpiring(s, ['a', 'b'], now + 20_000);
        await state.addExpiring(s, ['short'], now + TTL_MS);
        await state.addExpiring(s, ['removed'], now + 20_000);
        await state.removeExpiring(s, 'removed');
        await sleep(PAST_TTL_MS);
        expect((await state.takeExpiring(s)).sort()).toEqual(['a', 'b']);
        expect(await state.countExpiring(s)).toBe(0);
        expect(await state.hasExpiring(s, 'a')).toBe(false);
        expect(await state.takeExpiring(s)).toEqual([]);
        expect(await state.takeExpiring(freshKey('set-take-none'))).toEqual([]);
        expect(await state.addExpiring(s, ['c'], now + 30_000)).toEqual({ count: 1, earliest: now + 30_000 });
      });

      it('takeExpiring is atomic: of 20 concurrent takes exactly one gets the members', async () => {
        const s = freshKey('set-take-race');
        await state.addExpiring(s, ['m1', 'm2', 'm3'], Date.now() + 20_000);
        const answers = await Promise.all(Array.from({ length: 20 }, () => state.takeExpiring(s)));
        expect(answers.filter((a) => a.length > 0).map((a) => a.sort())).toEqual([['m1', 'm2', 'm3']]);
      });

      it('counts every one of 20 concurrent adds', async () => {
        const s = freshKey('set-race');
        const now = Date.now();
        await Promise.all(Array.from({ length: 20 }, (_, i) => state.addExpiring(s, [`m${i}`], now + 10_000 + i)));
        expect(await state.countExpiring(s)).toBe(20);
        expect(await state.addExpiring(s, ['last'], now + 60_000)).toEqual({ count: 21, earliest: now + 10_000 });
      });
    });

    describe('setIfAbsentCounted', () => {
      const counted = (setKey: string, member: string, max = 2) => ({
        setKey,
        member,
        expiresAtMs: Date.now() + LONG_MS,
        max,
      });

      it('sets the key and adds the member while the set has room', async () => {
        const [k, set] = [freshKey('sic'), freshKey('sic-set')];
        expect(await state.setIfAbsentCounted(k, 'v1', LONG_MS, counted(set, 'm1'))).toBe('set');
        expect(await state.get(k)).toBe('v1');
        expect(await state.hasExpiring(set, 'm1')).toBe(true);
        expect(await state.countExpiring(set)).toBe(1);
      });

      it('answers present over an existing key and changes nothing, even with the set full', async () => {
        const [k, set] = [freshKey('sic-present'), freshKey('sic-present-set')];
        await state.set(k, 'first', LONG_MS);
        expect(await state.setIfAbsentCounted(k, 'second', LONG_MS, counted(set, 'm1'))).toBe('present');
        expect(await state.get(k)).toBe('first');
        expect(await state.countExpiring(set)).toBe(0);
        await state.addExpiring(set, ['a', 'b'], Date.now() + LONG_MS);
        expect(await state.setIfAbsentCounted(k, 'second', LONG_MS, counted(set, 'm1'))).toBe('present');
        expect(await state.countExpiring(set)).toBe(2);
      });

      it('answers the earliest deadline of a full set and changes nothing; a member already in it fits', async () => {
        const [k, set] = [freshKey('sic-full'), freshKey('sic-full-set')];
        const early = Date.now() + LONG_MS;
        await state.addExpiring(set, ['a'], early);
        await state.addExpiring(set, ['b'], early + 1_000);
        expect(await state.setIfAbsentCounted(k, 'v', LONG_MS, counted(set, 'c'))).toEqual({ full: early });
        expect(await state.get(k)).toBeNull();
        expect(await state.hasExpiring(set, 'c')).toBe(false);
        expect(await state.setIfAbsentCounted(k, 'v', LONG_MS, counted(set, 'b'))).toBe('set');
        expect(await state.countExpiring(set)).toBe(2);
      });

      it('does not count members whose deadline has passed', async () => {
        const [k, set] = [freshKey('sic-expired'), freshKey('sic-expired-set')];
        await state.addExpiring(set, ['a', 'b'], Date.now() + TTL_MS);
        await sleep(PAST_TTL_MS);
        expect(await state.setIfAbsentCounted(k, 'v', LONG_MS, counted(set, 'c'))).toBe('set');
        expect(await state.countExpiring(set)).toBe(1);
      });

      it('is atomic: of 20 concurrent calls for one key exactly one sets it, the rest find it present', async () => {
        const [k, set] = [freshKey('sic-race'), freshKey('sic-race-set')];
        await state.addExpiring(set, ['a'], Date.now() + LONG_MS);
        const answers = await Promise.all(
          Array.from({ length: 20 }, (_, i) => state.setIfAbsentCounted(k, `v${i}`, LONG_MS, counted(set, `m${i}`))),
        );
        expect(answers.filter((a) => a === 'set')).toHaveLength(1);
        expect(answers.filter((a) => a === 'present')).toHaveLength(19);
        expect(await state.countExpiring(set)).toBe(2);
      });

      it('is atomic: of 20 concurrent calls for different keys, only as many as the set has room for set theirs', async () => {
        const set = freshKey('sic-room-set');
        const keys = Array.from({ length: 20 }, () => freshKey('sic-room'));
        const answers = await Promise.all(
          keys.map((k, i) => state.setIfAbsentCounted(k, 'v', LONG_MS, counted(set, `m${i}`, 5))),
        );
        expect(answers.filter((a) => a === 'set')).toHaveLength(5);
        expect(answers.filter((a) => typeof a === 'object')).toHaveLength(15);
        expect(await state.countExpiring(set)).toBe(5);
      });
    });

    describe('limiter', () => {
      it('allows N points and refuses the N+1st with a retry delay within the window', async () => {
        const limiter = state.limiter(freshKey('lim'), 3, 10_000);
        const key = 'client-1';
        const allowed = [];
        for (let i = 0; i < 3; i++) allowed.push(await limiter.consume(key));
        expect(allowed.map((r) => [r.allowed, r.remaining, r.retryAfterMs])).toEqual([
          [true, 2, 0],
          [true, 1, 0],
          [true, 0, 0],
        ]);
        const refused = await limiter.consume(key);
        expect(refused.allowed).toBe(false);
        expect(refused.remaining).toBe(0);
        expect(refused.retryAfterMs).toBeGreaterThan(0);
        expect(refused.retryAfterMs).toBeLessThanOrEqual(10_000);
      });

      it('spends several points at once', async () => {
        const limiter = state.limiter(freshKey('lim-n'), 5, 10_000);
        expect(await limiter.consume('k', 3)).toMatchObject({ allowed: true, remaining: 2 });
        expect((await limiter.consume('k', 3)).allowed).toBe(false);
      });

      it('refund gives back points spent in the window', async () => {
        const limiter = state.limiter(freshKey('lim-refund'), 2, 10_000);
        await limiter.consume('k');
        const { window } = await limiter.consume('k');
        expect((await limiter.consume('k')).window).toBe(window);
        await limiter.refund('k', window);
        await limiter.refund('k', window);
        expect(await limiter.consume('k')).toMatchObject({ allowed: true, remaining: 0 });
        expect((await limiter.consume('k')).allowed).toBe(false);
      });

      it('refund gives back nothing once its window has ended, nor more than the window spent', async () => {
        const limiter = state.limiter(freshKey('lim-refund-ended'), 2, 1_000);
        await limiter.consume('k');
        const spent = await limiter.consume('k');
        expect(spent).toMatchObject({ allowed: true, remaining: 0 });
        // Wait the window out: peek sees the full allowance once it has ended (Redis expired its key).
        const deadline = Date.now() + 3_000;
        while ((await limiter.peek('k')).remaining < 2) {
          if (Date.now() > deadline) throw new Error('the 1 s window never ended');
          await sleep(50);
        }
        // A give-back of a point spent in the ended window: the next window must not get it.
        await limiter.refund('k', spent.window);
        expect(await limiter.consume('k', 2)).toMatchObject({ allowed: true, remaining: 0 });
        expect((await limiter.consume('k')).allowed).toBe(false);
        // Within a window, more refunds than points spent leave its count at nothing spent, no lower.
        const other = state.limiter(freshKey('lim-refund-excess'), 2, 10_000);
        const first = await other.consume('k');
        await other.refund('k', first.window, 5);
        expect(await other.consume('k', 2)).toMatchObject({ allowed: true, remaining: 0 });
        expect((await other.consume('k')).allowed).toBe(false);
      });

      it('a late give-back for an ended window credits nothing to the window the key opened since', async () => {
        const limiter = state.limiter(freshKey('lim-refund-late'), 2, 1_000);
        const early = await limiter.consume('k');
        const deadline = Date.now() + 3_000;
        while ((await limiter.peek('k')).remaining < 2) {
          if (Date.now() > deadline) throw new Error('the 1 s window never ended');
          await sleep(50);
        }
        // Another request opens the next window and spends in it, one point short of its limit …
        const later = await limiter.consume('k');
        expect(later).toMatchObject({ allowed: true, remaining: 1 });
        expect(later.window).not.toBe(early.window);
        // … then the first request gives back its point, spent in the window that has ended.
        await limiter.refund('k', early.window);
        expect(await limiter.consume('k')).toMatchObject({ allowed: true, remaining: 0 });
        expect((await limiter.consume('k')).allowed).toBe(false);
        // The open window's own give-back still comes back.
        await limiter.refund('k', later.window, 2);
        expect(await limiter.consume('k')).toMatchObject({ allowed: true, remaining: 0 });
      });

      it('peek reads without spending', async () => {
        const limiter = state.limiter(freshKey('lim-peek'), 2, 10_000);
        expect(await limiter.peek('k')).toEqual({ allowed: true, remaining: 2, retryAfterMs: 0 });
        for (let i = 0; i < 5; i++) await limiter.peek('k');
        expect(await limiter.consume('k')).toMatchObject({ allowed: true, remaining: 1 });
        expect(await limiter.peek('k')).toMatchObject({ allowed: true, remaining: 1 });
        expect(await limiter.consume('k')).toMatchObject({ allowed: true, remaining: 0 });
        const exhausted = await limiter.peek('k');
        expect(exhausted.allowed).toBe(false);
        expect(exhausted.remaining).toBe(0);
        expect(exhausted.retryAfterMs).toBeGreaterThan(0);
      });

      it('reset gives the key its full allowance again', async () => {
        const limiter = state.limiter(freshKey('lim-reset'), 2, 10_000);
        await limiter.consume('k');
        await limiter.consume('k');
        expect((await limiter.consume('k')).allowed).toBe(false);
        await limiter.reset('k');
        expect(await limiter.peek('k')).toEqual({ allowed: true, remaining: 2, retryAfterMs: 0 });
        expect(await limiter.consume('k')).toMatchObject({ allowed: true, remaining: 1 });
      });

      it('keeps keys independent', async () => {
        const limiter = state.limiter(freshKey('lim-keys'), 1, 10_000);
        expect((await limiter.consume('a')).allowed).toBe(true);
        expect((await limiter.consume('a')).allowed).toBe(false);
        expect((await limiter.consume('b')).allowed).toBe(true);
        await limiter.reset('b');
        expect((await limiter.consume('a')).allowed).toBe(false);
      });

      it('keeps limiters of different names independent for the same key', async () => {
        const one = state.limiter(freshKey('lim-one'), 1, 10_000);
        const two = state.limiter(freshKey('lim-two'), 1, 10_000);
        expect((await one.consume('k')).allowed).toBe(true);
        expect((await one.consume('k')).allowed).toBe(false);
        expect((await two.consume('k')).allowed).toBe(true);
      });

      it('shares one allowance between two limiters of the same name (as between nodes)', async () => {
        const name = freshKey('lim-shared');
        const first = state.limiter(name, 2, 10_000);
        const second = state.limiter(name, 2, 10_000);
        expect((await first.consume('k')).allowed).toBe(true);
        expect((await second.consume('k')).allowed).toBe(true);
        expect((await first.consume('k')).allowed).toBe(false);
      });

      it('shares the count between limiters of one name with different points, each comparing it with its own', async () => {
        const name = freshKey('lim-points');
        const five = state.limiter(name, 5, 10_000);
        for (let i = 0; i < 4; i++) expect((await five.consume('k')).allowed).toBe(true);
        // A lower limit applies to the points already spent; a higher one leaves what is left of it.
        const two = state.limiter(name, 2, 10_000);
        const refused = await two.consume('k');
        expect(refused.allowed).toBe(false);
        expect(refused.retryAfterMs).toBeGreaterThan(0);
        expect(await two.peek('k')).toMatchObject({ allowed: false, remaining: 0 });
        const eight = state.limiter(name, 8, 10_000);
        expect(await eight.consume('k')).toMatchObject({ allowed: true, remaining: 2 });
        expect((await five.consume('k')).allowed).toBe(false);
      });

      it('of 20 concurrent consumes against 5 points, exactly 5 are allowed', async () => {
        const limiter = state.limiter(freshKey('lim-race'), 5, 10_000);
        const results = await Promise.all(Array.from({ length: 20 }, () => limiter.consume('k')));
        expect(results.filter((r) => r.allowed)).toHaveLength(5);
      });

      it('allows again once the window has passed (1 s window)', async () => {
        const limiter = state.limiter(freshKey('lim-window'), 1, 1_000);
        expect((await limiter.consume('k')).allowed).toBe(true);
        const refused = await limiter.consume('k');
        expect(refused.allowed).toBe(false);
        expect(refused.retryAfterMs).toBeLessThanOrEqual(1_000);
        await sleep(refused.retryAfterMs + 100);
        expect(await limiter.consume('k')).toMatchObject({ allowed: true, remaining: 0 });
      });
    });

    describe('publish / subscribe', () => {
      /** Subscribes and collects what arrives, in order. */
      const collect = async (store: StateStore, channel: string) => {
        const got: string[] = [];
        const unsubscribe = await store.subscribe(channel, (m) => got.push(m));
        return { got, unsubscribe };
      };

      it('delivers each message exactly, in publish order, to a subscriber of the channel', async () => {
        const channel = freshKey('ch');
        const { got } = await collect(state, channel);
        const messages = ['first', '', 'päß ✓ 日本 🎉', JSON.stringify({ user_ids: [1, 2, 3] }), 'x'.repeat(10_000)];
        for (const m of messages) await state.publish(channel, m);
        await until(() => got.length === messages.length, 'five messages');
        expect(got).toEqual(messages);
      });

      it('delivers to every subscriber of the channel, and to none of another channel', async () => {
        const [channel, other] = [freshKey('ch-all'), freshKey('ch-other')];
        const one = await collect(state, channel);
        const two = await collect(state, channel);
        const elsewhere = await collect(state, other);
        await state.publish(channel, 'm1');
        // Published after m1 on the same connection: once it is in, m1 would have been too.
        await state.publish(other, 'sentinel');
        await until(() => one.got.length === 1 && two.got.length === 1 && elsewhere.got.length === 1, 'delivery');
        expect([one.got, two.got, elsewhere.got]).toEqual([['m1'], ['m1'], ['sentinel']]);
      });

      it('delivers to a subscriber on another node of the same store', async () => {
        const peer = (await harness.peer?.(state)) ?? state;
        try {
          const channel = freshKey('ch-peer');
          const there = await collect(peer, channel);
          const here = await collect(state, channel);
          await state.publish(channel, 'to-every-node');
          await until(() => there.got.length === 1 && here.got.length === 1, 'delivery on both nodes');
          expect([there.got, here.got]).toEqual([['to-every-node'], ['to-every-node']]);
        } finally {
          if (peer !== state) await peer.close();
        }
      });

      it('stops delivering to a subscription once unsubscribed, and leaves the others', async () => {
        const channel = freshKey('ch-unsub');
        const gone = await collect(state, channel);
        const stays = await collect(state, channel);
        await state.publish(channel, 'before');
        await until(() => gone.got.length === 1 && stays.got.length === 1, 'the first message');
        await gone.unsubscribe();
        await gone.unsubscribe();
        await state.publish(channel, 'after');
        await until(() => stays.got.length === 2, 'the second message');
        expect(gone.got).toEqual(['before']);
        expect(stays.got).toEqual(['before', 'after']);
      });

      it('counts the same handler subscribed twice as two subscriptions', async () => {
        const channel = freshKey('ch-twice');
        const got: string[] = [];
        const handler = (m: string) => got.push(m);
        const first = await state.subscribe(channel, handler);
        await state.subscribe(channel, handler);
        await state.publish(channel, 'm');
        await until(() => got.length === 2, 'two deliveries');
        await first();
        await state.publish(channel, 'n');
        await until(() => got.length === 3, 'one more delivery');
        expect(got).toEqual(['m', 'm', 'n']);
      });

      it('accepts a publish nobody hears, and keeps delivering after a handler throws', async () => {
        await expect(state.publish(freshKey('ch-nobody'), 'lost')).resolves.toBeUndefined();
        const channel = freshKey('ch-throw');
        await state.subscribe(channel, () => {
          throw new Error('a bad handler');
        });
        const { got } = await collect(state, channel);
        await state.publish(channel, 'one');
        await state.publish(channel, 'two');
        await until(() => got.length === 2, 'both messages');
        expect(got).toEqual(['one', 'two']);
      });

      it('ends subscriptions on close', async () => {
        const closing = await harness.make();
        const publisher = (await harness.peer?.(closing)) ?? closing;
        try {
          const channel = freshKey('ch-close');
          const { got } = await collect(closing, channel);
          await closing.close();
          const witness = await collect(publisher, channel);
          await publisher.publish(channel, 'after-close');
          await until(() => witness.got.length === 1, 'the witness');
          expect(got).toEqual([]);
        } finally {
          if (publisher !== closing) await publisher.close();
        }
      });
    });
  });
}
