import type { Redis } from 'ioredis';
import {
  byCodeUnits,
  CANCEL_MARK_MS,
  type EnqueueResult,
  enqueueResult,
  FULL_MARK_MS,
  type MatchQueue,
  type Placing,
  type QueueEntry,
  type RestoreResult,
  restoreResult,
} from './match-queue.js';
import { BAR, DEQUEUE, MARK_FULL, PLACE, POP_EXPIRED, RELEASE, TOP_TAGS, UNBAR } from './match-queue.lua.js';

/**
 * The cluster-mode queue: every operation is one Lua script, so pairing is atomic across nodes.
 * `client` runs the scripts and must have no command timeout (RedisState.matchQueueConnection): a
 * script that a timeout cut still runs in Redis, and its outcome (a waiting user taken as a peer,
 * entries dropped or barred) would be lost. `reads` (default `client`) answers `get`, `topTags` and
 * `cancelledOf`, which change nothing and may time out.
 */
export class RedisMatchQueue implements MatchQueue {
  constructor(
    private readonly client: Redis,
    private readonly prefix: string,
    private readonly reads: Redis = client,
  ) {}

  async enqueue(entry: QueueEntry, now: number): Promise<EnqueueResult> {
    return enqueueResult(await this.place(entry, now, 'queued'));
  }

  async restore(entry: QueueEntry, now: number): Promise<RestoreResult> {
    return restoreResult(await this.place(entry, now, 'restored'));
  }

  /** Runs PLACE: enqueue (answering `queued`) or restore (`restored`). */
  private async place(entry: QueueEntry, now: number, placed: 'queued' | 'restored'): Promise<Placing> {
    const [kind, peer, tag, ...raws] = (await this.client.eval(
      PLACE,
      0,
      this.prefix,
      String(entry.userId),
      JSON.stringify(entry),
      String(now),
      placed,
    )) as string[];
    const dropped = raws.map((r) => JSON.parse(r) as QueueEntry);
    if (kind === 'paired') return { kind, peer: JSON.parse(peer as string) as QueueEntry, tag: tag as string, dropped };
    return { kind: kind as Exclude<Placing['kind'], 'paired'>, dropped };
  }

  async dequeue(userId: number, now: number): Promise<boolean> {
    return (await this.client.eval(DEQUEUE, 0, this.prefix, String(userId), String(now), String(CANCEL_MARK_MS))) === 1;
  }

  async endRestricted(userId: number, now: number): Promise<boolean> {
    const args = [this.prefix, String(userId), String(now), String(CANCEL_MARK_MS), String(FULL_MARK_MS)];
    return (await this.client.eval(DEQUEUE, 0, ...args)) === 1;
  }

  async release(entries: readonly Pick<QueueEntry, 'userId' | 'enqueuedAt'>[]): Promise<void> {
    if (entries.length === 0) return;
    await this.client.eval(
      RELEASE,
      0,
      this.prefix,
      ...entries.flatMap((e) => [String(e.userId), String(e.enqueuedAt)]),
    );
  }

  async cancelledOf(entries: readonly Pick<QueueEntry, 'userId' | 'enqueuedAt'>[]): Promise<number[]> {
    if (entries.length === 0) return [];
    const marks = await this.reads.zmscore(`${this.prefix}mq:cancelled`, ...entries.map((e) => String(e.userId)));
    return entries.filter((e, i) => marks[i] != null && e.enqueuedAt <= Number(marks[i])).map((e) => e.userId);
  }

  async bar(userId: number, until: number, now: number): Promise<QueueEntry | null> {
    const raw = (await this.client.eval(BAR, 0, this.prefix, String(userId), String(until), String(now))) as
      | string
      | null;
    return raw ? (JSON.parse(raw) as QueueEntry) : null;
  }

  async markFull(userIds: number[], since: number): Promise<QueueEntry[]> {
    const raws = (await this.client.eval(
      MARK_FULL,
      0,
      this.prefix,
      String(since),
      String(FULL_MARK_MS),
      ...userIds.map(String),
    )) as string[];
    return raws.map((raw) => JSON.parse(raw) as QueueEntry);
  }

  async unbar(userId: number): Promise<void> {
    await this.client.eval(UNBAR, 0, this.prefix, String(userId));
  }

  async get(userId: number, now: number): Promise<QueueEntry | null> {
    // Queued, or out of the queue in a pairing (one round trip for both).
    const raws = await this.reads.mget(`${this.prefix}mq:e:${userId}`, `${this.prefix}mq:o:${userId}`);
    for (const raw of raws) {
      const e = raw ? (JSON.parse(raw) as QueueEntry) : null;
      if (e && e.deadline > now) return e;
    }
    return null;
  }

  async popExpired(now: number, limit: number): Promise<QueueEntry[]> {
    const raws = (await this.client.eval(POP_EXPIRED, 0, this.prefix, String(now), String(limit))) as string[];
    return raws.map((r) => JSON.parse(r) as QueueEntry);
  }

  async topTags(n: number) {
    if (n <= 0) return [];
    const flat = (await this.reads.eval(TOP_TAGS, 0, this.prefix, String(n))) as string[];
    const out: { tag: string; searching: number }[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const searching = Number(flat[i + 1]);
      if (searching > 0) out.push({ tag: flat[i] as string, searching });
    }
    // Tags above the last count came most first but their ties in reverse order.
    return out.sort((a, b) => b.searching - a.searching || byCodeUnits(a.tag, b.tag));
  }
}
