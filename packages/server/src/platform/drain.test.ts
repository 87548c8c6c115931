import { describe, expect, it } from 'vitest';
import { drain } from './drain.js';

/** A batch over `due` rows that takes up to `size` of them. */
const over = (due: { n: number }, size: number) => async () => {
  const taken = Math.min(size, due.n);
  due.n -= taken;
  return taken;
};

describe('drain', () => {
  it('runs batches while they come back full and stops at the first short one', async () => {
    const due = { n: 5 };
    expect(await drain(2, 10, over(due, 2))).toBe(5);
    expect(due.n).toBe(0);
  });

  it('runs at most maxBatches, leaving the rest for the next tick', async () => {
    const due = { n: 7 };
    expect(await drain(2, 3, over(due, 2))).toBe(6);
    expect(await drain(2, 3, over(due, 2))).toBe(1);
  });

  it('runs one batch when nothing is due', async () => {
    let calls = 0;
    expect(
      await drain(2, 3, async () => {
        calls += 1;
        return 0;
      }),
    ).toBe(0);
    expect(calls).toBe(1);
  });
});
