import {
  byCodeUnits,
  CANCEL_MARK_MS,
  CANDIDATE_SCAN_LIMIT,
  DROPPED_SCAN_LIMIT,
  type EnqueueResult,
  enqueueResult,
  FULL_MARK_MS,
  type MatchQueue,
  type Placing,
  type QueueEntry,
  type RestoreResult,
  restoreResult,
} from './match-queue.js';

/** The in-process queue of the embedded mode. JavaScript runs one call at a time, so each is atomic. */
export class MemoryMatchQueue implements MatchQueue {
  private readonly entries = new Map<number, QueueEntry>();
  private readonly byTag = new Map<string, number[]>();
  /** Barred users → until when (ms), and how many of their bars are not lifted. */
  private readonly barred = new Map<number, { until: number; holders: number }>();
  /** Users whose direct-chat slots filled → when (ms; markFull). */
  private readonly full = new Map<number, number>();
  /** Users whose search `dequeue` ended → when (ms). */
  private readonly cancelled = new Map<number, number>();
  /** Users who may no longer search → when (ms; endRestricted). */
  private readonly restricted = new Map<number, number>();
  /** Users whose entry a pairing has out of the queue → that entry (they still search). */
  private readonly out = new Map<number, QueueEntry>();

  /** The user's entry a pairing has out, before its deadline (a later one is forgotten). */
  private outOf(userId: number, now: number): QueueEntry | undefined {
    const e = this.out.get(userId);
    if (e && e.deadline <= now) this.out.delete(userId);
    return e && e.deadline > now ? e : undefined;
  }

  /** Forgets the user's out-of-queue marker if it is this entry's. */
  private releaseOne(e: Pick<QueueEntry, 'userId' | 'enqueuedAt'>): void {
    if (this.out.get(e.userId)?.enqueuedAt === e.enqueuedAt) this.out.delete(e.userId);
  }

  private isBarred(userId: number, now: number): boolean {
    return (this.barred.get(userId)?.until ?? 0) > now;
  }

  /**
   * A new search stays out of its user's cancelled mark: the mark is lowered below its start, so
   * that only the searches that began before it are refused a restore. The dequeue's time comes from
   * one node's clock and the search's start from another's (or the same millisecond): a search begun
   * after the dequeue may read as begun at or before it, and a pairing that fails would then drop it
   * silently.
   */
  private searchesAgain(entry: QueueEntry): void {
    const mark = this.cancelled.get(entry.userId);
    if (mark !== undefined && mark >= entry.enqueuedAt) this.cancelled.set(entry.userId, entry.enqueuedAt - 1);
  }

  private remove(userId: number): QueueEntry | undefined {
    const e = this.entries.get(userId);
    if (!e) return undefined;
    this.entries.delete(userId);
    for (const tag of e.tags) {
      const list = (this.byTag.get(tag) ?? []).filter((id) => id !== userId);
      if (list.length > 0) this.byTag.set(tag, list);
      else this.byTag.delete(tag);
    }
    return e;
  }

  async enqueue(entry: QueueEntry, now: number): Promise<EnqueueResult> {
    return enqueueResult(this.place(entry, now, 'queued'));
  }

  async restore(entry: QueueEntry, now: number): Promise<RestoreResult> {
    return restoreResult(this.place(entry, now, 'restored'));
  }

  /**
   * Enqueue (answering `queued`) and restore (`restored`, and only before the entry's deadline):
   * pairs the entry with a waiting peer or queues it.
   */
  private place(entry: QueueEntry, now: number, placed: 'queued' | 'restored'): Placing {
    const dropped: QueueEntry[] = [];
    // A restored entry is back from its pairing, whatever becomes of it now.
    if (placed === 'restored') this.releaseOne(entry);
    if (this.isBarred(entry.userId, now)) return { kind: 'barred', dropped };
    if (entry.enqueuedAt <= (this.full.get(entry.userId) ?? Number.NEGATIVE_INFINITY)) return { kind: 'full', dropped };
    if (entry.enqueuedAt <= (this.restricted.get(entry.userId) ?? Number.NEGATIVE_INFINITY))
      return { kind: 'restricted', dropped };
    if (placed === 'restored' && entry.enqueuedAt <= (this.cancelled.get(entry.userId) ?? Number.NEGATIVE_INFINITY))
      return { kind: 'cancelled', dropped };
    const current = this.entries.get(entry.userId);
    if ((current && current.deadline > now) || this.outOf(entry.userId, now)) return { kind: 'already', dropped };
    // Only now: a search a dequeue ended, or one its user has replaced, must not be told it
    // expired (its user was answered, or searches on), whenever its deadline passed.
    if (placed === 'restored' && entry.deadline <= now) return { kind: 'expired', dropped };
    // The user's own finished search, replaced by this one (not reported: a match:timeout now
    // would read as ending the search the user has just begun).
    if (current) this.remove(entry.userId);
    if (placed === 'queued') this.searchesAgain(entry);
    const paired = this.takePeer(entry, now, dropped);
    if (paired) {
      // Both are out of the queue in a pairing, the caller too (an enqueue's or a restored
      // entry's): until `release` each reads as searching, so a second search of either user (a
      // second tab) is refused `already` rather than paired beside this one.
      this.out.set(paired.peer.userId, paired.peer);
      this.out.set(entry.userId, entry);
      return { kind: 'paired', ...paired, dropped };
    }
    this.insert(entry);
    return { kind: placed, dropped };
  }

  /**
   * Takes the longest-waiting compatible user on the entry's first tag that has one out of the
   * queue, looking at up to CANDIDATE_SCAN_LIMIT users in line on each tag; expired ones met on
   * the way leave the queue too, into `dropped` (up to DROPPED_SCAN_LIMIT, not counted as looked at).
   */
  private takePeer(entry: QueueEntry, now: number, dropped: QueueEntry[]): { peer: QueueEntry; tag: string } | null {
    const excluded = new Set(entry.exclude);
    for (const tag of entry.tags) {
      // `remove` replaces a tag's line rather than editing it, so this one stays as it was.
      let looked = 0;
      for (const candidateId of this.byTag.get(tag) ?? []) {
        if (looked === CANDIDATE_SCAN_LIMIT) break;
        const candidate = this.entries.get(candidateId);
        const mayRead = candidateId !== entry.userId && !excluded.has(candidateId);
        if (mayRead && candidate && candidate.deadline <= now && dropped.length < DROPPED_SCAN_LIMIT) {
          this.remove(candidateId);
          dropped.push(candidate);
          continue;
        }
        looked++;
        if (!mayRead || !candidate || candidate.deadline <= now) continue;
        if (candidate.exclude.includes(entry.userId)) continue;
        this.remove(candidateId);
        return { peer: candidate, tag };
      }
    }
    return null;
  }

  /**
   * Adds the entry on each of its tags, in line by enqueue time: a new entry goes last, a restored
   * one back to its place (before everyone who enqueued after it).
   */
  private insert(entry: QueueEntry): void {
    this.entries.set(entry.userId, entry);
    for (const tag of entry.tags) {
      const line = [...(this.byTag.get(tag) ?? [])];
      const after = line.findIndex((id) => (this.entries.get(id)?.enqueuedAt ?? 0) > entry.enqueuedAt);
      line.splice(after === -1 ? line.length : after, 0, entry.userId);
      this.byTag.set(tag, line);
    }
  }

  async dequeue(userId: number, now: number): Promise<boolean> {
    for (const [id, at] of this.cancelled) if (at <= now - CANCEL_MARK_MS) this.cancelled.delete(id);
    this.cancelled.set(userId, Math.max(now, this.cancelled.get(userId) ?? now));
    this.out.delete(userId);
    return this.remove(userId) !== undefined;
  }

  async endRestricted(userId: number, now: number): Promise<boolean> {
    for (const [id, at] of this.restricted) if (at <= now - FULL_MARK_MS) this.restricted.delete(id);
    this.restricted.set(userId, Math.max(now, this.restricted.get(userId) ?? now));
    return this.dequeue(userId, now);
  }

  async release(entries: readonly Pick<QueueEntry, 'userId' | 'enqueuedAt'>[]): Promise<void> {
    for (const e of entries) this.releaseOne(e);
  }

  async cancelledOf(entries: readonly Pick<QueueEntry, 'userId' | 'enqueuedAt'>[]): Promise<number[]> {
    return entries
      .filter((e) => e.enqueuedAt <= (this.cancelled.get(e.userId) ?? Number.NEGATIVE_INFINITY))
      .map((e) => e.userId);
  }

  async bar(userId: number, until: number, now: number): Promise<QueueEntry | null> {
    for (const [id, b] of this.barred) if (b.until <= now) this.barred.delete(id);
    const current = this.barred.get(userId);
    this.barred.set(userId, { until: Math.max(until, current?.until ?? 0), holders: (current?.holders ?? 0) + 1 });
    return this.remove(userId) ?? null;
  }

  async markFull(userIds: number[], since: number): Promise<QueueEntry[]> {
    for (const [id, at] of this.full) if (at <= since - FULL_MARK_MS) this.full.delete(id);
    const out: QueueEntry[] = [];
    for (const id of userIds) {
      this.full.set(id, Math.max(since, this.full.get(id) ?? since));
      const e = this.entries.get(id);
      if (e && e.enqueuedAt <= since) {
        this.remove(id);
        out.push(e);
      }
    }
    return out;
  }

  async unbar(userId: number): Promise<void> {
    const current = this.barred.get(userId);
    if (current && current.holders > 1) current.holders -= 1;
    else this.barred.delete(userId);
  }

  async get(userId: number, now: number): Promise<QueueEntry | null> {
    const e = this.entries.get(userId);
    return (e && e.deadline > now ? e : this.outOf(userId, now)) ?? null;
  }

  async popExpired(now: number, limit: number): Promise<QueueEntry[]> {
    const out: QueueEntry[] = [];
    for (const e of [...this.entries.values()].sort((a, b) => a.deadline - b.deadline)) {
      if (out.length >= limit || e.deadline > now) break;
      this.remove(e.userId);
      out.push(e);
    }
    return out;
  }

  async topTags(n: number) {
    return [...this.byTag.entries()]
      .map(([tag, ids]) => ({ tag, searching: ids.length }))
      .sort((a, b) => b.searching - a.searching || byCodeUnits(a.tag, b.tag))
      .slice(0, n);
  }
}
