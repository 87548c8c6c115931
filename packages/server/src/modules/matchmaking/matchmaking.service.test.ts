import { Limits } from '@parlor/protocol';
import { describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import { MemoryMatchQueue } from '../../platform/state/match-queue.memory.js';
import { MemoryState } from '../../platform/state/memory.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { DirectRefusal } from '../chats/chats.store.js';
import {
  MATCH_PRECHECK_MAX_MS,
  type MatchmakingDeps,
  makeMatchmakingService,
  PEERS_ONLINE_REUSE_MS,
} from './matchmaking.service.js';
import type { SearcherFacts } from './matchmaking.store.js';

/** The service over the in-process state and queue, with the SQL side faked and its calls counted. */
function setup() {
  const clock = new FakeClock(Date.UTC(2026, 5, 1));
  const state = new MemoryState(clock);
  const queue = new MemoryMatchQueue();
  const calls = {
    count: 0,
    get: 0,
    created: [] as number[][],
    found: [] as [string, number][],
    other: [] as [string, string, unknown][],
    warned: [] as unknown[],
    /** Users whose direct chats ended because they can never come back (leaveAllDirectOfGone). */
    leftAll: [] as number[],
  };
  /** Replaces the chat creation (to make it fail); the default answers a chat. */
  const hooks: { beforeCreate?: () => Promise<void>; refuse?: (userIds: number[]) => DirectRefusal | undefined } = {};
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
  /** Users the fake store says are strangers. */
  const strangers = new Set<number>();
  /** Users the fake store says still have a live session. */
  const live = new Set<number>();
  /** Users the fake store says may not use the platform now, and why. */
  const refusals = new Map<number, 'ERR_BANNED' | 'ERR_TIMED_OUT' | 'ERR_UNAUTHENTICATED'>();
  const facts: SearcherFacts = { premium: false, activeDirect: 0, exclude: [], country: null, matchBlocked: false };
  /** Holds the next facts read until released (an enqueue in flight), when set. */
  const gate: { next?: Promise<void> } = {};
  const chats = {
    createDirect: async (userIds: number[], _tags: string[], searchesEnded: () => Promise<number[]>) => {
      await hooks.beforeCreate?.();
      // As the chat store: asked once the users' locks are held; an ended search refuses the pair.
      const cancelled = await searchesEnded();
      const refused = hooks.refuse?.(userIds);
      if (refused || cancelled.length > 0) {
        const none = { missing: [], inactive: [], full: [], matchBlocked: [], blocked: false };
        return { refused: { ...none, ...refused, cancelled } };
      }
      calls.created.push(userIds);
      return {
        chat: { id: 7, expires_at: new Date(clock.now().getTime() + Limits.DIRECT_CHAT_TTL_MS).toISOString() },
        token: 'tok',
        users: userIds.map((id) => ({ id, username: `u${id}`, stranger: false })),
        // Free users: one chat fills their slots.
        filled: userIds,
        committedAt: clock.now().getTime(),
      };
    },
    waitForPairings: async () => {},
    leaveAllDirectOfGone: async (userId: number) => {
      calls.leftAll.push(userId);
      return [];
    },
  } as unknown as ChatsService;
  const deps: MatchmakingDeps = {
    clock,
    state,
    queue,
    chats,
    store: {
      searcherFacts: async (keys) => {
        const read = keys.map(() => ({ ...facts }));
        const held = gate.next;
        gate.next = undefined;
        await held;
        return read;
      },
      isStranger: async (userId) => strangers.has(userId),
      hasLiveSession: async (userId) => live.has(userId),
      refusalOf: async (userId) => refusals.get(userId) ?? null,
    },
    realtime: {
      emitTo: (room: string, event: string, e: unknown) => {
        if (event === 'match:found') calls.found.push([room, (e as { peer: { id: number } }).peer.id]);
        else calls.other.push([room, event, e]);
      },
    },
    log: { warn: (obj: unknown) => calls.warned.push(obj) },
  };
  const svc = makeMatchmakingService(deps);
  const searcher = (userId: number) => ({ userId, sessionId: userId, stranger: false, matchBlocked: false });
  /** Holds the next facts read (taken as it is now) until the returned function is called. */
  const holdNextRead = (): (() => void) => {
    let release!: () => void;
    gate.next = new Promise<void>((r) => {
      release = r;
    });
    return release;
  };
  return { clock, state, queue, svc, calls, facts, searcher, hooks, holdNextRead, strangers, live, refusals };
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

describe('matchmaking: a pairing whose chat cannot be made', () => {
  // Online for longer than a search lasts, so only the queue deadline matters below.
  const online = async (state: MemoryState, clock: FakeClock) => {
    const until = clock.now().getTime() + 2 * Limits.MATCH_QUEUE_WAIT_MS;
    for (const id of ['1', '2']) await state.addExpiring('online-users', [id], until);
  };

  it('puts the peer back as it was; the caller gets the error and the peer hears nothing', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    const before = await queue.get(1, clock.now().getTime());
    hooks.beforeCreate = async () => {
      clock.advance(5_000);
      throw new Error('database down');
    };
    await expect(svc.enqueue(searcher(2), ['abc'])).rejects.toThrow('database down');
    expect(await queue.get(1, clock.now().getTime())).toEqual(before);
    expect(await queue.get(2, clock.now().getTime())).toBeNull();
    expect(calls.other).toEqual([]);
    expect(calls.warned).toEqual([]);
  });

  it('tells the peer match:timeout when its deadline passed meanwhile, and leaves it out of the queue', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc', 'def']);
    clock.advance(Limits.MATCH_QUEUE_WAIT_MS - 1);
    hooks.beforeCreate = async () => {
      clock.advance(1);
      throw new Error('slow database');
    };
    await expect(svc.enqueue(searcher(2), ['def'])).rejects.toThrow('slow database');
    expect(calls.other).toEqual([['user:1', 'match:timeout', { interests: ['abc', 'def'] }]]);
    expect(await queue.get(1, clock.now().getTime() - 1)).toBeNull();
    expect(calls.warned).toEqual([]);
  });

  it('logs at warn and tells the peer match:timeout when the queue cannot take it back', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    hooks.beforeCreate = async () => {
      throw new Error('database down');
    };
    queue.restore = async () => {
      throw new Error('queue down');
    };
    await expect(svc.enqueue(searcher(2), ['abc'])).rejects.toThrow('database down');
    expect(calls.warned).toEqual([{ err: new Error('queue down'), userId: 1 }]);
    expect(calls.other).toEqual([['user:1', 'match:timeout', { interests: ['abc'] }]]);
  });
});

describe('matchmaking: a pair the chat store refuses (slots full by now, or a user gone)', () => {
  const online = async (state: MemoryState, clock: FakeClock) => {
    for (const id of ['1', '2']) await state.addExpiring('online-users', [id], clock.now().getTime() + 60_000);
  };

  it('answers the caller 409 ERR_MATCH_SLOT_LIMIT when its slots are full, and puts the peer back', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    const before = await queue.get(1, clock.now().getTime());
    hooks.refuse = () => ({ missing: [], inactive: [], full: [2], matchBlocked: [], cancelled: [], blocked: false });
    await expect(svc.enqueue(searcher(2), ['abc'])).rejects.toMatchObject({ code: 'ERR_MATCH_SLOT_LIMIT' });
    expect(await queue.get(1, clock.now().getTime())).toEqual(before);
    expect(await queue.get(2, clock.now().getTime())).toBeNull();
    expect(calls.other).toEqual([]);
  });

  it('a pair refused for a block between the two (a refusal naming nobody): the peer goes back excluding the caller, who queues beside it', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    const before = await queue.get(1, clock.now().getTime());
    hooks.refuse = (ids) =>
      ids.includes(1) && ids.includes(2)
        ? { missing: [], inactive: [], full: [], matchBlocked: [], cancelled: [], blocked: true }
        : undefined;
    const res = await svc.enqueue(searcher(2), ['abc']);
    expect(res.answer.state).toBe('searching');
    expect(res.tellCaller).toBeUndefined();
    expect(await queue.get(1, clock.now().getTime())).toEqual({ ...before, exclude: [2] });
    expect(await queue.get(2, clock.now().getTime())).toMatchObject({ userId: 2 });
    expect(calls.created).toEqual([]);
    expect(calls.other).toEqual([]);
    // Each still pairs with others: the longest waiting first.
    expect((await svc.enqueue(searcher(3), ['abc'])).tellCaller).toBeDefined();
    expect(calls.created).toEqual([[1, 3]]);
  });

  it('drops a peer whose slots are full (match:timeout) or whose account is gone, and pairs the caller on', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    // Each waits on a tag of its own (so they do not pair), tried by the caller in this order.
    for (const [id, t] of [
      [1, 'aaa'],
      [3, 'ccc'],
      [4, 'ddd'],
    ] as const)
      await svc.enqueue(searcher(id), [t]);
    hooks.refuse = (ids) =>
      ids[0] === 1
        ? { missing: [], inactive: [], full: [1], matchBlocked: [], cancelled: [], blocked: false }
        : ids[0] === 3
          ? { missing: [3], inactive: [], full: [], matchBlocked: [], cancelled: [], blocked: false }
          : undefined;
    const paired = await svc.enqueue(searcher(2), ['aaa', 'ccc', 'ddd']);
    expect(paired.answer.state).toBe('searching');
    expect(paired.tellCaller).toBeDefined();
    expect(calls.created).toEqual([[4, 2]]);
    expect(calls.other).toEqual([['user:1', 'match:timeout', { interests: ['aaa'] }]]);
    for (const id of [1, 2, 3, 4]) expect(await queue.get(id, clock.now().getTime())).toBeNull();
  });

  /** The pairing of 2 with 1 is refused (2's slots are full); 3 queues on 1's tag while 1 is out. */
  const refusedWhileAnotherQueues = async (env: ReturnType<typeof setup>, refuseRestored: boolean) => {
    const { clock, state, svc, searcher, hooks } = env;
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    let first = true;
    hooks.beforeCreate = async () => {
      if (!first) return;
      first = false;
      expect((await svc.enqueue(searcher(3), ['abc'])).tellCaller).toBeUndefined();
    };
    hooks.refuse = (ids) =>
      ids.includes(2) || (refuseRestored && ids.includes(3))
        ? {
            missing: [],
            inactive: [],
            full: [ids.includes(2) ? 2 : 1],
            matchBlocked: [],
            cancelled: [],
            blocked: false,
          }
        : undefined;
    await expect(svc.enqueue(searcher(2), ['abc'])).rejects.toMatchObject({ code: 'ERR_MATCH_SLOT_LIMIT' });
  };

  it('pairs the peer it puts back with a user that queued on a shared tag while it was out', async () => {
    const env = setup();
    await refusedWhileAnotherQueues(env, false);
    const { clock, queue, calls } = env;
    await vi.waitFor(() => expect(calls.created).toEqual([[3, 1]]));
    expect(calls.found.sort()).toEqual([
      ['user:1', 3],
      ['user:3', 1],
    ]);
    for (const id of [1, 2, 3]) expect(await queue.get(id, clock.now().getTime())).toBeNull();
    expect(calls.other).toEqual([]);
  });

  it('ends the search of a put-back peer whose own pairing is refused (match:timeout); the other searches on', async () => {
    const env = setup();
    await refusedWhileAnotherQueues(env, true);
    const { clock, queue, calls } = env;
    await vi.waitFor(() => expect(calls.other).toEqual([['user:1', 'match:timeout', { interests: ['abc'] }]]));
    expect(calls.created).toEqual([]);
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
    expect(await queue.get(3, clock.now().getTime())).toMatchObject({ userId: 3, tags: ['abc'] });
    expect(calls.warned).toEqual([]);
  });

  it('queues the caller when every waiting peer is refused, and answers its search', async () => {
    const { clock, state, queue, svc, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    hooks.refuse = () => ({ missing: [], inactive: [], full: [1], matchBlocked: [], cancelled: [], blocked: false });
    const queued = await svc.enqueue(searcher(2), ['abc']);
    expect(queued.tellCaller).toBeUndefined();
    expect(await queue.get(2, clock.now().getTime())).toMatchObject({ userId: 2, tags: ['abc'] });
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
  });
});

describe('matchmaking: a search ended or blocked while its pair is being made', () => {
  const online = async (state: MemoryState, clock: FakeClock) => {
    for (const id of ['1', '2']) await state.addExpiring('online-users', [id], clock.now().getTime() + 60_000);
  };
  /** Runs `fn` at the next chat creation only, before it (the pairing holds the peer out of the queue). */
  const once = (fn: () => Promise<unknown>) => {
    let first = true;
    return async () => {
      if (!first) return;
      first = false;
      await fn();
    };
  };

  it('makes no chat when the peer dequeued meanwhile: the peer stays out, told nothing; the caller queues', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    hooks.beforeCreate = once(() => queue.dequeue(1, clock.now().getTime()));
    const res = await svc.enqueue(searcher(2), ['abc']);
    expect(res.answer.state).toBe('searching');
    expect(res.tellCaller).toBeUndefined();
    expect(calls.created).toEqual([]);
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
    expect(await queue.get(2, clock.now().getTime())).toMatchObject({ userId: 2 });
    expect(calls.other).toEqual([]);
  });

  it("makes no chat when the caller's own search was dequeued meanwhile: the peer goes back, the caller hears match:timeout after its answer", async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    const before = await queue.get(1, clock.now().getTime());
    hooks.beforeCreate = once(() => queue.dequeue(2, clock.now().getTime()));
    const res = await svc.enqueue(searcher(2), ['abc']);
    expect(res.answer.state).toBe('searching');
    expect(calls.created).toEqual([]);
    expect(await queue.get(1, clock.now().getTime())).toEqual(before);
    expect(await queue.get(2, clock.now().getTime())).toBeNull();
    expect(calls.other).toEqual([]);
    res.tellCaller?.();
    expect(calls.other).toEqual([['user:2', 'match:timeout', { interests: ['abc'] }]]);
  });

  it('does not queue a caller dequeued after a pairing refused because of the peer: it searches on only as the same search', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    hooks.refuse = (ids) => {
      // The caller's dequeue lands once the pairing has read the marks (it waited for the locks).
      void queue.dequeue(2, clock.now().getTime());
      return ids.includes(1)
        ? { missing: [], inactive: [], full: [1], matchBlocked: [], cancelled: [], blocked: false }
        : undefined;
    };
    const res = await svc.enqueue(searcher(2), ['abc']);
    expect(res.answer.state).toBe('searching');
    expect(await queue.get(2, clock.now().getTime())).toBeNull();
    res.tellCaller?.();
    expect(calls.other).toEqual([
      ['user:1', 'match:timeout', { interests: ['abc'] }],
      ['user:2', 'match:timeout', { interests: ['abc'] }],
    ]);
  });

  it('drops a peer a moderator blocked meanwhile silently; a blocked caller gets 403 ERR_STRANGER_BLOCKED and the peer goes back', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    const none = { missing: [], inactive: [], full: [], cancelled: [], blocked: false };
    hooks.refuse = (ids) => (ids.includes(1) ? { ...none, matchBlocked: [1] } : undefined);
    expect((await svc.enqueue(searcher(2), ['abc'])).tellCaller).toBeUndefined();
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
    const waiting = await queue.get(2, clock.now().getTime());
    expect(waiting).toMatchObject({ userId: 2 });
    hooks.refuse = () => ({ ...none, matchBlocked: [3] });
    await expect(svc.enqueue(searcher(3), ['abc'])).rejects.toMatchObject({ code: 'ERR_STRANGER_BLOCKED' });
    expect(await queue.get(2, clock.now().getTime())).toEqual(waiting);
    expect(calls.created).toEqual([]);
    expect(calls.other).toEqual([]);
  });

  it("ends a stranger's search at the end of its session while a pairing has it out: the pairing failing does not put it back", async () => {
    const { clock, state, queue, svc, calls, searcher, hooks, strangers } = setup();
    await online(state, clock);
    strangers.add(1);
    await svc.enqueue(searcher(1), ['abc']);
    hooks.beforeCreate = once(async () => {
      await svc.sessionsEnded(1);
      throw new Error('connection terminated');
    });
    await expect(svc.enqueue(searcher(2), ['abc'])).rejects.toThrow('connection terminated');
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
    expect(await queue.topTags(5)).toEqual([]);
    expect(calls.other).toEqual([]);
  });

  it('a waiting user whose entry a pairing has out reads as searching and cannot start a second search', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    let reached!: () => void;
    const atCreate = new Promise<void>((r) => {
      reached = r;
    });
    let resume!: () => void;
    hooks.beforeCreate = once(async () => {
      reached();
      await new Promise<void>((r) => {
        resume = r;
      });
    });
    const pairing = svc.enqueue(searcher(2), ['abc']);
    await atCreate;
    expect(await svc.status(1)).toMatchObject({ state: 'searching', interests: ['abc'] });
    await expect(svc.enqueue(searcher(1), ['def'])).rejects.toMatchObject({ code: 'ERR_MATCH_ALREADY_SEARCHING' });
    resume();
    expect((await pairing).answer.state).toBe('searching');
    expect(calls.created).toEqual([[1, 2]]);
    // Matched, and searching no more.
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
    expect(await queue.topTags(5)).toEqual([]);
  });
});

describe('matchmaking: a ban or timeout committing while an enqueue is in flight', () => {
  const online = async (state: MemoryState, clock: FakeClock) => {
    const until = clock.now().getTime() + 2 * Limits.MATCH_QUEUE_WAIT_MS;
    for (const id of ['1', '2']) await state.addExpiring('online-users', [id], until);
  };

  it('refuses the enqueue with the restriction (403 ERR_TIMED_OUT), so the search does not outlast the timeout', async () => {
    const { clock, state, queue, svc, calls, searcher, holdNextRead, refusals } = setup();
    await online(state, clock);
    const release = holdNextRead();
    // The pre-check has begun; the timeout commits and ends the user's search before it goes on.
    const enqueuing = svc.enqueue(searcher(1), ['abc']);
    clock.advance(5);
    refusals.set(1, 'ERR_TIMED_OUT');
    await svc.endSearch(1);
    release();
    await expect(enqueuing).rejects.toMatchObject({ code: 'ERR_TIMED_OUT' });
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
    // Once the 60 s timeout has ended, a user searching on the same tag is not paired with it.
    refusals.delete(1);
    clock.advance(61_000);
    await svc.enqueue(searcher(2), ['abc']);
    expect(calls.created).toEqual([]);
    expect(await queue.get(2, clock.now().getTime())).toMatchObject({ userId: 2 });
    // A new search of the user, begun after the timeout, is queued as usual (and pairs).
    await svc.enqueue(searcher(1), ['abc']);
    expect(calls.created).toEqual([[2, 1]]);
  });

  it('ends the search in flight without queuing it when the restriction was lifted by the time it is refused', async () => {
    const { clock, state, queue, svc, calls, searcher, holdNextRead } = setup();
    await online(state, clock);
    const release = holdNextRead();
    const enqueuing = svc.enqueue(searcher(1), ['abc']);
    await svc.endSearch(1);
    release();
    const { answer, tellCaller } = await enqueuing;
    expect(answer.state).toBe('searching');
    tellCaller?.();
    expect(calls.other).toEqual([['user:1', 'match:timeout', { interests: ['abc'] }]]);
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
  });
});

describe('matchmaking: a stranger block racing an enqueue', () => {
  const online = async (state: MemoryState, clock: FakeClock) => {
    for (const id of ['1', '2']) await state.addExpiring('online-users', [id], clock.now().getTime() + 60_000);
  };

  it('refuses 403 ERR_STRANGER_BLOCKED when the stored account is blocked, though the session said not', async () => {
    const { clock, state, queue, svc, facts, searcher } = setup();
    await online(state, clock);
    facts.matchBlocked = true;
    await expect(svc.enqueue(searcher(1), ['abc'])).rejects.toMatchObject({ code: 'ERR_STRANGER_BLOCKED' });
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
  });

  it('refuses a second search of a caller whose pairing runs (409 ERR_MATCH_ALREADY_SEARCHING), also in the same turn', async () => {
    const { clock, state, queue, svc, calls, searcher } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(2), ['abc']);
    await svc.enqueue(searcher(3), ['xyz']);
    const results = await Promise.allSettled([svc.enqueue(searcher(1), ['abc']), svc.enqueue(searcher(1), ['xyz'])]);
    expect(results[0]?.status).toBe('fulfilled');
    expect(results[1]).toMatchObject({ status: 'rejected', reason: { code: 'ERR_MATCH_ALREADY_SEARCHING' } });
    expect(calls.created).toEqual([[2, 1]]);
    expect(await queue.get(3, clock.now().getTime())).toMatchObject({ userId: 3 });
  });

  it("ends a search queued beside a pairing that filled the user's slots: out of the queue, told match:timeout", async () => {
    const { clock, state, queue, svc, calls, searcher } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(2), ['abc']);
    // Another search of user 1, whose pre-check read the slots free before the chat committed,
    // reaches the queue once the pairing released its markers, before it marked the slots full.
    const release = queue.release.bind(queue);
    let queued: Promise<{ answer: { state: string } }> | undefined;
    queue.release = async (entries) => {
      await release(entries);
      queued ??= svc.enqueue(searcher(1), ['xyz', 'qrs']);
      await queued;
    };
    const paired = await svc.enqueue(searcher(1), ['abc']);
    expect(paired.tellCaller).toBeDefined();
    expect((await queued)?.answer.state).toBe('searching');
    expect(calls.created).toEqual([[2, 1]]);
    await vi.waitFor(async () => expect(await queue.get(1, clock.now().getTime())).toBeNull());
    expect(calls.other).toContainEqual(['user:1', 'match:timeout', { interests: ['xyz', 'qrs'] }]);
    expect(await queue.topTags(5)).toEqual([]);
  });

  it('refuses an enqueue that read the slots before a pairing filled them and reaches the queue after (409 ERR_MATCH_SLOT_LIMIT)', async () => {
    const { clock, state, queue, svc, searcher, holdNextRead } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(2), ['abc']);
    const release = holdNextRead();
    const enqueuing = svc.enqueue(searcher(1), ['abc']);
    // Meanwhile another search of user 1 paired and its chat committed: the pairing marks the user.
    clock.advance(1);
    expect(await queue.markFull([1], clock.now().getTime())).toEqual([]);
    release();
    await expect(enqueuing).rejects.toMatchObject({ code: 'ERR_MATCH_SLOT_LIMIT' });
    // Nothing queued, the waiting user not taken.
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
    expect(await queue.get(2, clock.now().getTime())).toMatchObject({ userId: 2 });
  });

  it('answers 503 to an enqueue that reaches the queue more than MATCH_PRECHECK_MAX_MS after it began, queuing nothing', async () => {
    const { clock, state, queue, svc, searcher, holdNextRead } = setup();
    await online(state, clock);
    const release = holdNextRead();
    const enqueuing = svc.enqueue(searcher(1), ['abc']);
    clock.advance(MATCH_PRECHECK_MAX_MS + 1);
    release();
    await expect(enqueuing).rejects.toMatchObject({ code: 'ERR_SERVICE_UNAVAILABLE', status: 503 });
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
  });

  it('refuses an enqueue that read the account before the block when the block barred it before the queue call', async () => {
    const { clock, state, queue, svc, searcher, holdNextRead } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(2), ['abc']);
    const release = holdNextRead();
    // The enqueue has read "not blocked"; the block bars the user (its first step) before it goes on.
    const enqueuing = svc.enqueue(searcher(1), ['abc']);
    await queue.bar(1, clock.now().getTime() + 60_000, clock.now().getTime());
    release();
    await expect(enqueuing).rejects.toMatchObject({ code: 'ERR_STRANGER_BLOCKED' });
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
    // The waiting user was not taken.
    expect(await queue.get(2, clock.now().getTime())).toMatchObject({ userId: 2 });
  });
});

describe('matchmaking: searches that end without a pair are told (match:timeout)', () => {
  const online = async (state: MemoryState, clock: FakeClock) => {
    const until = clock.now().getTime() + 2 * Limits.MATCH_QUEUE_WAIT_MS;
    for (const id of ['1', '2']) await state.addExpiring('online-users', [id], until);
  };

  it('tells a user whose entry expired when an enqueue meets it before the deadline sweep, once', async () => {
    const { clock, state, queue, svc, calls, searcher } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc', 'def']);
    clock.advance(Limits.MATCH_QUEUE_WAIT_MS);
    const queued = await svc.enqueue(searcher(2), ['def']);
    expect(queued.tellCaller).toBeUndefined();
    expect(calls.other).toEqual([['user:1', 'match:timeout', { interests: ['abc', 'def'] }]]);
    expect(await queue.get(2, clock.now().getTime())).toMatchObject({ userId: 2 });
    // The sweep finds nothing more to tell.
    expect(await svc.sweepQueue()).toBe(0);
    expect(calls.other).toHaveLength(1);
  });

  it('tells a user whose entry expired when a peer going back to the queue meets it', async () => {
    const { clock, state, queue, svc, calls, facts, searcher, hooks } = setup();
    await online(state, clock);
    // 3 waits first and excludes 1 and 2; 1 queues behind it 10 s later.
    facts.exclude = [1, 2];
    await svc.enqueue(searcher(3), ['abc']);
    facts.exclude = [];
    clock.advance(10_000);
    await svc.enqueue(searcher(1), ['abc']);
    clock.advance(Limits.MATCH_QUEUE_WAIT_MS - 10_001);
    // 2 passes over 3 (1 ms left) and pairs with 1; the chat fails once 3's deadline has passed.
    hooks.beforeCreate = async () => {
      clock.advance(1);
      throw new Error('database down');
    };
    await expect(svc.enqueue(searcher(2), ['abc'])).rejects.toThrow('database down');
    expect(calls.other).toEqual([['user:3', 'match:timeout', { interests: ['abc'] }]]);
    expect(await queue.get(1, clock.now().getTime())).toMatchObject({ userId: 1 });
    expect(await queue.get(3, clock.now().getTime() - 1)).toBeNull();
  });

  it('ends the search of a peer that may no longer use the platform, silently, and pairs the caller on', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    await svc.enqueue(searcher(3), ['def']);
    hooks.refuse = (ids) =>
      ids.includes(1)
        ? { missing: [], inactive: [{ id: 1, state: 2 }], full: [1], matchBlocked: [], cancelled: [], blocked: false }
        : undefined;
    const paired = await svc.enqueue(searcher(2), ['abc', 'def']);
    expect(paired.tellCaller).toBeDefined();
    expect(calls.created).toEqual([[3, 2]]);
    expect(calls.other).toEqual([]);
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
  });

  it('answers a caller banned or timed out since its request began 403 ERR_BANNED / ERR_TIMED_OUT, and puts the peer back', async () => {
    const { clock, state, queue, svc, calls, searcher, hooks } = setup();
    await online(state, clock);
    await svc.enqueue(searcher(1), ['abc']);
    const before = await queue.get(1, clock.now().getTime());
    for (const [state, code] of [
      [2, 'ERR_BANNED'],
      [1, 'ERR_TIMED_OUT'],
      [0, 'ERR_UNAUTHENTICATED'],
    ] as const) {
      hooks.refuse = () => ({
        missing: [],
        inactive: [{ id: 2, state }],
        full: [],
        matchBlocked: [],
        cancelled: [],
        blocked: false,
      });
      await expect(svc.enqueue(searcher(2), ['abc'])).rejects.toMatchObject({ code });
      expect(await queue.get(1, clock.now().getTime())).toEqual(before);
      expect(await queue.get(2, clock.now().getTime())).toBeNull();
    }
    expect(calls.other).toEqual([]);
  });

  it("ends a stranger's search when its session ends, not a registered user's; endSearch ends any", async () => {
    const { clock, state, queue, svc, calls, searcher, strangers } = setup();
    await online(state, clock);
    strangers.add(1);
    await svc.enqueue(searcher(1), ['abc']);
    await svc.enqueue(searcher(2), ['def']);
    await svc.sessionsEnded(1);
    await svc.sessionsEnded(2);
    expect(await queue.get(1, clock.now().getTime())).toBeNull();
    expect(await queue.get(2, clock.now().getTime())).toMatchObject({ userId: 2 });
    await svc.endSearch(2);
    expect(await queue.get(2, clock.now().getTime())).toBeNull();
    expect(calls.other).toEqual([]);
  });

  it("ends a stranger's direct chats once its last session has ended, not while one is live, never a registered user's", async () => {
    const { svc, calls, strangers, live } = setup();
    strangers.add(1);
    strangers.add(3);
    live.add(3);
    await svc.sessionsEnded(1);
    await svc.sessionsEnded(2);
    await svc.sessionsEnded(3);
    expect(calls.leftAll).toEqual([1]);
  });

  it("ends a stranger's direct chats even when its search could not be ended, and reports that failure", async () => {
    const { queue, svc, calls, strangers } = setup();
    strangers.add(1);
    queue.endRestricted = async () => {
      throw new Error('state store down');
    };
    await expect(svc.sessionsEnded(1)).rejects.toThrow('state store down');
    expect(calls.leftAll).toEqual([1]);
  });
});
