import type { Consumed, Limiter, LimitResult } from './types.js';

/** Numbers the windows this process opens: a window's identity (Consumed.window). */
let opened = 0;

export interface Window {
  /** Its identity, which a give-back names (`refund`). */
  id: string;
  /** Points spent in this window (refused attempts count too, as in Redis). */
  spent: number;
  /** When the window ends (ms since the epoch, on the store's clock). */
  endsAt: number;
}

/**
 * The in-process fixed-window limiter of the embedded mode, on the store's clock (so a test moves
 * its windows with the same fake clock as everything else). A key's window opens at its first
 * point and lasts `durationMs`; every point spent in it counts, refused ones included, exactly as
 * the Redis limiter counts them. Ended windows are dropped when their key is next used and by
 * `prune` (the store's periodic sweep), so keys never used again do not accumulate. A give-back
 * reaches only the window it names, while it is open.
 */
export class WindowLimiter implements Limiter {
  constructor(
    private readonly points: number,
    private readonly durationMs: number,
    private readonly now: () => number,
    /**
     * The windows per key. Limiters of one name share them (MemoryState.limiter), as limiters of
     * one name share their counters in Redis whatever their points: each compares the count with
     * its own points.
     */
    private readonly windows = new Map<string, Window>(),
  ) {}

  /** The key's window if it has not ended (an ended one is dropped). */
  private open(key: string, now: number): Window | undefined {
    const w = this.windows.get(key);
    if (w && w.endsAt <= now) {
      this.windows.delete(key);
      return undefined;
    }
    return w;
  }

  private result(w: Window | undefined, now: number, refused: number): LimitResult {
    const spent = w?.spent ?? 0;
    const allowed = spent <= this.points - refused;
    return {
      allowed,
      remaining: Math.max(0, this.points - spent),
      retryAfterMs: allowed || !w ? 0 : Math.max(1, w.endsAt - now),
    };
  }

  async consume(key: string, points = 1): Promise<Consumed> {
    const now = this.now();
    let w = this.open(key, now);
    if (!w) {
      opened += 1;
      w = { id: String(opened), spent: 0, endsAt: now + this.durationMs };
      this.windows.set(key, w);
    }
    w.spent += points;
    return { ...this.result(w, now, 0), window: w.id };
  }

  async refund(key: string, window: string, points = 1): Promise<void> {
    // Only points of the named window come back, while it is open: an ended window has nothing to
    // return, and the one opened after it owes nothing.
    const w = this.open(key, this.now());
    if (w?.id === window) w.spent = Math.max(0, w.spent - points);
  }

  async peek(key: string): Promise<LimitResult> {
    const now = this.now();
    // Allowed when one more point would be: the window has not spent them all.
    return this.result(this.open(key, now), now, 1);
  }

  async reset(key: string): Promise<void> {
    this.windows.delete(key);
  }

  /** Drops every ended window. */
  prune(now: number): void {
    for (const [key, w] of this.windows) if (w.endsAt <= now) this.windows.delete(key);
  }

  /** Keys with an open (or not yet pruned) window. */
  get size(): number {
    return this.windows.size;
  }
}
