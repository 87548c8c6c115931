import type { VmFrame } from '../../platform/vm/provider.js';

interface Slot {
  userId: number;
  /** The seqs of frames sent and not yet acknowledged, oldest first (at most the window). */
  inFlight: number[];
  /** When the last frame went out (0: never). */
  sentAt: number;
  /** The newest frame that arrived while one was in flight (older ones are skipped, not queued). */
  pending: VmFrame | null;
}

/** Frames a viewer may have unacknowledged at once (two: one travels while the other is shown). */
export const FRAME_WINDOW = 2;

/**
 * The viewers of one room and their frame flow control: a viewer has at most `window` frames in
 * flight and gets the next only after `vm:frame:ack` (an ack covers every earlier frame too);
 * frames that arrive meanwhile replace each other, so a slow viewer skips frames instead of
 * queueing them (and never slows the others down). A window of two hides the round trip of the
 * ack: the next frame is already on its way while the client acknowledges the last.
 */
export class RoomViewers {
  private readonly slots = new Map<string, Slot>();
  private last: VmFrame | null = null;

  constructor(
    /**
     * Sends one frame to some viewers at once (one encoding of the frame for all of them); answers
     * the viewers it could not send to now (their connection is still writing: a volatile frame
     * would be dropped), which keep the frame as pending instead of counting it in flight.
     */
    private readonly send: (socketIds: string[], frame: VmFrame) => string[] | undefined,
    private readonly now: () => number,
    private readonly window: number = FRAME_WINDOW,
  ) {}

  get size(): number {
    return this.slots.size;
  }

  /** Distinct users watching. */
  users(): Set<number> {
    return new Set([...this.slots.values()].map((s) => s.userId));
  }

  /** The sockets watching. */
  sockets(): string[] {
    return [...this.slots.keys()];
  }

  has(socketId: string): boolean {
    return this.slots.has(socketId);
  }

  /** Adds (or resets) a viewer; it gets the latest frame at once. */
  add(socketId: string, userId: number): void {
    const slot: Slot = { userId, inFlight: [], sentAt: 0, pending: null };
    this.slots.set(socketId, slot);
    if (this.last) this.deliver(socketId, slot, this.last);
  }

  /** A viewer that has had no frame yet gets `frame` (the room's latest, learned from its owner). */
  offer(socketId: string, frame: VmFrame): void {
    const slot = this.slots.get(socketId);
    if (!slot || slot.inFlight.length > 0 || slot.sentAt !== 0) return;
    if (!this.last || this.last.seq < frame.seq) this.last = frame;
    this.deliver(socketId, slot, frame);
  }

  remove(socketId: string): boolean {
    return this.slots.delete(socketId);
  }

  clear(): void {
    this.slots.clear();
  }

  frame(frame: VmFrame): void {
    this.last = frame;
    const ready: string[] = [];
    for (const [socketId, slot] of this.slots) {
      if (slot.inFlight.length < this.window) {
        this.mark(slot, frame);
        ready.push(socketId);
      } else slot.pending = frame;
    }
    if (ready.length > 0) this.unsent(this.send(ready, frame), frame);
  }

  /** Viewers a frame could not go to keep it as pending: the next ack or sweep sends it. */
  private unsent(socketIds: string[] | undefined, frame: VmFrame): void {
    for (const socketId of socketIds ?? []) {
      const slot = this.slots.get(socketId);
      if (!slot) continue;
      slot.inFlight = slot.inFlight.filter((s) => s !== frame.seq);
      if (!slot.pending || slot.pending.seq < frame.seq) slot.pending = frame;
    }
  }

  /** A viewer acknowledged `seq` (and all before it): the newest pending frame goes out. False: not a viewer. */
  ack(socketId: string, seq: number): boolean {
    const slot = this.slots.get(socketId);
    if (!slot) return false;
    if (!slot.inFlight.includes(seq)) return true;
    slot.inFlight = slot.inFlight.filter((s) => s > seq);
    if (slot.pending && slot.inFlight.length < this.window) this.deliver(socketId, slot, slot.pending);
    return true;
  }

  /**
   * Frames are sent volatile (never buffered for reconnection), so one can be lost; a viewer whose
   * last frame stayed unacknowledged for `timeoutMs` gets the newest frame again instead of stalling.
   */
  resendStale(timeoutMs: number): void {
    const now = this.now();
    for (const [socketId, slot] of this.slots) {
      // A frame its connection could not take yet goes now, without waiting for the timeout.
      if (slot.inFlight.length === 0 && slot.pending) {
        this.deliver(socketId, slot, slot.pending);
        continue;
      }
      if (slot.inFlight.length === 0 || now - slot.sentAt < timeoutMs) continue;
      slot.inFlight = [];
      const frame = slot.pending ?? this.last;
      if (frame) this.deliver(socketId, slot, frame);
    }
  }

  private deliver(socketId: string, slot: Slot, frame: VmFrame): void {
    this.mark(slot, frame);
    this.unsent(this.send([socketId], frame), frame);
  }

  private mark(slot: Slot, frame: VmFrame): void {
    slot.inFlight.push(frame.seq);
    slot.sentAt = this.now();
    slot.pending = null;
  }
}
