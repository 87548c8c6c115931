import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { clearRedisPrefix, redisForUnitCases, SERVICE_URLS } from '../../../test/support/services.js';
import {
  CANCEL_MARK_MS,
  CANDIDATE_SCAN_LIMIT,
  CANDIDATES_PER_TAG,
  DROPPED_SCAN_LIMIT,
  FULL_MARK_MS,
  type MatchQueue,
  type QueueEntry,
} from './match-queue.js';
import { MemoryMatchQueue } from './match-queue.memory.js';
import { RedisMatchQueue } from './match-queue.redis.js';

const NOW = 1_000_000;
const entry = (userId: number, tags: string[], over: Partial<QueueEntry> = {}): QueueEntry => ({
  userId,
  tags,
  enqueuedAt: NOW + userId,
  deadline: NOW + 120_000,
  exclude: [],
  country: null,
  ...over,
});

/** A placing's answer that took nobody out of the queue on its way. */
const placed = (kind: string) => ({ kind, dropped: [] });
const QUEUED = placed('queued');

const redisProblem = await redisForUnitCases('the Redis match queue contract');

const clients: Redis[] = [];
const prefixes: string[] = [];
afterAll(async () => {
  for (const p of prefixes) await clearRedisPrefix(p);
  for (const c of clients) c.disconnect();
});

/**
 * Each implementation gives two handles on one queue: two nodes. In memory that is one instance
 * (one node by definition); in Redis, two connections sharing a prefix, as two nodes would.
 */
const implementations: [string, () => [MatchQueue, MatchQueue]][] = [
  [
    'memory',
    () => {
      const q = new MemoryMatchQueue();
      return [q, q];
    },
  ],
];
if (!redisProblem) {
  implementations.push([
    'redis',
    () => {
      const prefix = `parlor-test:mq:${Math.random().toString(36).slice(2)}:`;
      prefixes.push(prefix);
      const [a, b] = [new Redis(SERVICE_URLS.redis), new Redis(SERVICE_URLS.redis)];
      clients.push(a, b);
      return [new RedisMatchQueue(a, prefix), new RedisMatchQueue(b, prefix)];
    },
  ]);
}

describe.each(implementations)('the %s match queue', (_name, makeNodes) => {
  const make = () => makeNodes()[0];
  it('queues a lone user, then pairs the next user sharing a tag, first tag first', async () => {
    const q = make();
    expect(await q.enqueue(entry(1, ['music', 'games']), NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(2, ['books']), NOW)).toEqual(QUEUED);
    const res = await q.enqueue(entry(3, ['books', 'games']), NOW);
    expect(res).toMatchObject({ kind: 'paired', tag: 'books', peer: { userId: 2 } });
    // Out of the queue; searching until the pairing is over.
    expect(await q.topTags(5)).toEqual([
      { tag: 'games', searching: 1 },
      { tag: 'music', searching: 1 },
    ]);
    await q.release([entry(2, ['books']), entry(3, ['books', 'games'])]);
    expect(await q.get(2, NOW)).toBeNull();
    expect(await q.get(3, NOW)).toBeNull();
    expect(await q.get(1, NOW)).toMatchObject({ userId: 1, tags: ['music', 'games'] });
  });

  it('answers already for a user searching, pairs the longest waiting, skips exclusions both ways', async () => {
    const q = make();
    expect(await q.enqueue(entry(1, ['chess'], { exclude: [9] }), NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(1, ['chess']), NOW)).toEqual(placed('already'));
    // 1 excludes 9, so 9 waits too.
    expect(await q.enqueue(entry(9, ['chess']), NOW)).toEqual(QUEUED);
    // 8 excludes 1 (the longest waiting), so it gets 9.
    expect(await q.enqueue(entry(8, ['chess'], { exclude: [1] }), NOW)).toMatchObject({
      kind: 'paired',
      peer: { userId: 9 },
    });
    expect(await q.enqueue(entry(7, ['chess']), NOW)).toMatchObject({ kind: 'paired', peer: { userId: 1 } });
  });

  it('never pairs with an expired entry: takes it out and answers it (dropped), and pops expired entries once', async () => {
    const q = make();
    await q.enqueue(entry(1, ['cats'], { deadline: NOW + 10 }), NOW);
    await q.enqueue(entry(2, ['dogs'], { deadline: NOW + 10 }), NOW);
    expect(await q.enqueue(entry(3, ['cats']), NOW + 20)).toEqual({
      kind: 'queued',
      dropped: [entry(1, ['cats'], { deadline: NOW + 10 })],
    });
    const popped = await q.popExpired(NOW + 20, 10);
    expect(popped.map((e) => e.userId)).toEqual([2]);
    expect(await q.popExpired(NOW + 20, 10)).toEqual([]);
    expect(await q.topTags(5)).toEqual([{ tag: 'cats', searching: 1 }]);
  });

  it('puts a paired peer back as it was (place in line, deadline, exclusions) without pairing it; not when expired or searching again', async () => {
    const q = make();
    expect(await q.enqueue(entry(1, ['aaa'], { exclude: [3, 5] }), NOW)).toEqual(QUEUED);
    const first = await q.enqueue(entry(2, ['aaa']), NOW);
    if (first.kind !== 'paired') throw new Error(`not paired: ${first.kind}`);
    expect(await q.enqueue(entry(3, ['aaa'], { exclude: [1] }), NOW)).toEqual(QUEUED);
    expect(await q.restore(first.peer, NOW)).toEqual(placed('restored'));
    expect(await q.get(1, NOW)).toEqual(entry(1, ['aaa'], { exclude: [3, 5] }));
    expect(await q.topTags(5)).toEqual([{ tag: 'aaa', searching: 2 }]);
    // Back in its place: ahead of 3, who enqueued after it.
    expect(await q.enqueue(entry(6, ['aaa']), NOW)).toMatchObject({ kind: 'paired', peer: { userId: 1 } });
    expect(await q.restore(first.peer, NOW)).toEqual(placed('restored'));
    // Its exclusions stand: 5 gets 3.
    expect(await q.enqueue(entry(5, ['aaa']), NOW)).toMatchObject({ kind: 'paired', peer: { userId: 3 } });
    // Searching (here: still queued), it is not put back over its current entry.
    expect(await q.restore(entry(1, ['bbb']), NOW)).toEqual(placed('already'));
    expect(await q.get(1, NOW)).toMatchObject({ tags: ['aaa'] });
    // Past its deadline it is not put back.
    expect(await q.restore(entry(7, ['aaa'], { deadline: NOW + 10 }), NOW + 10)).toEqual(placed('expired'));
    expect(await q.get(7, NOW)).toBeNull();
    expect(await q.topTags(5)).toEqual([{ tag: 'aaa', searching: 1 }]);
  });

  it('pairs an entry it puts back with a compatible user that queued while it was out', async () => {
    const q = make();
    expect(await q.enqueue(entry(1, ['aaa', 'bbb']), NOW)).toEqual(QUEUED);
    const first = await q.enqueue(entry(2, ['aaa']), NOW);
    if (first.kind !== 'paired') throw new Error(`not paired: ${first.kind}`);
    // 3 excludes 1; 4 waits on 1's second tag.
    expect(await q.enqueue(entry(3, ['aaa'], { exclude: [1] }), NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(4, ['bbb']), NOW)).toEqual(QUEUED);
    expect(await q.restore(first.peer, NOW)).toEqual({
      kind: 'paired',
      peer: entry(4, ['bbb']),
      tag: 'bbb',
      dropped: [],
    });
    await q.release([entry(1, ['aaa', 'bbb']), entry(4, ['bbb'])]);
    expect(await q.get(1, NOW)).toBeNull();
    expect(await q.get(4, NOW)).toBeNull();
    expect(await q.topTags(5)).toEqual([{ tag: 'aaa', searching: 1 }]);
  });

  it('answers the expired users a put-back entry takes out on its way (dropped)', async () => {
    const q = make();
    // 3 waits first (and excludes 1 and 2) with an earlier deadline; 1 waits behind it.
    expect(await q.enqueue(entry(3, ['aaa'], { exclude: [1, 2], deadline: NOW + 50 }), NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(1, ['aaa']), NOW)).toEqual(QUEUED);
    const first = await q.enqueue(entry(2, ['aaa']), NOW);
    expect(first).toMatchObject({ kind: 'paired', peer: { userId: 1 }, dropped: [] });
    if (first.kind !== 'paired') throw new Error(`not paired: ${first.kind}`);
    expect(await q.restore(first.peer, NOW + 50)).toEqual({
      kind: 'restored',
      dropped: [entry(3, ['aaa'], { exclude: [1, 2], deadline: NOW + 50 })],
    });
    expect(await q.popExpired(NOW + 50, 10)).toEqual([]);
    expect(await q.topTags(5)).toEqual([{ tag: 'aaa', searching: 1 }]);
  });

  /**
   * Queues `ids` on `tag`, in that order (calls sent together: one connection runs them in
   * order), each excluding those before it so that none pairs with another; `over(id)` adds to
   * an entry (more exclusions, a deadline).
   */
  const line = async (
    q: MatchQueue,
    ids: number[],
    tag: string,
    over: (id: number) => Partial<QueueEntry> = () => ({}),
  ) => {
    const results = await Promise.all(
      ids.map((id, i) => {
        const more = over(id);
        return q.enqueue(entry(id, [tag], { ...more, exclude: [...ids.slice(0, i), ...(more.exclude ?? [])] }), NOW);
      }),
    );
    for (const r of results) expect(r).toEqual(QUEUED);
  };
  const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
  const [V, C, W] = [90_001, 90_002, 90_003];

  it(`looks past ${CANDIDATES_PER_TAG} incompatible users, page after page, dropping expired ones met on the way`, async () => {
    const q = make();
    // 2.4 pages of users ahead; every third one expires; the odd ones exclude C, C excludes the even ones.
    const ahead = range(1, 2 * CANDIDATES_PER_TAG + 20);
    const expires = (id: number) => id % 3 === 0;
    const over = (id: number) => ({
      exclude: id % 2 === 1 ? [C] : [],
      ...(expires(id) ? { deadline: NOW + 10 } : {}),
    });
    await line(q, ahead, 'music', over);
    expect(await q.enqueue(entry(V, ['music'], { exclude: ahead }), NOW)).toEqual(QUEUED);
    const res = await q.enqueue(entry(C, ['music'], { exclude: ahead.filter((id) => id % 2 === 0) }), NOW + 20);
    const expired = (id: number) =>
      entry(id, ['music'], { exclude: [...ahead.slice(0, id - 1), ...(over(id).exclude ?? [])], deadline: NOW + 10 });
    // Every expired user ahead that C reads (not those it excludes, passed over) is taken out, in
    // line order: none is skipped where a page ends, though each shifts the users behind it.
    expect(res).toEqual({
      kind: 'paired',
      peer: entry(V, ['music'], { exclude: ahead }),
      tag: 'music',
      dropped: ahead.filter((id) => expires(id) && id % 2 === 1).map(expired),
    });
    // The others stay for the deadline sweep: each expired entry is answered once.
    const swept = (await q.popExpired(NOW + 20, 1_000)).sort((a, b) => a.userId - b.userId);
    expect(swept).toEqual(ahead.filter((id) => expires(id) && id % 2 === 0).map(expired));
    expect(await q.topTags(5)).toEqual([{ tag: 'music', searching: ahead.filter((id) => !expires(id)).length }]);
  });

  it(`looks at up to CANDIDATE_SCAN_LIMIT (${CANDIDATE_SCAN_LIMIT}) users on a tag, then tries the next tag`, async () => {
    const q = make();
    const ids = range(1, CANDIDATE_SCAN_LIMIT);
    const C2 = C + 10;
    // The odd ones exclude C and C2 (their entries are read), C and C2 exclude the even ones (passed over).
    await line(q, ids, 'music', (id) => ({ exclude: id % 2 === 1 ? [C, C2] : [] }));
    const evens = ids.filter((id) => id % 2 === 0);
    expect(await q.enqueue(entry(V, ['music'], { exclude: ids }), NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(W, ['jazz']), NOW)).toEqual(QUEUED);
    // V is the first user past the limit on 'music': C gets W on its next tag.
    expect(await q.enqueue(entry(C, ['music', 'jazz'], { exclude: evens }), NOW)).toMatchObject({
      kind: 'paired',
      tag: 'jazz',
      peer: { userId: W },
    });
    // One user ahead leaves: V is now the last one a newcomer looks at, and C2 gets it.
    expect(await q.dequeue(2, NOW)).toBe(true);
    expect(await q.enqueue(entry(C2, ['music', 'jazz'], { exclude: evens }), NOW)).toMatchObject({
      kind: 'paired',
      tag: 'music',
      peer: { userId: V },
    });
  });

  it(`does not count expired users toward the scan limit: up to DROPPED_SCAN_LIMIT (${DROPPED_SCAN_LIMIT}) leave on the way`, async () => {
    const q = make();
    // As many expired users ahead as the scan limit, then a compatible user.
    expect(DROPPED_SCAN_LIMIT).toBeGreaterThanOrEqual(CANDIDATE_SCAN_LIMIT);
    const ahead = range(1, CANDIDATE_SCAN_LIMIT);
    await line(q, ahead, 'music', () => ({ deadline: NOW + 10 }));
    expect(await q.enqueue(entry(V, ['music'], { exclude: ahead }), NOW)).toEqual(QUEUED);
    const res = await q.enqueue(entry(C, ['music']), NOW + 20);
    expect(res).toMatchObject({ kind: 'paired', tag: 'music', peer: { userId: V } });
    expect(res.dropped.map((e) => e.userId)).toEqual(ahead);
    expect(await q.popExpired(NOW + 20, 10)).toEqual([]);
    expect(await q.topTags(5)).toEqual([]);
  });

  it("replaces a user's own expired entry when it searches again, without answering it (dropped) or leaving it for the sweep", async () => {
    const q = make();
    expect(await q.enqueue(entry(1, ['aaa'], { deadline: NOW + 10 }), NOW)).toEqual(QUEUED);
    const again = entry(1, ['bbb'], { enqueuedAt: NOW + 20 });
    expect(await q.enqueue(again, NOW + 20)).toEqual(QUEUED);
    expect(await q.popExpired(NOW + 20, 10)).toEqual([]);
    expect(await q.get(1, NOW + 20)).toEqual(again);
    expect(await q.topTags(5)).toEqual([{ tag: 'bbb', searching: 1 }]);
  });

  it('keeps a peer a pairing took out, and its caller, searching (get; their enqueues answer already) until released, restored, dequeued or past its deadline', async () => {
    const q = make();
    const one = entry(1, ['aaa'], { deadline: NOW + 1_000 });
    const two = entry(2, ['aaa']);
    expect(await q.enqueue(one, NOW)).toEqual(QUEUED);
    expect(await q.enqueue(two, NOW)).toMatchObject({ kind: 'paired', peer: one });
    expect(await q.get(1, NOW + 5)).toEqual(one);
    expect(await q.enqueue(entry(1, ['bbb'], { enqueuedAt: NOW + 5 }), NOW + 5)).toEqual(placed('already'));
    // The caller, never queued, searches until the pairing is over too: a second search of its
    // user (another tab) is not paired beside it, and takes nobody out.
    expect(await q.enqueue(entry(3, ['ccc']), NOW)).toEqual(QUEUED);
    expect(await q.get(2, NOW + 5)).toEqual(two);
    expect(await q.enqueue(entry(2, ['ccc'], { enqueuedAt: NOW + 5 }), NOW + 5)).toEqual(placed('already'));
    expect(await q.topTags(5)).toEqual([{ tag: 'ccc', searching: 1 }]);
    await q.dequeue(3, NOW + 5);
    // Releasing another entry of the user (or another user's) leaves it.
    await q.release([
      { userId: 1, enqueuedAt: NOW + 5 },
      { userId: 2, enqueuedAt: NOW + 5 },
    ]);
    expect(await q.get(1, NOW + 5)).toEqual(one);
    expect(await q.get(2, NOW + 5)).toEqual(two);
    await q.release([one, two]);
    expect(await q.get(1, NOW + 5)).toBeNull();
    expect(await q.get(2, NOW + 5)).toBeNull();
    // Restored: queued again; restored into a pairing: both read as searching until released.
    const ten = entry(10, ['xxx']);
    expect(await q.enqueue(ten, NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(11, ['xxx']), NOW)).toMatchObject({ kind: 'paired', peer: ten });
    expect(await q.restore(ten, NOW + 5)).toEqual(placed('restored'));
    expect(await q.get(10, NOW + 5)).toEqual(ten);
    expect(await q.enqueue(entry(12, ['xxx']), NOW + 5)).toMatchObject({ kind: 'paired', peer: ten });
    expect(await q.enqueue(entry(13, ['xxx']), NOW + 5)).toEqual(QUEUED);
    expect(await q.restore(ten, NOW + 6)).toMatchObject({ kind: 'paired', peer: { userId: 13 } });
    expect(await q.get(10, NOW + 6)).toEqual(ten);
    expect(await q.get(13, NOW + 6)).toEqual(entry(13, ['xxx']));
    await q.release([entry(13, ['xxx']), ten]);
    expect(await q.get(10, NOW + 6)).toBeNull();
    expect(await q.get(13, NOW + 6)).toBeNull();
    // Dequeued: no longer searching.
    expect(await q.enqueue(entry(6, ['ccc']), NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(7, ['ccc']), NOW)).toMatchObject({ kind: 'paired', peer: { userId: 6 } });
    expect(await q.dequeue(6, NOW + 5)).toBe(false);
    expect(await q.get(6, NOW + 5)).toBeNull();
    // Past its deadline (a pairing that never ended: its node went down): a new search is queued.
    const eight = entry(8, ['ddd'], { deadline: NOW + 50 });
    expect(await q.enqueue(eight, NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(9, ['ddd']), NOW)).toMatchObject({ kind: 'paired', peer: eight });
    expect(await q.get(8, NOW + 49)).toEqual(eight);
    expect(await q.get(8, NOW + 50)).toBeNull();
    expect(await q.enqueue(entry(8, ['ddd'], { enqueuedAt: NOW + 50 }), NOW + 50)).toEqual(QUEUED);
  });

  it("ends a restricted user's search and refuses its enqueues and restores that began at or before the mark, for FULL_MARK_MS", async () => {
    const q = make();
    expect(await q.enqueue(entry(1, ['aaa']), NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(2, ['bbb'], { exclude: [1] }), NOW)).toEqual(QUEUED);
    expect(await q.endRestricted(1, NOW + 10)).toBe(true);
    expect(await q.get(1, NOW + 10)).toBeNull();
    // Began before the mark (an enqueue in flight): refused, nothing queued, nobody taken; also
    // after a later search of another node lowered the cancelled mark.
    for (const at of [NOW + 5, NOW + 10]) {
      const inFlight = entry(1, ['bbb'], { enqueuedAt: at });
      expect(await q.enqueue(inFlight, NOW + 20)).toEqual(placed('restricted'));
      expect(await q.restore(inFlight, NOW + 20)).toEqual(placed('restricted'));
    }
    expect(await q.endRestricted(3, NOW + 10)).toBe(false);
    expect(await q.enqueue(entry(3, ['ccc'], { enqueuedAt: NOW + 11 }), NOW + 11)).toEqual(QUEUED);
    expect(await q.enqueue(entry(1, ['bbb'], { enqueuedAt: NOW + 9 }), NOW + 30)).toEqual(placed('restricted'));
    expect(await q.get(2, NOW + 30)).toMatchObject({ userId: 2 });
    // Began after it: placed as usual. A dequeue places no such mark.
    expect(await q.enqueue(entry(1, ['ddd'], { enqueuedAt: NOW + 11 }), NOW + 30)).toEqual(QUEUED);
    await q.dequeue(4, NOW + 10);
    expect(await q.enqueue(entry(4, ['eee'], { enqueuedAt: NOW }), NOW + 30)).toEqual(QUEUED);
    // A later mark of another user forgets marks older than FULL_MARK_MS.
    await q.endRestricted(5, NOW + 10);
    await q.endRestricted(6, NOW + 10 + FULL_MARK_MS);
    const stale = entry(5, ['fff'], { enqueuedAt: NOW + 5, deadline: NOW + 2 * FULL_MARK_MS });
    expect(await q.enqueue(stale, NOW + 10 + FULL_MARK_MS)).toEqual(QUEUED);
  });

  it('bars a user: out of the queue at once, its enqueues and restores refused until the bar ends or is lifted', async () => {
    const q = make();
    expect(await q.enqueue(entry(1, ['aaa']), NOW)).toEqual(QUEUED);
    expect(await q.enqueue(entry(2, ['bbb']), NOW)).toEqual(QUEUED);
    // It answers the entry it took out (the user is told its search ended), and null with none.
    expect(await q.bar(1, NOW + 100, NOW)).toEqual(entry(1, ['aaa']));
    expect(await q.get(1, NOW)).toBeNull();
    expect(await q.topTags(5)).toEqual([{ tag: 'bbb', searching: 1 }]);
    expect(await q.bar(1, NOW + 100, NOW)).toBeNull();
    await q.unbar(1);
    expect(await q.enqueue(entry(1, ['bbb']), NOW + 99)).toEqual(placed('barred'));
    expect(await q.restore(entry(1, ['aaa']), NOW + 99)).toEqual(placed('barred'));
    // Nobody pairs with it or is taken by its refused enqueue.
    expect(await q.get(2, NOW + 99)).toMatchObject({ userId: 2 });
    expect(await q.enqueue(entry(1, ['ccc']), NOW + 100)).toEqual(QUEUED);
    await q.bar(3, NOW + 1_000, NOW + 100);
    await q.unbar(3);
    expect(await q.enqueue(entry(3, ['ddd']), NOW + 100)).toEqual(QUEUED);
  });

  it('adds up bars of one user: lifting one leaves the others, the user stays barred until the latest ends', async () => {
    const q = make();
    // Two blocks of one stranger at once: the first fails and lifts its bar, the second stands.
    await q.bar(1, NOW + 1_000, NOW);
    await q.bar(1, NOW + 500, NOW + 10);
    await q.unbar(1);
    expect(await q.enqueue(entry(1, ['aaa']), NOW + 999)).toEqual(placed('barred'));
    expect(await q.enqueue(entry(1, ['aaa']), NOW + 1_000)).toEqual(QUEUED);
    // Both lifted: free at once.
    await q.bar(2, NOW + 5_000, NOW + 1_000);
    await q.bar(2, NOW + 5_000, NOW + 1_000);
    await q.unbar(2);
    expect(await q.enqueue(entry(2, ['bbb']), NOW + 1_001)).toEqual(placed('barred'));
    await q.unbar(2);
    expect(await q.enqueue(entry(2, ['bbb']), NOW + 1_001)).toEqual(QUEUED);
    // A bar that ended is forgotten with its holders: a new one is lifted by one unbar.
    await q.bar(3, NOW + 2_000, NOW + 1_000);
    await q.bar(3, NOW + 9_000, NOW + 2_000);
    await q.unbar(3);
    expect(await q.enqueue(entry(3, ['ccc']), NOW + 2_001)).toEqual(QUEUED);
  });

  it('marks users whose slots filled: their entries leave the queue, and entries that began before the mark are refused until it ends', async () => {
    const q = make();
    const queued = entry(1, ['aaa', 'bbb']);
    expect(await q.enqueue(queued, NOW)).toEqual(QUEUED);
    const filledAt = NOW + 100;
    expect(await q.markFull([1, 2], filledAt)).toEqual([queued]);
    expect(await q.get(1, filledAt)).toBeNull();
    expect(await q.topTags(5)).toEqual([]);
    // Began before the mark: refused, as enqueue and as restore; nothing queued, nobody taken.
    expect(await q.enqueue(entry(3, ['ccc']), filledAt)).toEqual(QUEUED);
    expect(await q.enqueue(entry(2, ['ccc'], { enqueuedAt: filledAt - 1 }), filledAt + 5)).toEqual(placed('full'));
    expect(await q.restore(entry(2, ['ccc'], { enqueuedAt: filledAt - 1 }), filledAt + 5)).toEqual(placed('full'));
    expect(await q.get(3, filledAt + 5)).toMatchObject({ userId: 3 });
    expect(await q.enqueue(entry(2, ['ccc'], { enqueuedAt: filledAt }), filledAt + 5)).toEqual(placed('full'));
    // Began after the mark (read the filled slots itself): placed as usual, and a mark arriving
    // late (its call slower than the user's leave and new search) leaves it queued.
    const fresh = entry(2, ['ddd'], { enqueuedAt: filledAt + 1 });
    expect(await q.enqueue(fresh, filledAt + 5)).toEqual(QUEUED);
    expect(await q.markFull([2], filledAt)).toEqual([]);
    expect(await q.get(2, filledAt + 5)).toEqual(fresh);
    // A later mark of other users forgets marks older than FULL_MARK_MS.
    await q.markFull([4], filledAt + FULL_MARK_MS);
    const stale = entry(1, ['eee'], { enqueuedAt: filledAt - 1, deadline: filledAt + 2 * FULL_MARK_MS });
    expect(await q.enqueue(stale, filledAt + FULL_MARK_MS)).toEqual(QUEUED);
  });

  it('dequeues and counts tags by depth', async () => {
    const q = make();
    await q.enqueue(entry(1, ['aaa', 'bbb'], { exclude: [2, 3] }), NOW);
    await q.enqueue(entry(2, ['bbb']), NOW);
    await q.enqueue(entry(3, ['bbb', 'ccc'], { exclude: [2] }), NOW);
    expect(await q.topTags(1)).toEqual([{ tag: 'bbb', searching: 3 }]);
    expect((await q.topTags(5)).map((t) => t.searching)).toEqual([3, 1, 1]);
    for (const id of [1, 2, 3]) expect(await q.dequeue(id, NOW)).toBe(true);
    expect(await q.dequeue(1, NOW)).toBe(false);
    expect(await q.topTags(5)).toEqual([]);
  });

  it('orders tags of equal depth by tag (code units), also where the top n cuts through them', async () => {
    const q = make();
    // Depths: zzz 3; bbb, ddd, aaa 2; ccc, eee, b1 1 (queued so that no one pairs).
    const tagsOf: [number, string[]][] = [
      [1, ['zzz', 'bbb', 'ccc']],
      [2, ['zzz', 'ddd', 'aaa']],
      [3, ['zzz', 'bbb', 'eee']],
      [4, ['ddd', 'aaa', 'b1']],
    ];
    const ids = tagsOf.map(([id]) => id);
    for (const [id, tags] of tagsOf) expect(await q.enqueue(entry(id, tags, { exclude: ids }), NOW)).toEqual(QUEUED);
    expect(await q.topTags(10)).toEqual([
      { tag: 'zzz', searching: 3 },
      { tag: 'aaa', searching: 2 },
      { tag: 'bbb', searching: 2 },
      { tag: 'ddd', searching: 2 },
      { tag: 'b1', searching: 1 },
      { tag: 'ccc', searching: 1 },
      { tag: 'eee', searching: 1 },
    ]);
    expect((await q.topTags(3)).map((t) => t.tag)).toEqual(['zzz', 'aaa', 'bbb']);
    expect((await q.topTags(5)).map((t) => t.tag)).toEqual(['zzz', 'aaa', 'bbb', 'ddd', 'b1']);
    expect(await q.topTags(0)).toEqual([]);
  });

  it('does not put back an entry whose search a dequeue ended while a pairing had it out, and names its user to cancelledOf; a later search goes back', async () => {
    const q = make();
    expect(await q.enqueue(entry(1, ['aaa']), NOW)).toEqual(QUEUED);
    const first = await q.enqueue(entry(2, ['aaa']), NOW);
    if (first.kind !== 'paired') throw new Error(`not paired: ${first.kind}`);
    // 1 stops searching while the pair is being made: nothing to remove, but the search has ended.
    expect(await q.cancelledOf([first.peer, entry(2, ['aaa'])])).toEqual([]);
    expect(await q.dequeue(1, NOW + 5)).toBe(false);
    // The pairing asks before it makes the chat: 1's search has ended, 2's has not.
    expect(await q.cancelledOf([entry(2, ['aaa']), first.peer])).toEqual([1]);
    expect(await q.cancelledOf([entry(1, ['aaa'], { enqueuedAt: NOW + 6 })])).toEqual([]);
    expect(await q.restore(first.peer, NOW + 10)).toEqual(placed('cancelled'));
    expect(await q.get(1, NOW + 10)).toBeNull();
    expect(await q.enqueue(entry(3, ['aaa']), NOW + 10)).toEqual(QUEUED);
    // A search that began after the dequeue is put back as usual, and so is another user's.
    const again = entry(1, ['aaa'], { enqueuedAt: NOW + 6 });
    expect(await q.restore(again, NOW + 10)).toMatchObject({ kind: 'paired', peer: { userId: 3 } });
    expect(await q.restore(entry(4, ['bbb'], { enqueuedAt: NOW }), NOW + 10)).toEqual(placed('restored'));
    // Enqueues are not refused by the mark. A later mark keeps the latest time.
    expect(await q.enqueue(entry(5, ['ccc'], { enqueuedAt: NOW }), NOW + 10)).toEqual(QUEUED);
    await q.dequeue(5, NOW + 20);
    await q.dequeue(5, NOW + 15);
    expect(await q.restore(entry(5, ['ccc'], { enqueuedAt: NOW + 20 }), NOW + 30)).toEqual(placed('cancelled'));
    // A search begun after the dequeue whose start reads as at or before it (the same millisecond,
    // or another node's clock a little behind) is not covered: the enqueue lowers the mark below it.
    await q.dequeue(7, NOW + 50);
    const fresh = entry(7, ['ddd'], { enqueuedAt: NOW + 50 });
    expect(await q.enqueue(fresh, NOW + 50)).toEqual(QUEUED);
    const took = await q.enqueue(entry(8, ['ddd'], { enqueuedAt: NOW + 51 }), NOW + 51);
    expect(took).toMatchObject({ kind: 'paired', peer: { userId: 7 } });
    expect(await q.restore(fresh, NOW + 52)).toEqual(placed('restored'));
    // The search the dequeue ended (begun earlier) is still refused.
    expect(await q.restore(entry(7, ['ddd'], { enqueuedAt: NOW + 40 }), NOW + 52)).toEqual(placed('cancelled'));
    // A mark is forgotten after CANCEL_MARK_MS (by then every entry it covers is past its deadline).
    await q.dequeue(6, NOW + 20 + CANCEL_MARK_MS);
    const late = entry(5, ['ccc'], { enqueuedAt: NOW + 20, deadline: NOW + 40 + CANCEL_MARK_MS });
    expect(await q.restore(late, NOW + 30 + CANCEL_MARK_MS)).toEqual(placed('restored'));
  });

  it('does not answer expired to a restore past its deadline whose search a dequeue ended, or whose user searches again: cancelled, already', async () => {
    const q = make();
    expect(await q.enqueue(entry(1, ['aaa'], { deadline: NOW + 10 }), NOW)).toEqual(QUEUED);
    const first = await q.enqueue(entry(2, ['aaa']), NOW);
    if (first.kind !== 'paired') throw new Error(`not paired: ${first.kind}`);
    // 1 dequeues while the pairing has it out, and its deadline passes before it comes back.
    await q.dequeue(1, NOW + 5);
    expect(await q.restore(first.peer, NOW + 10)).toEqual(placed('cancelled'));
    // 3's old search is out past its deadline while 3 searches again: that search is left alone.
    expect(await q.enqueue(entry(3, ['bbb'], { deadline: NOW + 10 }), NOW)).toEqual(QUEUED);
    const second = await q.enqueue(entry(4, ['bbb']), NOW);
    if (second.kind !== 'paired') throw new Error(`not paired: ${second.kind}`);
    const again = entry(3, ['ccc'], { enqueuedAt: NOW + 10, deadline: NOW + 130 });
    expect(await q.enqueue(again, NOW + 10)).toEqual(QUEUED);
    expect(await q.restore(second.peer, NOW + 10)).toEqual(placed('already'));
    expect(await q.get(3, NOW + 10)).toEqual(again);
    // Neither: expired.
    expect(await q.restore(entry(5, ['aaa'], { deadline: NOW + 10 }), NOW + 10)).toEqual(placed('expired'));
  });

  it('under concurrency on two nodes: nobody in two pairs, nobody with itself or an excluded user, every pair shares a tag, no pairable users left waiting', async () => {
    const tags = ['t01', 't02', 't03', 't04', 't05'];
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            tags: fc.uniqueArray(fc.constantFrom(...tags), { minLength: 1, maxLength: 3 }),
            exclude: fc.uniqueArray(fc.integer({ min: 1, max: 30 }), { maxLength: 3 }),
          }),
          { minLength: 2, maxLength: 30 },
        ),
        async (users) => {
          const [q, other] = makeNodes();
          // Users alternate between the two handles, as they would between two nodes.
          const results = await Promise.all(
            users.map((u, i) => (i % 2 === 0 ? q : other).enqueue(entry(i + 1, u.tags, { exclude: u.exclude }), NOW)),
          );
          const seen = new Set<number>();
          for (const [i, r] of results.entries()) {
            if (r.kind !== 'paired') continue;
            const me = i + 1;
            const peer = r.peer.userId;
            expect(peer).not.toBe(me);
            expect(seen.has(me) || seen.has(peer)).toBe(false);
            seen.add(me);
            seen.add(peer);
            const mine = users[i];
            const theirs = users[peer - 1];
            expect(mine?.tags).toContain(r.tag);
            expect(theirs?.tags).toContain(r.tag);
            expect(mine?.exclude).not.toContain(peer);
            expect(theirs?.exclude).not.toContain(me);
          }
          // Whoever is in a pair is out of the queue (once the pairings are over); everyone else
          // was queued and still waits.
          await q.release(results.flatMap((r, i) => (r.kind === 'paired' ? [r.peer, entry(i + 1, [])] : [])));
          const waiting: number[] = [];
          for (let id = 1; id <= users.length; id++) {
            const queued = await q.get(id, NOW);
            if (seen.has(id)) {
              expect(queued).toBeNull();
            } else {
              expect(results[id - 1]).toEqual(QUEUED);
              expect(queued).toMatchObject({ userId: id });
              waiting.push(id);
            }
          }
          // And no two of those waiting could have been paired: the queue left no match undone.
          for (const a of waiting) {
            for (const b of waiting) {
              if (a >= b) continue;
              const [ua, ub] = [users[a - 1], users[b - 1]];
              const shareTag = ua?.tags.some((t) => ub?.tags.includes(t));
              const allowed = !ua?.exclude.includes(b) && !ub?.exclude.includes(a);
              expect(shareTag && allowed, `users ${a} and ${b} both still waiting`).toBe(false);
            }
          }
        },
      ),
      { numRuns: 25 },
    );
  });
});
