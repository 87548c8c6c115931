import type { Clock } from '../clock.js';
import type { ConnectionLog } from './connection-log.js';
import { MemoryState } from './memory.js';
import { RedisState } from './redis.js';
import type { StateStore } from './types.js';

export { type ConnectionLog, watchConnection } from './connection-log.js';
export type { Consumed, CountedIn, CountedSet, Limiter, LimitResult, StateStore, Unsubscribe } from './types.js';
export { MemoryState, RedisState };

/** Redis when a URL is configured, else in-process. */
export async function openState(opts: {
  url: string | null;
  prefix: string;
  clock: Clock;
  log?: ConnectionLog;
}): Promise<StateStore> {
  if (!opts.url) return new MemoryState(opts.clock);
  const state = new RedisState(opts.url, opts.prefix, opts.clock, opts.log);
  try {
    await state.connect();
  } catch (err) {
    // ioredis would go on reconnecting in the background.
    state.client.disconnect();
    throw err;
  }
  return state;
}
