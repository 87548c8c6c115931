import { describe, expect, it } from 'vitest';
import { TOMBSTONE_TTL_MS, Tombstones } from './tombstones.js';

describe('Tombstones', () => {
  it('keeps a deleted id for the recovery window (2 minutes), per chat, then forgets it', () => {
    let now = 1_000_000;
    const tombstones = new Tombstones({ now: () => now });
    tombstones.add(5, ['10-1', '10-2']);
    expect(tombstones.has(5, '10-1')).toBe(true);
    expect(tombstones.has(6, '10-1')).toBe(false);
    now += TOMBSTONE_TTL_MS - 1;
    expect(tombstones.has(5, '10-2')).toBe(true);
    now += 1;
    expect(tombstones.has(5, '10-2')).toBe(false);
    expect(tombstones.size).toBe(0);
  });

  it('a deletion seen again restarts its window', () => {
    let now = 0;
    const tombstones = new Tombstones({ now: () => now, ttlMs: 100 });
    tombstones.add(1, ['1-1', '1-2']);
    now = 50;
    tombstones.add(1, ['1-1']);
    now = 100;
    expect(tombstones.has(1, '1-2')).toBe(false);
    expect(tombstones.has(1, '1-1')).toBe(true);
  });

  it('is bounded: past the most it keeps, the oldest go first', () => {
    const tombstones = new Tombstones({ now: () => 0, max: 3 });
    tombstones.add(1, ['1-1', '1-2']);
    tombstones.add(1, ['1-3', '1-4']);
    expect(tombstones.size).toBe(3);
    expect(['1-1', '1-2', '1-3', '1-4'].map((id) => tombstones.has(1, id))).toEqual([false, true, true, true]);
  });
});
