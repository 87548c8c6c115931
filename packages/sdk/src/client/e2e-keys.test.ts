import { describe, expect, it } from 'vitest';
import { ChatKeyStore } from './e2e-keys.js';
import { AsyncQueue } from './emitter.js';

const key = (n: number) => new Uint8Array(32).fill(n);

describe('ChatKeyStore', () => {
  it('hands out copies of its keys: wiping an export leaves the held key intact', () => {
    const store = new ChatKeyStore();
    store.store(1, 1, key(7));
    const exported = store.keysOf(1);
    exported.get(1)?.fill(0);
    expect(store.get(1, 1)).toEqual(key(7));
    expect(store.keysOf(1).get(1)).toEqual(key(7));
  });

  it('imports kept keys only when every one is 32 bytes at a valid epoch, storing none otherwise', () => {
    const store = new ChatKeyStore();
    const bad = [
      new Map([
        [1, key(1)],
        [2, new Uint8Array(31)],
      ]),
      new Map([
        [1, key(1)],
        [1.5, key(2)],
      ]),
      new Map([
        [1, key(1)],
        [-1, key(2)],
      ]),
      new Map([[Number.MAX_SAFE_INTEGER + 1, key(1)]]),
    ];
    for (const keys of bad) {
      expect(() => store.import(1, keys)).toThrow(expect.objectContaining({ code: 'INVALID_INPUT' }));
      expect(store.keysOf(1).size).toBe(0);
    }
    const source = key(3);
    store.import(1, new Map([[4, source]]));
    source.fill(0); // the store keeps its own copy
    expect(store.current(1)).toEqual({ epoch: 4, key: key(3) });
  });

  it('keeps the first key of an epoch and raises the known epoch', () => {
    const store = new ChatKeyStore();
    expect(store.current(1)).toBeUndefined();
    expect(store.store(1, 2, key(2))).toBe(true);
    expect(store.store(1, 2, key(9))).toBe(false);
    expect(store.get(1, 2)).toEqual(key(2));
    expect(store.current(1)).toEqual({ epoch: 2, key: key(2) });
    expect(store.raiseEpoch(1, 3)).toBe(true);
    expect(store.raiseEpoch(1, 3)).toBe(false);
    expect(store.current(1)).toBeUndefined();
    store.store(1, 1, key(1));
    expect(store.epochOf(1)).toBe(3);
    expect([...store.keysOf(1).keys()].sort()).toEqual([1, 2]);
    expect(store.lookup(1)(1)).toEqual(key(1));
  });

  it('resolves waits when the key arrives, and undefined on timeout or cancel', async () => {
    const store = new ChatKeyStore();
    const waiting = store.waitForCurrent(5, 2, 1000);
    store.store(5, 1, key(1));
    store.store(5, 2, key(2));
    expect(await waiting).toEqual({ epoch: 2, key: key(2) });
    expect(await store.waitForEpoch(5, 9, 20)).toBeUndefined();
    const cancelled = store.waitForEpoch(5, 10, 10_000);
    store.cancelAll();
    expect(await cancelled).toBeUndefined();
  });
});

describe('AsyncQueue', () => {
  it('hands items to waiting readers, filters, bounds its buffer and ends', async () => {
    const queue = new AsyncQueue<number>(
      2,
      () => {},
      (n) => n % 2 === 0,
    );
    const first = queue.next();
    queue.push(2);
    expect(await first).toEqual({ value: 2, done: false });
    for (const n of [3, 4, 6, 8]) queue.push(n);
    expect(await queue.next()).toEqual({ value: 6, done: false });
    expect(await queue.next()).toEqual({ value: 8, done: false });
    const pending = queue.next();
    queue.end();
    expect(await pending).toEqual({ value: undefined, done: true });
  });
});
