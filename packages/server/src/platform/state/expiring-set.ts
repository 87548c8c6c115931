/**
 * Members with deadlines, for the in-process state (the embedded mode's online users and pending
 * login codes per IP): add, remove, membership, the live count and the earliest live deadline.
 *
 * A map holds each member's deadline; a binary min-heap of (deadline, member) finds the ones that
 * have passed and the earliest one without scanning every member, so a set of a hundred thousand
 * online users costs O(log n) per add, like the sorted set of the Redis state. A member added
 * again or removed leaves its old heap entry behind ("stale": its deadline no longer matches the
 * map's); stale entries are skipped when they come to the top, and the heap is rebuilt from the
 * map when they outnumber the live ones.
 */
interface Entry {
  at: number;
  member: string;
}

export class ExpiringSet {
  private readonly deadlines = new Map<string, number>();
  private heap: Entry[] = [];

  /** Live members, once `prune` has run for the current time. */
  get size(): number {
    return this.deadlines.size;
  }

  add(member: string, at: number): void {
    this.deadlines.set(member, at);
    this.push({ at, member });
    if (this.heap.length > 2 * this.deadlines.size + 1024) this.rebuild();
  }

  remove(member: string): void {
    this.deadlines.delete(member);
  }

  /** Live members, once `prune` has run for the current time. */
  members(): string[] {
    return [...this.deadlines.keys()];
  }

  /** Whether `member` is in the set with a deadline after `now`. */
  has(member: string, now: number): boolean {
    const at = this.deadlines.get(member);
    return at !== undefined && at > now;
  }

  /** Drops every member whose deadline is `now` or earlier. */
  prune(now: number): void {
    for (let top = this.heap[0]; top !== undefined && (top.at <= now || this.stale(top)); top = this.heap[0]) {
      this.pop();
      if (!this.stale(top)) this.deadlines.delete(top.member);
    }
  }

  /** The earliest deadline of a member, or undefined when the set is empty (after `prune`). */
  earliest(): number | undefined {
    while (this.heap[0] !== undefined && this.stale(this.heap[0])) this.pop();
    return this.heap[0]?.at;
  }

  private stale(e: Entry): boolean {
    return this.deadlines.get(e.member) !== e.at;
  }

  private rebuild(): void {
    this.heap = [...this.deadlines].map(([member, at]) => ({ at, member }));
    for (let i = (this.heap.length >> 1) - 1; i >= 0; i--) this.down(i);
  }

  private push(e: Entry): void {
    const h = this.heap;
    let i = h.length;
    h.push(e);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = h[parent] as Entry;
      if (p.at <= e.at) break;
      h[i] = p;
      i = parent;
    }
    h[i] = e;
  }

  private pop(): void {
    const last = this.heap.pop();
    if (last !== undefined && this.heap.length > 0) {
      this.heap[0] = last;
      this.down(0);
    }
  }

  private down(start: number): void {
    const h = this.heap;
    const e = h[start] as Entry;
    let i = start;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= h.length) break;
      const right = left + 1;
      const l = h[left] as Entry;
      const r = h[right];
      const [child, c] = r !== undefined && r.at < l.at ? [right, r] : [left, l];
      if (c.at >= e.at) break;
      h[i] = c;
      i = child;
    }
    h[i] = e;
  }
}
