import { appError } from '../errors.js';
import type { BrowserIdentity } from './browser-account.js';
import type { CdpEvent, CdpPipe } from './cdp.js';
import { ChromiumProcess, calledOff, type RoomUpstream } from './chromium-process.js';
import { InputMapper } from './input-events.js';
import { BETWEEN_PAGES, NAV_RETRY_MS, NAV_SETTLE_MS, navigateWith } from './local-room.navigation.js';
import { RoomScreencast } from './local-room.screencast.js';
import type { NetworkGuard } from './network-guard.js';
import type { VmFrame, VmInput, VmNavigation, VmStartSpec } from './provider.js';

export interface LocalRoomOptions {
  chromiumPath: string;
  guard: NetworkGuard;
  log: (message: string) => void;
  extraArgs?: string[];
  /** The proxy the browser goes through (Tor, the room's region or the node's egress proxy); null: direct. */
  upstream?: RoomUpstream | null;
  /** As whom the browser runs, and whether sandboxed (browser-account.ts). */
  identity?: BrowserIdentity;
}

/**
 * One room's browser on this node: its process, the page it shows, the screencast and the input.
 * A crash ends the browser; the provider decides whether to `launch` again (frames keep their seq).
 */
export class LocalRoom {
  private proc: ChromiumProcess | null = null;
  private session = '';
  private targetId = '';
  /** Tabs the page opened (window.open, target=_blank) that have not shown a URL yet. */
  private readonly popups = new Set<string>();
  private readonly inputs = new InputMapper();
  /** The tab's frames and who watches them. */
  private readonly screencast: RoomScreencast;
  /**
   * Called when a browser that came up (its launch resolved) exits without being asked to, or
   * loses the room's tab. An exit during a launch fails that launch instead.
   */
  onCrash: () => void = () => {};
  /** Aborted by `stop`: a launch in progress is called off, its browser killed, and none follows. */
  private readonly stopped = new AbortController();

  constructor(
    readonly spec: VmStartSpec,
    private readonly opts: LocalRoomOptions,
  ) {
    this.screencast = new RoomScreencast(spec, { cdp: () => this.proc?.cdp, session: () => this.session });
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  get process(): ChromiumProcess | null {
    return this.proc;
  }

  /** Starts (or restarts) the browser and shows the start page. */
  async launch(): Promise<void> {
    const size = { width: this.spec.width, height: this.spec.height };
    const { signal } = this.stopped;
    const proc = await ChromiumProcess.launch(this.opts.chromiumPath, size, {
      log: this.opts.log,
      extraArgs: this.opts.extraArgs,
      upstream: this.opts.upstream,
      identity: this.opts.identity,
      signal,
    });
    if (signal.aborted) {
      // Stopped in the moment between the browser answering and this line.
      await proc.kill(0);
      throw calledOff();
    }
    this.proc = proc;
    this.screencast.reset();
    this.inputs.reset();
    try {
      await this.setUp(proc);
      // An exit during the set-up failed it (every DevTools command fails once the browser is
      // gone); one that the last command outran is caught here. Either way the launch fails and
      // nothing else happens: no crash is reported for a browser that never came up.
      if (!proc.alive) throw new Error('the browser exited during its set-up');
    } catch (err) {
      this.proc = null;
      await proc.kill(0);
      if (signal.aborted) throw calledOff();
      this.opts.log(`room browser set-up failed: ${err instanceof Error ? err.message : String(err)}`);
      throw appError('ERR_ROOM_START_FAILED', 'The room browser started but could not be set up.');
    }
    // Up and showing the start page: from now on an exit nobody asked for is a crash.
    proc.onExit = () => {
      if (this.proc === proc) {
        this.proc = null;
        void proc.kill(0);
        this.onCrash();
      }
    };
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
    this.targetId = targetId;
    this.popups.clear();
    await cdp.send('Target.setDiscoverTargets', { discover: true });
    await cdp.send('Page.enable', {}, this.session);
    await cdp.send(
      'Emulation.setDeviceMetricsOverride',
      { width: this.spec.width, height: this.spec.height, deviceScaleFactor: 1, mobile: false },
      this.session,
    );
    // Before navigating: a screencast asked for while a navigation commits fails ("not attached").
    if (this.screencast.watched) await this.screencast.startScreencast();
    await cdp.send('Page.navigate', { url: this.spec.startUrl }, this.session);
  }

  private onEvent(e: CdpEvent): void {
    const cdp = this.proc?.cdp;
    if (!cdp) return;
    if (e.method === 'Fetch.requestPaused') {
      void this.screenRequest(e);
      return;
    }
    if (e.method === 'Target.targetCreated' || e.method === 'Target.targetInfoChanged') {
      this.onTarget(cdp, e.params.targetInfo as { targetId: string; type: string; url: string; openerId?: string });
      return;
    }
    if (
      (e.method === 'Target.targetDestroyed' && e.params.targetId === this.targetId) ||
      (e.method === 'Target.detachedFromTarget' && e.params.sessionId === this.session)
    ) {
      // The room's tab is gone (closed from the page or by a shortcut): the room shows nothing and
      // takes no input, so it goes the way of a crash (restarted once, then the room stops).
      this.opts.log('room browser tab closed; restarting the browser');
      this.proc?.killGroup();
      return;
    }
    if (e.sessionId !== this.session) return;
    switch (e.method) {
      case 'Page.screencastFrame': {
        const p = e.params as { data: string; sessionId: number };
        cdp.send('Page.screencastFrameAck', { sessionId: p.sessionId }, this.session).catch(() => {});
        this.screencast.deliver(Buffer.from(p.data, 'base64'));
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

  /**
   * Viewers see one tab. A tab the page opens is closed, and the room's tab goes to its URL
   * instead (as soon as it has one; one that never gets one is closed after a few seconds).
   */
  private onTarget(cdp: CdpPipe, info: { targetId: string; type: string; url: string; openerId?: string }): void {
    if (info.type !== 'page' || info.targetId === this.targetId) return;
    const known = this.popups.has(info.targetId);
    if (!known && info.openerId !== this.targetId) {
      // A tab the page did not open (a browser shortcut: new tab, history, view source, …): nobody
      // sees it, so it goes at once.
      cdp.send('Target.closeTarget', { targetId: info.targetId }).catch(() => {});
      return;
    }
    if (!known) {
      this.popups.add(info.targetId);
      setTimeout(() => this.closePopup(cdp, info.targetId), 5000).unref();
    }
    if (info.url === '' || info.url === 'about:blank') return;
    if (/^https?:/i.test(info.url)) cdp.send('Page.navigate', { url: info.url }, this.session).catch(() => {});
    this.closePopup(cdp, info.targetId);
  }

  private closePopup(cdp: CdpPipe, targetId: string): void {
    if (!this.popups.delete(targetId)) return;
    cdp.send('Target.closeTarget', { targetId }).catch(() => {});
  }

  /**
   * Lets a paused request go on only if its host resolves to public addresses only. Behind Tor the
   * name is not resolved here (only IP literals and localhost names are checked): Tor resolves it,
   * and refuses internal addresses itself (docs/security.md).
   */
  private async screenRequest(e: CdpEvent): Promise<void> {
    const cdp = this.proc?.cdp;
    if (!cdp) return;
    const { requestId, request } = e.params as { requestId: string; request: { url: string } };
    try {
      const resolve = !this.opts.upstream?.remoteDns;
      const verdict = await this.opts.guard.check(request.url, { resolve });
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

  subscribe(onFrame: (f: VmFrame) => void): () => void {
    return this.screencast.subscribe(onFrame);
  }

  private cdpOrThrow() {
    const cdp = this.proc?.cdp;
    if (!cdp || cdp.closed) throw appError('ERR_ROOM_NOT_RUNNING', 'The room browser is restarting; try again.');
    return cdp;
  }

  /**
   * A DevTools command of the room's tab that failed (the tab or the browser went away, or did not
   * answer): the room is restarting or stopping, which the caller hears as such, not as a 500.
   */
  private failed(what: string) {
    return (err: unknown): never => {
      this.opts.log(`room browser ${what} failed: ${err instanceof Error ? err.message : String(err)}`);
      throw appError('ERR_ROOM_NOT_RUNNING', 'The room browser did not take this; it may be restarting. Try again.');
    };
  }

  async input(i: VmInput): Promise<void> {
    const cdp = this.cdpOrThrow();
    const { method, params } = this.inputs.toCommand(i);
    await cdp.send(method, params, this.session).catch(this.failed('input'));
  }

  /**
   * Lets go of what the input holds (InputMapper.release). The commands are written to the browser
   * before this returns its promise, so any input sent after this call comes after them. A browser
   * that is gone holds nothing (its next launch starts with nothing held).
   */
  async releaseInput(): Promise<void> {
    const commands = this.inputs.release();
    const cdp = this.proc?.cdp;
    if (!cdp || cdp.closed || commands.length === 0) return;
    await Promise.all(commands.map(({ method, params }) => cdp.send(method, params, this.session))).catch(
      this.failed('input release'),
    );
  }

  /** Navigates the room's tab; a command that finds it between two pages is retried (NAV_SETTLE_MS). */
  async navigate(nav: VmNavigation): Promise<void> {
    const until = Date.now() + NAV_SETTLE_MS;
    for (;;) {
      const cdp = this.cdpOrThrow();
      try {
        await navigateWith(cdp, this.session, nav);
        return;
      } catch (err) {
        const betweenPages = err instanceof Error && BETWEEN_PAGES.test(err.message);
        if (!betweenPages || Date.now() >= until) this.failed('navigation')(err);
      }
      await new Promise((resolve) => setTimeout(resolve, NAV_RETRY_MS));
    }
  }

  /** Evaluates an expression in the page (tests and diagnostics; never reachable from clients). */
  async evaluate(expression: string): Promise<unknown> {
    const cdp = this.cdpOrThrow();
    const r = (await cdp.send('Runtime.evaluate', { expression, returnByValue: true }, this.session)) as {
      result?: { value?: unknown };
    };
    return r.result?.value;
  }

  /** Sends a DevTools command to the browser (tests and diagnostics; never reachable from clients). */
  devtools(method: string, params: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    return this.cdpOrThrow().send(method, params);
  }

  /** Ends the browser for good (subscribers are dropped), a launch in progress included. */
  async stop(): Promise<void> {
    this.stopped.abort();
    const proc = this.proc;
    this.proc = null;
    this.screencast.clear();
    if (proc) await proc.kill();
  }
}
