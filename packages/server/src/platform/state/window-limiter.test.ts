import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock.js';
import { MemoryState } from './memory.js';
import { WindowLimiter } from './window-limiter.js';

const clocked = (points: number, durationMs: number) => {
  const clock = new FakeClock(Date.UTC(2026, 10, 25));
  return { clock, limiter: new WindowLimiter(points, durationMs, () => clock.now().getTime()) };
};

describe('WindowLimiter (the embedded store’s limiter, on its clock)', () => {
  it('refuses the N+1st point until the window ends, to the millisecond, then opens a new window', async () => {
    const { clock, limiter } = clocked(3, 10_000);
    for (let i = 0; i < 3; i++) expect((await limiter.consume('k')).allowed).toBe(true);
    clock.advance(4_000);
    expect(await limiter.consume('k')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 6_000 });
    clock.advance(5_999);
    expect(await limiter.consume('k')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 1 });
    clock.advance(1);
    // The window opened at the first point ended 10 s later; the next point opens a new one.
    expect(await limiter.consume('k')).toMatchObject({ allowed: true, remaining: 2, retryAfterMs: 0 });
    clock.advance(9_999);
    expect(await limiter.peek('k')).toEqual({ allowed: true, remaining: 2, retryAfterMs: 0 });
  });

  it('counts refused points, as the Redis limiter does: a refund after a refusal does not reopen', async () => {
    const { limiter } = clocked(1, 10_000);
    await limiter.consume('k');
    const { window } = await limiter.consume('k');
    await limiter.refund('k', window);
    expect((await limiter.peek('k')).allowed).toBe(false);
    await limiter.refund('k', window);
    expect(await limiter.peek('k')).toEqual({ allowed: true, remaining: 1, retryAfterMs: 0 });
  });

  it('gives back nothing from a window that has ended, and never more than was spent', async () => {
    const { clock, limiter } = clocked(2, 1_000);
    const ended = await limiter.consume('k', 2);
    clock.advance(1_000);
    await limiter.refund('k', ended.window, 2);
    // The refund found no open window: the next window holds exactly its 2 points, no more.
    const next = await limiter.consume('k', 2);
    expect(next).toMatchObject({ allowed: true, remaining: 0 });
    expect((await limiter.consume('k')).allowed).toBe(false);
    await limiter.refund('k', next.window, 10);
    expect(await limiter.peek('k')).toEqual({ allowed: true, remaining: 2, retryAfterMs: 0 });
  });

  it('gives back to the window named only: a late give-back for an ended window leaves the next one whole', async () => {
    const { clock, limiter } = clocked(2, 1_000);
    const ended = await limiter.consume('k');
    clock.advance(1_000);
    // The next window opens at once and is spent to its limit, before the first spend's give-back.
    const open = await limiter.consume('k', 2);
    expect(open).toMatchObject({ allowed: true, remaining: 0 });
    await limiter.refund('k', ended.window);
    expect(await limiter.peek('k')).toEqual({ allowed: false, remaining: 0, retryAfterMs: 1_000 });
    clock.advance(999);
    await limiter.refund('k', open.window);
    expect(await limiter.peek('k')).toEqual({ allowed: true, remaining: 1, retryAfterMs: 0 });
  });

  it('peek says whether one more point would pass, and spends nothing', async () => {
    const { clock, limiter } = clocked(2, 5_000);
    await limiter.consume('k');
    expect(await limiter.peek('k')).toEqual({ allowed: true, remaining: 1, retryAfterMs: 0 });
    await limiter.consume('k');
    clock.advance(2_000);
    expect(await limiter.peek('k')).toEqual({ allowed: false, remaining: 0, retryAfterMs: 3_000 });
    expect(await limiter.peek('k')).toEqual({ allowed: false, remaining: 0, retryAfterMs: 3_000 });
  });

  it('prune drops ended windows only, so keys never used again do not accumulate', async () => {
    const { clock, limiter } = clocked(5, 1_000);
    for (let i = 0; i < 100; i++) await limiter.consume(`old-${i}`);
    clock.advance(500);
    await limiter.consume('recent');
    clock.advance(500);
    limiter.prune(clock.now().getTime());
    expect(limiter.size).toBe(1);
    expect(await limiter.consume('recent')).toMatchObject({ allowed: true, remaining: 3 });
    clock.advance(500);
    limiter.prune(clock.now().getTime());
    expect(limiter.size).toBe(0);
  });

  it('MemoryState’s limiters follow the clock the store was given', async () => {
    const clock = new FakeClock(Date.UTC(2026, 10, 25));
    const state = new MemoryState(clock);
    try {
      const limiter = state.limiter('login', 1, 60_000);
      expect((await limiter.consume('ip')).allowed).toBe(true);
      expect(await limiter.consume('ip')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 60_000 });
      clock.advance(60_000);
      expect((await limiter.consume('ip')).allowed).toBe(true);
    } finally {
      await state.close();
    }
  });
});
