import { afterEach, describe, expect, it, vi } from 'vitest';
import { UserCache } from '../../platform/cache.js';
import { FakeClock } from '../../platform/clock.js';
import { trackCommits } from '../../platform/db/after-commit.js';
import type { Db } from '../../platform/db/index.js';
import { MemoryState } from '../../platform/state/memory.js';
import type { StateStore } from '../../platform/state/types.js';
import { makeUserChanges, parseChange, USER_CHANGES_CHANNEL } from './users.changes.js';

/** The users a published message names. */
const named = (message: string) => JSON.stringify(parseChange(message)?.u);

/** A database whose transactions only log: enough to see what runs before and after the commit. */
function fakeDb(log: string[]) {
  const raw = {
    async transaction<T>(fn: (tx: object) => Promise<T>): Promise<T> {
      log.push('begin');
      const result = await fn({});
      log.push('commit');
      return result;
    },
  };
  return trackCommits(raw as unknown as Db);
}

const cacheOf = () =>
  new UserCache<number, { id: number }>({ max: 100, ttlMs: 10_000, clock: new FakeClock(), userOf: (u) => u.id });

/** Stores user `id`'s entry and checks that it is served, so a later miss means it was dropped. */
function store(cache: UserCache<number, { id: number }>, id: number): void {
  expect(cache.set(id, { id }, cache.begin())).toBe(true);
  expect(cache.get(id)).toEqual({ id });
}

describe('the user-change channel', () => {
  let state: StateStore;
  afterEach(async () => state?.close());

  const setup = async () => {
    state = new MemoryState();
    const log: string[] = [];
    const heard: string[] = [];
    await state.subscribe(USER_CHANGES_CHANNEL, (m) => {
      heard.push(named(m));
      log.push(`publish ${named(m)}`);
    });
    const changes = makeUserChanges({ state, onError: () => {} });
    const cache = cacheOf();
    changes.attach(cache);
    await changes.start();
    return { log, heard, changes, cache, db: fakeDb(log) };
  };

  it('publishes a change made outside a transaction at once', async () => {
    const { changes, heard, db } = await setup();
    await changes.changed([1, 2], db);
    expect(heard).toEqual(['[1,2]']);
  });

  it('publishes a transaction’s changes once, after its commit, before the transaction resolves', async () => {
    const { changes, log, db } = await setup();
    await db.transaction(async (tx) => {
      await changes.changed([1], tx);
      await changes.changed([2, 1], tx);
      log.push('last statement');
    });
    expect(log).toEqual(['begin', 'last statement', 'commit', 'publish [1,2]']);
  });

  it('publishes nothing for a transaction that rolls back', async () => {
    const { changes, heard, db } = await setup();
    await expect(
      db.transaction(async (tx) => {
        await changes.changed([1], tx);
        throw new Error('rollback');
      }),
    ).rejects.toThrow('rollback');
    expect(heard).toEqual([]);
  });

  it('drops the changed users’ entries on this node, and only theirs', async () => {
    const { changes, cache, db } = await setup();
    store(cache, 1);
    store(cache, 2);
    await changes.changed([1], db);
    expect([cache.get(1), cache.get(2)]).toEqual([undefined, { id: 2 }]);
  });

  it('drops entries named by a message from another node', async () => {
    const { cache } = await setup();
    store(cache, 5);
    await state.publish(USER_CHANGES_CHANNEL, '[5]');
    expect(cache.get(5)).toBeUndefined();
  });

  it('empties the caches on a message it cannot read', async () => {
    const { cache } = await setup();
    store(cache, 5);
    await state.publish(USER_CHANGES_CHANNEL, 'not json');
    expect(cache.get(5)).toBeUndefined();
    expect(cache.set(5, { id: 5 }, cache.begin())).toBe(true);
  });

  it('keeps caches off until subscribed, and off again once stopped', async () => {
    state = new MemoryState();
    const changes = makeUserChanges({ state, onError: () => {} });
    const cache = cacheOf();
    changes.attach(cache);
    expect(cache.set(1, { id: 1 }, cache.begin())).toBe(false);
    await changes.start();
    store(cache, 1);
    await changes.stop();
    expect(cache.get(1)).toBeUndefined();
    expect(cache.set(1, { id: 1 }, cache.begin())).toBe(false);
  });

  it('empties and bypasses the caches while delivery is lost, and serves again once it is back', async () => {
    let onDelivery: ((live: boolean) => void) | undefined;
    const fake: Pick<StateStore, 'publish' | 'subscribe'> = {
      publish: async () => {},
      subscribe: async (_channel, _handler, listener) => {
        onDelivery = listener;
        return async () => {};
      },
    };
    const changes = makeUserChanges({ state: fake, onError: () => {} });
    const cache = cacheOf();
    changes.attach(cache);
    await changes.start();
    store(cache, 1);
    onDelivery?.(false);
    expect(cache.get(1)).toBeUndefined();
    expect(cache.set(1, { id: 1 }, cache.begin())).toBe(false);
    onDelivery?.(true);
    expect(cache.set(1, { id: 1 }, cache.begin())).toBe(true);
  });

  it('tags each message, and reads both tagged messages and bare arrays of ids', () => {
    expect(parseChange('{"u":[1,2],"n":"a:1"}')).toEqual({ u: [1, 2], n: 'a:1' });
    expect(parseChange('[3]')).toEqual({ u: [3] });
    for (const bad of ['{"u":[1.5]}', '{"u":[1],"n":2}', '{"n":"a:1"}', 'null', '"x"', '[1,"2"]'])
      expect(parseChange(bad)).toBeNull();
  });

  /** A channel that holds every message until `deliver` is called, as a slow subscriber connection would. */
  const heldChannel = () => {
    const held: string[] = [];
    let handler: ((m: string) => void) | undefined;
    const channel: Pick<StateStore, 'publish' | 'subscribe'> = {
      publish: async (_c, m) => {
        held.push(m);
      },
      subscribe: async (_c, h) => {
        handler = h;
        return async () => {};
      },
    };
    const deliver = () => {
      for (const m of held.splice(0)) handler?.(m);
    };
    return { channel, held, deliver };
  };

  it('answers a write only once its own message has come back through the channel', async () => {
    const { channel, held, deliver } = heldChannel();
    const changes = makeUserChanges({ state: channel, onError: () => {}, echoWaitMs: 60_000 });
    await changes.start();
    let answered = false;
    const write = changes.changed([7], {}).then(() => {
      answered = true;
    });
    await new Promise((r) => setTimeout(r, 20));
    expect([held.length, answered]).toEqual([1, false]);
    deliver();
    await write;
    expect(answered).toBe(true);
  });

  it('answers anyway when the echo does not come within echoWaitMs, or once delivery is lost', async () => {
    const { channel } = heldChannel();
    const changes = makeUserChanges({ state: channel, onError: () => {}, echoWaitMs: 30 });
    await changes.start();
    vi.useFakeTimers();
    try {
      let answered = false;
      const write = changes.changed([7], {}).then(() => {
        answered = true;
      });
      await vi.advanceTimersByTimeAsync(29);
      expect(answered).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      await write;
      expect(answered).toBe(true);
    } finally {
      vi.useRealTimers();
    }

    let onDelivery: ((live: boolean) => void) | undefined;
    const lossy: Pick<StateStore, 'publish' | 'subscribe'> = {
      publish: async () => {},
      subscribe: async (_c, _h, listener) => {
        onDelivery = listener;
        return async () => {};
      },
    };
    const waiting = makeUserChanges({ state: lossy, onError: () => {}, echoWaitMs: 60_000 });
    await waiting.start();
    const write = waiting.changed([8], {});
    onDelivery?.(false);
    await write; // resolves: the test would time out otherwise
    await waiting.changed([9], {}); // not live: nothing to wait for
  });

  it('reports a failed publish and still drops the entries here', async () => {
    const errors: unknown[] = [];
    const failing: Pick<StateStore, 'publish' | 'subscribe'> = {
      publish: async () => {
        throw new Error('redis down');
      },
      subscribe: async () => async () => {},
    };
    const changes = makeUserChanges({ state: failing, onError: (err) => errors.push(err) });
    const cache = cacheOf();
    changes.attach(cache);
    await changes.start();
    store(cache, 1);
    await changes.changed([1], {});
    expect(cache.get(1)).toBeUndefined();
    expect(errors).toHaveLength(1);
  });
});
