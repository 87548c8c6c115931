import { Limits } from '@parlor/protocol';
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import { MemoryMatchQueue } from '../../platform/state/match-queue.js';
import { MemoryState } from '../../platform/state/memory.js';
import type { ChatsService } from '../chats/chats.service.js';
import { type MatchmakingDeps, makeMatchmakingService, PEERS_ONLINE_REUSE_MS } from './matchmaking.service.js';
import type { SearcherFacts } from './matchmaking.store.js';

/** The service over the in-process state and queue, with the SQL side faked and its calls counted. */
function setup() {
  const clock = new FakeClock(Date.UTC(2026, 5, 1));
  const state = new MemoryState(clock);
  const queue = new MemoryMatchQueue();
  const calls = { count: 0, get: 0, created: [] as number[][], found: [] as [string, number][] };
  const countExpiring = state.countExpiring.bind(state);
  state.countExpiring = async (key: string) => {
    calls.count++;
    return countExpiring(key);
  };
  const get = queue.get.bind(queue);
  queue.get = async (userId: number, now: number) => {
    calls.get++;
    return get(userId, now);
  };
  const facts: SearcherFacts = { premium: false, activeDirect: 0, exclude: [], country: null };
  const chats = {
    createDirect: async (userIds: number[]) => {
      calls.created.push(userIds);
      return {
        chat: { id: 7, expires_at: new Date(clock.now().getTime() + Limits.DIRECT_CHAT_TTL_MS).toISOString() },
        token: 'tok',
        users: userIds.map((id) => ({ id, username: `u${id}`, stranger: false })),
      };
    },
  } as unknown as ChatsService;
  const deps: MatchmakingDeps = {
    clock,
    state,
    queue,
    chats,
    store: { searcherFacts: async (keys) => keys.map(() => ({ ...facts })) },
    realtime: {
      emitTo: (room: string, _event: string, e: unknown) => {
        calls.found.push([room, (e as { peer: { id: number } }).peer.id]);
      },
    },
  };
  const svc = makeMatchmakingService(deps);
  const searcher = (userId: number) => ({ userId, sessionId: userId, stranger: false, matchBlocked: false });
  return { clock, state, svc, calls, facts, searcher };
}

describe('matchmaking enqueue pre-checks', () => {
  it('reuses a count of two or more online users for PEERS_ONLINE_REUSE_MS, never a lower one', async () => {
    const { clock, state, svc, calls, searcher } = setup();
    const until = clock.now().getTime() + Limits.ONLINE_TTL_MS;
    await state.addExpiring('online-users', ['1'], until);
    // One user online, and it is the caller: refused, and the count is not kept.
    await expect(svc.enqueue(searcher(1), ['abc'])).rejects.toMatchObject({ code: 'ERR_MATCH_NO_PEERS_ONLINE' });
    await state.addExpiring('online-users', ['2'], until);
    expect((await svc.enqueue(searcher(1), ['abc'])).answer.state).toBe('searching');
    expect(calls.count).toBe(2);
    // Both go offline; within the window the count of two is reused.
    await state.removeExpiring('online-users', '1');
    await state.removeExpiring('online-users', '2');
    clock.advance(PEERS_ONLINE_REUSE_MS - 1);
    expect((await svc.enqueue(searcher(3), ['xyz'])).answer.state).toBe('searching');
    expect(calls.count).toBe(2);
    clock.advance(1);
    await expect(svc.enqueue(searcher(4), ['qrs'])).rejects.toMatchObject({ code: 'ERR_MATCH_NO_PEERS_ONLINE' });
    expect(calls.count).toBe(3);
  });

  it('asks the queue whether the caller searches only to refuse; pairs, answers the search, tells the caller after', async () => {
    const { clock, state, svc, calls, facts, searcher } = setup();
    for (const id of ['1', '2']) await state.addExpiring('online-users', [id], clock.now().getTime() + 60_000);
    expect((await svc.enqueue(searcher(1), ['abc', 'def'])).answer.state).toBe('searching');
    const paired = await svc.enqueue(searcher(2), ['def', 'abc']);
    expect(paired.answer).toEqual({
      state: 'searching',
      interests: ['def', 'abc'],
      expires_at: new Date(clock.now().getTime() + Limits.MATCH_QUEUE_WAIT_MS).toISOString(),
    });
    expect(calls.created).toEqual([[1, 2]]);
    // The waiting peer is told at once; the caller only when the route runs tellCaller.
    expect(calls.found).toEqual([['user:1', 2]]);
    paired.tellCaller?.();
    expect(calls.found).toEqual([
      ['user:1', 2],
      ['user:2', 1],
    ]);
    expect(calls.get).toBe(0);
    // A searching caller hears ERR_MATCH_ALREADY_SEARCHING before the slot limit.
    expect((await svc.enqueue(searcher(3), ['ghi'])).answer.state).toBe('searching');
    facts.activeDirect = Limits.DIRECT_SLOTS_FREE;
    await expect(svc.enqueue(searcher(3), ['ghi'])).rejects.toMatchObject({ code: 'ERR_MATCH_ALREADY_SEARCHING' });
    await expect(svc.enqueue(searcher(5), ['ghi'])).rejects.toMatchObject({ code: 'ERR_MATCH_SLOT_LIMIT' });
    expect(calls.get).toBe(2);
  });
});
