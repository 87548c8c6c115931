import { type Clock, systemClock } from '../clock.js';
import { ExpiringSet } from './expiring-set.js';
import type { CountedIn, CountedSet, Limiter, StateStore, Unsubscribe } from './types.js';
import { type Window, WindowLimiter } from './window-limiter.js';

interface Entry {
  value: string;
  expiresAt: number;
}

/** In-process coordination for the embedded (single node) mode. */
export class MemoryState implements StateStore {
  readonly kind = 'memory' as const;
  private readonly values = new Map<string, Entry>();
  private readonly sets = new Map<string, ExpiringSet>();
  private readonly limiters = new Map<string, WindowLimiter>();
  /** The windows of the limiters of one name and duration, shared by them whatever their points. */
  private readonly windows = new Map<string, Map<string, Window>>();
  private readonly channels = new Map<string, Set<(message: string) => void>>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly clock: Clock = systemClock) {
    // Expired entries are dropped on read; the sweep bounds memory for keys never read again.
    this.sweeper = setInterval(() => this.sweep(), 60_000);
    this.sweeper.unref();
  }

  private now() {
    return this.clock.now().getTime();
  }

  private live(key: string): Entry | undefined {
    const e = this.values.get(key);
    if (e && e.expiresAt <= this.now()) {
      this.values.delete(key);
      return undefined;
    }
    return e;
  }

  private sweep() {
    const now = this.now();
    for (const [k, e] of this.values) if (e.expiresAt <= now) this.values.delete(k);
    for (const [k, s] of this.sets) {
      s.prune(now);
      if (s.size === 0) this.sets.delete(k);
    }
    for (const l of this.limiters.values()) l.prune(now);
  }

  async get(key: string) {
    return this.live(key)?.value ?? null;
  }
  async set(key: string, value: string, ttlMs: number) {
    this.values.set(key, { value, expiresAt: this.now() + ttlMs });
  }
  async setIfAbsent(key: string, value: string, ttlMs: number) {
    if (this.live(key)) return false;
    this.values.set(key, { value, expiresAt: this.now() + ttlMs });
    return true;
  }
  async take(key: string) {
    const e = this.live(key);
    this.values.delete(key);
    return e?.value ?? null;
  }
  async del(...keys: string[]) {
    for (const k of keys) this.values.delete(k);
  }
  async delIf(key: string, expected: string) {
    if (this.live(key)?.value !== expected) return false;
    this.values.delete(key);
    return true;
  }
  async replaceIf(key: string, expected: string, value: string, ttlMs: number) {
    if (this.live(key)?.value !== expected) return false;
    this.values.set(key, { value, expiresAt: this.now() + ttlMs });
    return true;
  }
  /** The set under `setKey` without the members whose deadline has passed (an empty one if none). */
  private liveSet(setKey: string) {
    const s = this.sets.get(setKey) ?? new ExpiringSet();
    s.prune(this.now());
    return s;
  }
  /** addExpiring in one synchronous step (no other call runs in between). */
  private addNow(setKey: string, members: string[], expiresAtMs: number) {
    const s = this.liveSet(setKey);
    for (const m of members) s.add(m, expiresAtMs);
    s.prune(this.now());
    if (s.size > 0) this.sets.set(setKey, s);
    else this.sets.delete(setKey);
    return { count: s.size, earliest: s.earliest() ?? expiresAtMs };
  }
  async addExpiring(setKey: string, members: string[], expiresAtMs: number) {
    return this.addNow(setKey, members, expiresAtMs);
  }
  async setIfAbsentCounted(key: string, value: string, ttlMs: number, count: CountedIn): Promise<CountedSet> {
    if (this.live(key)) return 'present';
    const s = this.liveSet(count.setKey);
    if (!s.has(count.member, this.now()) && s.size >= count.max) return { full: s.earliest() ?? count.expiresAtMs };
    this.addNow(count.setKey, [count.member], count.expiresAtMs);
    this.values.set(key, { value, expiresAt: this.now() + ttlMs });
    return 'set';
  }
  async removeExpiring(setKey: string, member: string) {
    this.sets.get(setKey)?.remove(member);
  }
  async takeExpiring(setKey: string) {
    const members = this.liveSet(setKey).members();
    this.sets.delete(setKey);
    return members;
  }
  async countExpiring(setKey: string) {
    return this.liveSet(setKey).size;
  }
  async hasExpiring(setKey: string, member: string) {
    return this.sets.get(setKey)?.has(member, this.now()) ?? false;
  }
  limiter(name: string, points: number, durationMs: number): Limiter {
    // One counter per name, as in Redis: a second limiter of the same name shares the count, and
    // compares it with its own points. Its windows run on this store's clock, like every other
    // deadline here.
    const id = `${name}|${points}|${durationMs}`;
    let limiter = this.limiters.get(id);
    if (!limiter) {
      const counters = `${name}|${durationMs}`;
      let windows = this.windows.get(counters);
      if (!windows) {
        windows = new Map();
        this.windows.set(counters, windows);
      }
      limiter = new WindowLimiter(points, durationMs, () => this.now(), windows);
      this.limiters.set(id, limiter);
    }
    return limiter;
  }
  /** Delivers synchronously: every handler has run when this resolves (one process, one node). */
  async publish(channel: string, message: string) {
    const handlers = this.channels.get(channel);
    if (!handlers) return;
    // A copy, so a handler that unsubscribes (or subscribes) does not disturb this delivery.
    for (const handler of [...handlers]) {
      try {
        handler(message);
      } catch {
        // The contract: handlers must not throw, and one that does never stops the others.
      }
    }
  }
  async subscribe(channel: string, handler: (message: string) => void): Promise<Unsubscribe> {
    // A wrapper per call, so the same function subscribed twice is two subscriptions.
    const own = (message: string) => handler(message);
    let handlers = this.channels.get(channel);
    if (!handlers) {
      handlers = new Set();
      this.channels.set(channel, handlers);
    }
    handlers.add(own);
    return async () => {
      const current = this.channels.get(channel);
      current?.delete(own);
      if (current?.size === 0) this.channels.delete(channel);
    };
  }
  async close() {
    clearInterval(this.sweeper);
    this.channels.clear();
    this.values.clear();
    this.sets.clear();
    this.limiters.clear();
    this.windows.clear();
  }
}
