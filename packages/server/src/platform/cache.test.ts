import { describe, expect, it } from 'vitest';
import { cachedFor, UserCache } from './cache.js';
import { FakeClock } from './clock.js';

interface Entry {
  userId: number;
  v: string;
}

const make = (opts: { max?: number; ttlMs?: number } = {}) => {
  const clock = new FakeClock();
  const cache = new UserCache<string, Entry>({
    max: opts.max ?? 100,
    ttlMs: opts.ttlMs ?? 10_000,
    clock,
    userOf: (e) => e.userId,
  });
  const put = (key: string, userId: number, v = key) => cache.set(key, { userId, v }, cache.begin());
  return { clock, cache, put };
};

describe('UserCache', () => {
  it('serves what was stored, and misses a key never stored', () => {
    const { cache, put } = make();
    expect(put('a', 1)).toBe(true);
    expect(cache.get('a')).toEqual({ userId: 1, v: 'a' });
    expect(cache.get('b')).toBeUndefined();
  });

  describe('LRU bound', () => {
    it('keeps at most `max` entries, dropping the least recently used', () => {
      const { cache, put } = make({ max: 3 });
      put('a', 1);
      put('b', 2);
      put('c', 3);
      expect(cache.get('a')).toBeDefined(); // a is now the most recently used
      put('d', 4);
      expect(cache.size).toBe(3);
      expect(cache.get('b')).toBeUndefined();
      expect(['a', 'c', 'd'].map((k) => cache.get(k)?.v)).toEqual(['a', 'c', 'd']);
    });

    it('replaces a key in place, without growing', () => {
      const { cache, put } = make({ max: 2 });
      put('a', 1, 'old');
      put('a', 1, 'new');
      put('b', 2);
      expect(cache.size).toBe(2);
      expect(cache.get('a')?.v).toBe('new');
    });

    it('forgets an evicted key in its user index (invalidating that user later touches nothing else)', () => {
      const { cache, put } = make({ max: 1 });
      put('a', 1);
      put('b', 2);
      cache.invalidate([1]);
      expect(cache.get('b')?.v).toBe('b');
    });
  });

  describe('TTL backstop (fake clock)', () => {
    it('serves an entry until its TTL and misses from then on', () => {
      const { clock, cache, put } = make({ ttlMs: 10_000 });
      put('a', 1);
      clock.advance(9_999);
      expect(cache.get('a')).toBeDefined();
      clock.advance(1);
      expect(cache.get('a')).toBeUndefined();
      expect(cache.size).toBe(0);
    });

    it('counts the TTL from the store, not from the last read', () => {
      const { clock, cache, put } = make({ ttlMs: 1_000 });
      put('a', 1);
      clock.advance(600);
      expect(cache.get('a')).toEqual({ userId: 1, v: 'a' });
      clock.advance(600);
      expect(cache.get('a')).toBeUndefined();
    });
  });

  describe('invalidation by user', () => {
    it('drops every entry of the named users and only theirs', () => {
      const { cache, put } = make();
      put('s1', 1);
      put('s2', 1);
      put('s3', 2);
      put('s4', 3);
      cache.invalidate([1, 3, 99]);
      expect(['s1', 's2', 's3', 's4'].map((k) => cache.get(k)?.v)).toEqual([undefined, undefined, 's3', undefined]);
    });

    it('refuses to store a read begun before its user was invalidated (it may have read the old row)', () => {
      const { cache } = make();
      const stamp = cache.begin();
      cache.invalidate([1]);
      expect(cache.set('a', { userId: 1, v: 'stale' }, stamp)).toBe(false);
      expect(cache.get('a')).toBeUndefined();
      // Another user's read of the same moment is not affected.
      expect(cache.set('b', { userId: 2, v: 'fine' }, stamp)).toBe(true);
      // A read begun after the invalidation stores.
      expect(cache.set('a', { userId: 1, v: 'fresh' }, cache.begin())).toBe(true);
      expect(cache.get('a')?.v).toBe('fresh');
    });

    it('still refuses stale reads once the per-user record is trimmed', () => {
      const { cache } = make({ max: 2 });
      const stamp = cache.begin();
      cache.invalidate([1, 2, 3]);
      expect(cache.set('x', { userId: 4, v: 'x' }, stamp)).toBe(false);
      expect(cache.set('x', { userId: 4, v: 'x' }, cache.begin())).toBe(true);
    });

    it('deletes one key', () => {
      const { cache, put } = make();
      put('a', 1);
      put('b', 1);
      cache.delete('a');
      expect([cache.get('a'), cache.get('b')?.v]).toEqual([undefined, 'b']);
    });
  });

  describe('load (read through, one read per key at a time)', () => {
    /** A read the test settles by hand, counting how often it was started. */
    const manual = () => {
      const calls: ((v: Entry | null) => void)[] = [];
      const read = () => new Promise<Entry | null>((resolve) => calls.push(resolve));
      return { calls, read };
    };

    it('reads a miss once for all concurrent callers, stores it, then serves it', async () => {
      const { cache } = make();
      const { calls, read } = manual();
      const both = Promise.all([cache.load('a', read), cache.load('a', read)]);
      expect(calls).toHaveLength(1);
      calls[0]?.({ userId: 1, v: 'a' });
      expect(await both).toEqual([
        { userId: 1, v: 'a' },
        { userId: 1, v: 'a' },
      ]);
      expect(await cache.load('a', read)).toEqual({ userId: 1, v: 'a' });
      expect(calls).toHaveLength(1);
    });

    it('does not let a caller join a read begun before an invalidation, nor store that read', async () => {
      const { cache } = make();
      const { calls, read } = manual();
      const early = cache.load('a', read);
      cache.invalidate([1]);
      const late = cache.load('a', read);
      expect(calls).toHaveLength(2);
      calls[0]?.({ userId: 1, v: 'before the write' });
      calls[1]?.({ userId: 1, v: 'after the write' });
      expect((await early)?.v).toBe('before the write');
      expect((await late)?.v).toBe('after the write');
      expect(cache.get('a')?.v).toBe('after the write');
    });

    it('stores nothing for a null read or a failed one, and reads again next time', async () => {
      const { cache } = make();
      expect(await cache.load('a', async () => null)).toBeNull();
      await expect(cache.load('a', async () => Promise.reject(new Error('db down')))).rejects.toThrow('db down');
      expect(cache.size).toBe(0);
      expect(await cache.load('a', async () => ({ userId: 1, v: 'a' }))).toEqual({ userId: 1, v: 'a' });
    });
  });

  describe('reset (invalidation delivery lost or back)', () => {
    it('empties the cache, and while not live neither serves nor stores', () => {
      const { cache, put } = make();
      put('a', 1);
      cache.reset(false);
      expect(cache.get('a')).toBeUndefined();
      expect(put('a', 1)).toBe(false);
      cache.reset(true);
      expect(put('a', 1)).toBe(true);
      expect(cache.get('a')).toBeDefined();
    });

    it('refuses reads begun before it, whatever their user', () => {
      const { cache } = make();
      const stamp = cache.begin();
      cache.reset(true);
      expect(cache.set('a', { userId: 7, v: 'a' }, stamp)).toBe(false);
    });
  });
});

describe('cachedFor', () => {
  const counter = () => {
    const clock = new FakeClock();
    let reads = 0;
    let fail = false;
    const get = cachedFor(30_000, clock, async () => {
      reads += 1;
      if (fail) throw new Error('down');
      return reads;
    });
    return {
      clock,
      get,
      reads: () => reads,
      failNext: (f: boolean) => {
        fail = f;
      },
    };
  };

  it('reads once per window and keeps the value until it ends', async () => {
    const c = counter();
    expect(await c.get()).toBe(1);
    c.clock.advance(29_999);
    expect(await c.get()).toBe(1);
    c.clock.advance(1);
    expect(await c.get()).toBe(2);
    expect(c.reads()).toBe(2);
  });

  it('shares one read among concurrent callers', async () => {
    const c = counter();
    expect(await Promise.all([c.get(), c.get(), c.get()])).toEqual([1, 1, 1]);
    expect(c.reads()).toBe(1);
  });

  it('keeps no failed read: the next call reads again', async () => {
    const c = counter();
    c.failNext(true);
    await expect(c.get()).rejects.toThrow('down');
    c.failNext(false);
    expect(await c.get()).toBe(2);
  });
});
