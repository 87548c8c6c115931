import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import { MemoryState } from '../../platform/state/memory.js';
import type { UsersStore } from '../users/users.store.js';
import { type AuthDeps, makeAuthService, STRANGER_GRACE_MS } from './auth.service.js';

/** The service with the users store faked: `dead` ids are handed out batch by batch. */
function setup(dead: number) {
  const clock = new FakeClock(Date.UTC(2026, 5, 1));
  const calls: { cutoff: Date; limit: number }[] = [];
  let left = Array.from({ length: dead }, (_, i) => i + 1);
  const users = {
    removeDeadStrangers: async (cutoff: Date, limit: number) => {
      calls.push({ cutoff, limit });
      const batch = left.slice(0, limit);
      left = left.slice(limit);
      return batch;
    },
  } as unknown as UsersStore;
  const deps = { clock, state: new MemoryState(clock), users } as unknown as AuthDeps;
  return { auth: makeAuthService(deps), calls, clock };
}

describe('sweepStrangers', () => {
  it('asks the store for accounts whose sessions ended before now minus the grace period', async () => {
    const { auth, calls, clock } = setup(0);
    expect(await auth.sweepStrangers()).toEqual([]);
    expect(calls).toEqual([{ cutoff: new Date(clock.now().getTime() - STRANGER_GRACE_MS), limit: 500 }]);
  });

  it('runs batches until one comes back short and answers every deleted id', async () => {
    const { auth, calls } = setup(7);
    expect(await auth.sweepStrangers(3)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(calls).toHaveLength(3);
  });

  it('stops after 20 full batches (the next run takes the rest)', async () => {
    const { auth, calls } = setup(100);
    expect(await auth.sweepStrangers(2)).toHaveLength(40);
    expect(calls).toHaveLength(20);
  });
});
