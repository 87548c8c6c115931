import type { CdpPipe } from './cdp.js';
import type { VmFrame, VmStartSpec } from './provider.js';

/**
 * The frames of one room's tab: DevTools' screencast runs while anyone subscribes, and each frame
 * takes the next seq, which the browser's restarts keep (the room's LocalRoom holds one of these).
 */
export class RoomScreencast {
  private seq = 0;
  private lastFrame: VmFrame | null = null;
  private readonly subscribers = new Set<(f: VmFrame) => void>();
  private screencasting = false;

  constructor(
    private readonly spec: VmStartSpec,
    /** The browser's DevTools pipe while it is up, and the room's tab's session. */
    private readonly tab: { cdp(): CdpPipe | undefined; session(): string },
  ) {}

  /** Whether anyone watches (a new browser starts its screencast before it navigates). */
  get watched(): boolean {
    return this.subscribers.size > 0;
  }

  /** A new browser: no screencast runs in it yet. */
  reset(): void {
    this.screencasting = false;
  }

  /** Drops every subscriber (the room stopped for good). */
  clear(): void {
    this.subscribers.clear();
  }

  deliver(data: Buffer): void {
    this.seq += 1;
    const frame: VmFrame = {
      seq: this.seq,
      mime: 'image/jpeg',
      data,
      width: this.spec.width,
      height: this.spec.height,
    };
    this.lastFrame = frame;
    for (const s of this.subscribers) s(frame);
  }

  subscribe(onFrame: (f: VmFrame) => void): () => void {
    this.subscribers.add(onFrame);
    if (this.lastFrame) onFrame(this.lastFrame);
    if (this.subscribers.size === 1) void this.startScreencast().catch(() => {});
    return () => {
      this.subscribers.delete(onFrame);
      if (this.subscribers.size === 0) void this.stopScreencast().catch(() => {});
    };
  }

  async startScreencast(): Promise<void> {
    const cdp = this.tab.cdp();
    if (!cdp || this.screencasting) return;
    this.screencasting = true;
    const params = {
      format: 'jpeg',
      quality: 70,
      maxWidth: this.spec.width,
      maxHeight: this.spec.height,
      everyNthFrame: 1,
    };
    try {
      await cdp.send('Page.startScreencast', params, this.tab.session());
    } catch {
      // The page may be between two documents; one more try a moment later.
      await new Promise((r) => setTimeout(r, 250));
      await cdp.send('Page.startScreencast', params, this.tab.session()).catch((err: unknown) => {
        this.screencasting = false;
        throw err;
      });
    }
  }

  private async stopScreencast(): Promise<void> {
    const cdp = this.tab.cdp();
    if (!cdp || !this.screencasting) return;
    this.screencasting = false;
    await cdp.send('Page.stopScreencast', {}, this.tab.session());
  }
}
