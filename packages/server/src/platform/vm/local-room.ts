import { appError } from '../errors.js';
import type { CdpEvent } from './cdp.js';
import { ChromiumProcess } from './chromium-process.js';
import type { NetworkGuard } from './network-guard.js';
import type { VmFrame, VmInput, VmNavigation, VmStartSpec } from './provider.js';

const MOUSE_BUTTON_BITS = { left: 1, right: 2, middle: 4 } as const;
const MODIFIER_BITS: Record<string, number> = { Alt: 1, Control: 2, Meta: 4, Shift: 8 };
const SHIFT = 8;
/** Windows virtual key codes of the keys that act without producing text. */
const KEY_CODES: Record<string, number> = {
  Backspace: 8,
  Tab: 9,
  Enter: 13,
  Shift: 16,
  Control: 17,
  Alt: 18,
  Escape: 27,
  ' ': 32,
  PageUp: 33,
  PageDown: 34,
  End: 35,
  Home: 36,
  ArrowLeft: 37,
  ArrowUp: 38,
  ArrowRight: 39,
  ArrowDown: 40,
  Delete: 46,
  Meta: 91,
};

function virtualKeyCode(key: string, code: string): number {
  const known = KEY_CODES[key];
  if (known !== undefined) return known;
  const letter = /^Key([A-Z])$/.exec(code)?.[1];
  if (letter) return letter.charCodeAt(0);
  const digit = /^Digit([0-9])$/.exec(code)?.[1];
  if (digit) return digit.charCodeAt(0);
  return key.length === 1 ? key.toUpperCase().charCodeAt(0) : 0;
}

export interface LocalRoomOptions {
  chromiumPath: string;
  guard: NetworkGuard;
  log: (message: string) => void;
  extraArgs?: string[];
}

/**
 * One room's browser on this node: its process, the page it shows, the screencast and the input.
 * A crash ends the browser; the provider decides whether to `launch` again (frames keep their seq).
 */
export class LocalRoom {
  private proc: ChromiumProcess | null = null;
  private session = '';
  private seq = 0;
  private lastFrame: VmFrame | null = null;
  private readonly subscribers = new Set<(f: VmFrame) => void>();
  private screencasting = false;
  private buttons = 0;
  private modifiers = 0;
  /** Called when the browser exits without being asked to. */
  onCrash: () => void = () => {};

  constructor(
    readonly spec: VmStartSpec,
    private readonly opts: LocalRoomOptions,
  ) {}

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  get process(): ChromiumProcess | null {
    return this.proc;
  }

  /** Starts (or restarts) the browser and shows the start page. */
  async launch(): Promise<void> {
    const size = { width: this.spec.width, height: this.spec.height };
    const proc = await ChromiumProcess.launch(this.opts.chromiumPath, size, this.opts.log, this.opts.extraArgs);
    this.proc = proc;
    this.screencasting = false;
    this.buttons = 0;
    this.modifiers = 0;
    proc.onExit = () => {
      if (this.proc === proc) {
        this.proc = null;
        void proc.kill(0);
        this.onCrash();
      }
    };
    try {
      await this.setUp(proc);
    } catch (err) {
      this.proc = null;
      await proc.kill(0);
      this.opts.log(`room browser set-up failed: ${err instanceof Error ? err.message : String(err)}`);
      throw appError('ERR_ROOM_START_FAILED', 'The room browser started but could not be set up.');
    }
  }

  private async setUp(proc: ChromiumProcess): Promise<void> {
    const { cdp } = proc;
    cdp.onEvent((e) => this.onEvent(e));
    if (!this.spec.allowPrivateNetworks) {
      // Browser-wide interception: every frame, worker and redirect hop of every tab pauses here.
      await cdp.send('Fetch.enable', { patterns: [{ urlPattern: '*', requestStage: 'Request' }] });
    }
    await cdp.send('Browser.setDownloadBehavior', { behavior: 'deny' }).catch(() => {});
    // A tab of our own: the browser's initial tab can still be replaced while it starts up.
    const initial = (await cdp.send('Target.getTargets')) as { targetInfos?: { targetId: string; type: string }[] };
    const { targetId } = (await cdp.send('Target.createTarget', { url: 'about:blank' })) as { targetId: string };
    for (const t of initial.targetInfos ?? []) {
      if (t.type === 'page') cdp.send('Target.closeTarget', { targetId: t.targetId }).catch(() => {});
    }
    const attached = (await cdp.send('Target.attachToTarget', { targetId, flatten: true })) as { sessionId: string };
    this.session = attached.sessionId;
    await cdp.send('Page.enable', {}, this.session);
    await cdp.send(
      'Emulation.setDeviceMetricsOverride',
      { width: this.spec.width, height: this.spec.height, deviceScaleFactor: 1, mobile: false },
      this.session,
    );
    // Before navigating: a screencast asked for while a navigation commits fails ("not attached").
    if (this.subscribers.size > 0) await this.startScreencast();
    await cdp.send('Page.navigate', { url: this.spec.startUrl }, this.session);
  }

  private onEvent(e: CdpEvent): void {
    const cdp = this.proc?.cdp;
    if (!cdp) return;
    if (e.method === 'Fetch.requestPaused') {
      void this.screenRequest(e);
      return;
    }
    if (e.sessionId !== this.session) return;
    switch (e.method) {
      case 'Page.screencastFrame': {
        const p = e.params as { data: string; sessionId: number };
        cdp.send('Page.screencastFrameAck', { sessionId: p.sessionId }, this.session).catch(() => {});
        this.deliver(Buffer.from(p.data, 'base64'));
        break;
      }
      case 'Page.javascriptDialogOpening':
        // Nobody can answer a dialog in a shared room; dismissing keeps the page alive.
        cdp.send('Page.handleJavaScriptDialog', { accept: false }, this.session).catch(() => {});
        break;
      case 'Inspector.targetCrashed':
        // The page's renderer died: treat it as a browser crash (restart once, then stop).
        this.proc?.killGroup();
        break;
    }
  }

  /** Lets a paused request go on only if its host resolves to public addresses only. */
  private async screenRequest(e: CdpEvent): Promise<void> {
    const cdp = this.proc?.cdp;
    if (!cdp) return;
    const { requestId, request } = e.params as { requestId: string; request: { url: string } };
    try {
      const verdict = await this.opts.guard.check(request.url);
      if (verdict === 'allowed') await cdp.send('Fetch.continueRequest', { requestId }, e.sessionId);
      else
        await cdp.send(
          'Fetch.failRequest',
          { requestId, errorReason: verdict === 'unresolved' ? 'NameNotResolved' : 'AddressUnreachable' },
          e.sessionId,
        );
    } catch {
      await cdp.send('Fetch.failRequest', { requestId, errorReason: 'Failed' }, e.sessionId).catch(() => {});
    }
  }

  private deliver(data: Buffer): void {
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

  private async startScreencast(): Promise<void> {
    const cdp = this.proc?.cdp;
    if (!cdp || this.screencasting) return;
    this.screencasting = true;
    const params = { format: 'jpeg', quality: 70, maxWidth: this.spec.width, maxHeight: this.spec.height, everyNthFrame: 1 };
    try {
      await cdp.send('Page.startScreencast', params, this.session);
    } catch {
      // The page may be between two documents; one more try a moment later.
      await new Promise((r) => setTimeout(r, 250));
      await cdp.send('Page.startScreencast', params, this.session).catch((err: unknown) => {
        this.screencasting = false;
        throw err;
      });
    }
  }

  private async stopScreencast(): Promise<void> {
    const cdp = this.proc?.cdp;
    if (!cdp || !this.screencasting) return;
    this.screencasting = false;
    await cdp.send('Page.stopScreencast', {}, this.session);
  }

  private cdpOrThrow() {
    const cdp = this.proc?.cdp;
    if (!cdp || cdp.closed) throw appError('ERR_ROOM_NOT_RUNNING', 'The room browser is restarting; try again.');
    return cdp;
  }

  async input(i: VmInput): Promise<void> {
    const cdp = this.cdpOrThrow();
    const s = this.session;
    switch (i.kind) {
      case 'mouse': {
        const button = i.button ?? 'left';
        if (i.type === 'down') this.buttons |= MOUSE_BUTTON_BITS[button];
        if (i.type === 'up') this.buttons &= ~MOUSE_BUTTON_BITS[button];
        const type = i.type === 'move' ? 'mouseMoved' : i.type === 'down' ? 'mousePressed' : 'mouseReleased';
        await cdp.send(
          'Input.dispatchMouseEvent',
          {
            type,
            x: i.x,
            y: i.y,
            button: i.type === 'move' ? 'none' : button,
            buttons: this.buttons,
            clickCount: i.type === 'move' ? 0 : 1,
            modifiers: this.modifiers,
          },
          s,
        );
        return;
      }
      case 'wheel':
        await cdp.send(
          'Input.dispatchMouseEvent',
          { type: 'mouseWheel', x: i.x, y: i.y, deltaX: i.dx, deltaY: i.dy, modifiers: this.modifiers },
          s,
        );
        return;
      case 'key': {
        const bit = MODIFIER_BITS[i.key];
        if (bit !== undefined) this.modifiers = i.type === 'down' ? this.modifiers | bit : this.modifiers & ~bit;
        const printable = i.key.length === 1 && (this.modifiers & ~SHIFT) === 0;
        const code = virtualKeyCode(i.key, i.code);
        await cdp.send(
          'Input.dispatchKeyEvent',
          {
            type: i.type === 'up' ? 'keyUp' : printable ? 'keyDown' : 'rawKeyDown',
            key: i.key,
            code: i.code,
            windowsVirtualKeyCode: code,
            nativeVirtualKeyCode: code,
            modifiers: this.modifiers,
            ...(i.type === 'down' && printable ? { text: i.key } : {}),
            ...(i.type === 'down' && i.key === 'Enter' ? { text: '\r' } : {}),
          },
          s,
        );
        return;
      }
      case 'text':
        await cdp.send('Input.insertText', { text: i.text }, s);
        return;
    }
  }

  async navigate(nav: VmNavigation): Promise<void> {
    const cdp = this.cdpOrThrow();
    const s = this.session;
    if ('url' in nav) {
      await cdp.send('Page.navigate', { url: nav.url }, s);
      return;
    }
    if (nav.action === 'reload') {
      await cdp.send('Page.reload', {}, s);
      return;
    }
    const history = (await cdp.send('Page.getNavigationHistory', {}, s)) as {
      currentIndex: number;
      entries: { id: number }[];
    };
    const entry = history.entries[history.currentIndex + (nav.action === 'back' ? -1 : 1)];
    if (entry) await cdp.send('Page.navigateToHistoryEntry', { entryId: entry.id }, s);
  }

  /** Evaluates an expression in the page (tests and diagnostics; never reachable from clients). */
  async evaluate(expression: string): Promise<unknown> {
    const cdp = this.cdpOrThrow();
    const r = (await cdp.send('Runtime.evaluate', { expression, returnByValue: true }, this.session)) as {
      result?: { value?: unknown };
    };
    return r.result?.value;
  }

  /** Ends the browser for good (subscribers are dropped). */
  async stop(): Promise<void> {
    const proc = this.proc;
    this.proc = null;
    this.subscribers.clear();
    if (proc) await proc.kill();
  }
}
