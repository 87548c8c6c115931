import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ExpiringSet } from './expiring-set.js';

/** The obvious model: a map scanned in full on every question. */
class Model {
  readonly deadlines = new Map<string, number>();
  prune(now: number) {
    for (const [m, at] of this.deadlines) if (at <= now) this.deadlines.delete(m);
  }
  earliest() {
    let min: number | undefined;
    for (const at of this.deadlines.values()) if (min === undefined || at < min) min = at;
    return min;
  }
}

type Op =
  | { kind: 'add'; member: string; at: number }
  | { kind: 'remove'; member: string }
  | { kind: 'advance'; by: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('add' as const),
    member: fc.constantFrom('a', 'b', 'c', 'd', 'e'),
    at: fc.integer({ min: 0, max: 100 }),
  }),
  fc.record({ kind: fc.constant('remove' as const), member: fc.constantFrom('a', 'b', 'c', 'd', 'e') }),
  fc.record({ kind: fc.constant('advance' as const), by: fc.integer({ min: 0, max: 30 }) }),
);

describe('ExpiringSet', () => {
  it('answers as a full scan would after any sequence of adds, removes and time passing', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const set = new ExpiringSet();
        const model = new Model();
        let now = 0;
        for (const o of ops) {
          if (o.kind === 'add') {
            set.add(o.member, now + o.at);
            model.deadlines.set(o.member, now + o.at);
          } else if (o.kind === 'remove') {
            set.remove(o.member);
            model.deadlines.delete(o.member);
          } else now += o.by;
          set.prune(now);
          model.prune(now);
          expect(set.size).toBe(model.deadlines.size);
          expect(set.earliest()).toBe(model.earliest());
          for (const m of ['a', 'b', 'c', 'd', 'e']) expect(set.has(m, now)).toBe(model.deadlines.has(m));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('holds 300,000 members and keeps its heap bounded when the same members are added again and again', () => {
    const set = new ExpiringSet();
    const n = 300_000;
    for (let i = 0; i < n; i++) set.add(String(i), 1_000 + (i % 5_000));
    set.prune(0);
    expect(set.size).toBe(n);
    expect(set.earliest()).toBe(1_000);
    // Ten refreshes of every member (the online refresh): stale entries are dropped, not kept.
    for (let round = 1; round <= 10; round++) for (let i = 0; i < n; i++) set.add(String(i), 10_000 * round + i);
    expect(set.size).toBe(n);
    expect((set as unknown as { heap: unknown[] }).heap.length).toBeLessThanOrEqual(2 * n + 1024);
    expect(set.earliest()).toBe(100_000);
    set.prune(100_000 + n / 2 - 1);
    expect(set.size).toBe(n / 2);
    expect(set.earliest()).toBe(100_000 + n / 2);
    // 3.3 million adds: about 12 s on an idle 2-core machine, more beside the other suites.
  }, 120_000);
});
