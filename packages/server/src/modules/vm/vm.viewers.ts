import type { VmFrame } from '../../platform/vm/provider.js';

interface Slot {
  userId: number;
  /** The seq of the frame sent and not yet acknowledged, or null when the viewer is ready. */
  inFlight: number | null;
  sentAt: number;
  /** The newest frame that arrived while one was in flight (older ones are skipped, not queued). */
  pending: VmFrame | null;
}

/**
 * The viewers of one room and their frame flow control: a viewer has at most one frame in flight
 * and gets the next only after `vm:frame:ack`; frames that arrive meanwhile replace each other, so
 * a slow viewer skips frames instead of queueing them (and never slows the others down).
 */
export class RoomViewers {
  private readonly slots = new Map<string, Slot>();
  private last: VmFrame | null = null;

  constructor(
    private readonly send: (socketId: string, frame: VmFrame) => void,
    private readonly now: () => number,
  ) {}

  get size(): number {
    return this.slots.size;
  }

  /** Distinct users watching. */
  users(): Set<number> {
    return new Set([...this.slots.values()].map((s) => s.userId));
  }

  has(socketId: string): boolean {
    return this.slots.has(socketId);
  }

  /** Adds (or resets) a viewer; it gets the latest frame at once. */
  add(socketId: string, userId: number): void {
    const slot: Slot = { userId, inFlight: null, sentAt: 0, pending: null };
    this.slots.set(socketId, slot);
    if (this.last) this.deliver(socketId, slot, this.last);
  }

  remove(socketId: string): boolean {
    return this.slots.delete(socketId);
  }

  clear(): void {
    this.slots.clear();
  }

  frame(frame: VmFrame): void {
    this.last = frame;
    for (const [socketId, slot] of this.slots) {
      if (slot.inFlight === null) this.deliver(socketId, slot, frame);
      else slot.pending = frame;
    }
  }

  /** A viewer acknowledged `seq`: if it was the frame in flight, the newest pending one goes out. False: not a viewer. */
  ack(socketId: string, seq: number): boolean {
    const slot = this.slots.get(socketId);
    if (!slot) return false;
    if (slot.inFlight !== seq) return true;
    slot.inFlight = null;
    if (slot.pending) this.deliver(socketId, slot, slot.pending);
    return true;
  }

  /**
   * Frames are sent volatile (never buffered for reconnection), so one can be lost; a viewer whose
   * frame stayed unacknowledged for `timeoutMs` gets the newest frame again instead of stalling.
   */
  resendStale(timeoutMs: number): void {
    const now = this.now();
    for (const [socketId, slot] of this.slots) {
      if (slot.inFlight === null || now - slot.sentAt < timeoutMs) continue;
      const frame = slot.pending ?? this.last;
      if (frame) this.deliver(socketId, slot, frame);
    }
  }

  private deliver(socketId: string, slot: Slot, frame: VmFrame): void {
    slot.inFlight = frame.seq;
    slot.sentAt = this.now();
    slot.pending = null;
    this.send(socketId, frame);
  }
}
