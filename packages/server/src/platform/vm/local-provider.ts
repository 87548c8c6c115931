import { appError } from '../errors.js';
import { type BrowserIdentity, resolveBrowserIdentity, type UidRange } from './browser-account.js';
import { calledOff, type RoomUpstream } from './chromium-process.js';
import { removeStaleProfiles } from './chromium-profile.js';
import { type Dial, EgressProxy } from './egress-proxy.js';
import { LocalRoom } from './local-room.js';
import { type Lookup, makeNetworkGuard, type NetworkGuard } from './network-guard.js';
import type { VmFrame, VmInfo, VmInput, VmNavigation, VmProvider, VmProviderStop, VmStartSpec } from './provider.js';

export interface LocalProviderOptions {
  /** The browser binary (CHROMIUM_PATH). */
  chromiumPath: string;
  /** Most rooms this node runs at once (VM_MAX_PER_NODE); 0 turns room VMs off. */
  maxRooms: number;
  guard?: NetworkGuard;
  log?: (message: string) => void;
  /** More browser flags (tests map test host names with --host-resolver-rules). */
  extraArgs?: string[];
  /** Tor's SOCKS proxy (VM_TOR_PROXY, `socks5://host:port`); unset: Tor rooms answer 503. */
  torProxy?: string | null;
  /** The proxy of each region (VM_PROXY_US, VM_PROXY_EU); a region without one answers 503. */
  regionProxies?: Partial<Record<ProxyRegion, string | null>>;
  /** The account browsers run as when the server is root (VM_BROWSER_USER; `nobody`). */
  browserUser?: string;
  /** Chromium's sandbox (VM_SANDBOX; on). Off only where user namespaces are not available. */
  sandbox?: boolean;
  /** A uid per room from this range when the server is root (VM_BROWSER_UIDS); unset: one shared account. */
  browserUids?: UidRange | null;
  /**
   * TEST ONLY, never set from config: what the egress proxy resolves names with and how it
   * connects to the addresses it checked, so a test site on 127.0.0.1 can stand for a public host.
   * The block list stays the real one. Unset: the system resolver and plain TCP.
   */
  testOnlyEgressNetwork?: { lookup: Lookup; dial: Dial };
}

/**
 * Whether a room's browser goes out through the node's egress proxy: rooms with no upstream proxy
 * (neither Tor nor a region), unless private networks are allowed (VM_ALLOW_PRIVATE_NETWORKS).
 */
function needsEgress(spec: VmStartSpec): boolean {
  return !spec.allowPrivateNetworks && spec.browser !== 'tor' && spec.proxy === 'none';
}

/** Proxy regions of the room settings (spec 2.4), `none` aside. */
export type ProxyRegion = Exclude<VmStartSpec['proxy'], 'none'>;

interface Entry {
  room: LocalRoom;
  /** The room's own browser uid (VM_BROWSER_UIDS), kept across a restart. */
  uid?: number;
  info: VmInfo;
  /** Settles when the current launch (first start or restart) is done. */
  ready: Promise<void>;
}

/**
 * Room VMs as Debian chromium processes on this node, one per room, driven over the DevTools
 * pipe. A browser that exits on its own is restarted once per run; a second crash stops the room
 * and is reported through `onStopped`. `close` kills every browser (the server's shutdown path);
 * and since each browser exits when its DevTools pipe closes, even a killed server leaves none.
 */
export class LocalChromiumProvider implements VmProvider {
  private readonly rooms = new Map<string, Entry>();
  private readonly stopListeners = new Set<(roomId: string, reason: VmProviderStop) => void>();
  private readonly guard: NetworkGuard;
  private readonly log: (message: string) => void;
  private closed = false;
  /** The egress proxy of direct rooms (egress-proxy.ts), started with the first one. */
  private egress: Promise<EgressProxy> | null = null;
  private identity: Promise<BrowserIdentity> | null = null;
  private uidTurn = 0;
  /** Starts getting what their browser needs, not yet in `rooms`, by room: a stop calls them off. */
  private readonly preparing = new Map<string, Set<{ calledOff: boolean }>>();

  constructor(private readonly opts: LocalProviderOptions) {
    this.guard = opts.guard ?? makeNetworkGuard();
    this.log = opts.log ?? (() => {});
    // Profiles left by a server that was killed before it could remove them.
    this.sweptProfiles = removeStaleProfiles().then((n) => {
      if (n > 0) this.log(`removed ${n} room browser profile(s) left by servers that are gone`);
      return n;
    });
  }

  /** Settles when the start-up sweep of stale profile directories is done (with how many it removed). */
  readonly sweptProfiles: Promise<number>;

  async start(roomId: string, spec: VmStartSpec): Promise<VmInfo> {
    // Awaited first: from the checks below to `rooms.set` nothing waits, so two starts of one
    // room cannot both launch a browser.
    const launching = !this.closed && !this.rooms.has(roomId);
    const { identity, egress } = launching ? await this.prepare(roomId, spec) : { identity: undefined, egress: null };
    const existing = this.rooms.get(roomId);
    if (existing) {
      await existing.ready;
      return { ...existing.info };
    }
    if (this.closed) throw appError('ERR_ROOM_START_FAILED', 'This node is shutting down.');
    const upstream = this.upstreamFor(spec, egress);
    if (this.rooms.size >= this.opts.maxRooms)
      throw appError(
        'ERR_ROOM_START_FAILED',
        `No capacity: this node already runs ${this.rooms.size} of ${this.opts.maxRooms} room VMs (VM_MAX_PER_NODE).`,
      );
    const uid = identity?.perRoom ? this.freeUid(identity.perRoom) : undefined;
    const room = new LocalRoom(spec, {
      chromiumPath: this.opts.chromiumPath,
      guard: this.guard,
      log: this.log,
      extraArgs: this.opts.extraArgs,
      upstream,
      identity: identity && uid !== undefined ? { account: { uid, gid: uid }, sandbox: identity.sandbox } : identity,
    });
    const info: VmInfo = {
      roomId,
      state: 'starting',
      width: spec.width,
      height: spec.height,
      startedAt: new Date(),
      restarts: 0,
    };
    const entry: Entry = { room, uid, info, ready: room.launch() };
    this.rooms.set(roomId, entry);
    try {
      await entry.ready;
    } catch (err) {
      // The first launch failed (its browser is killed): no restart, the start fails, that is all.
      if (this.rooms.get(roomId) === entry) this.rooms.delete(roomId);
      throw err;
    }
    // Crashes count from here: a browser that exits during its first set-up fails the start instead.
    room.onCrash = () => this.crashed(roomId, entry);
    info.state = 'running';
    return { ...info };
  }

  /**
   * What a new browser needs before its room is in `rooms`: its account and the egress proxy. A
   * stop asked meanwhile finds no browser to kill, so it calls this start off instead.
   */
  private async prepare(roomId: string, spec: VmStartSpec) {
    const ticket = { calledOff: false };
    const tickets = this.preparing.get(roomId) ?? new Set();
    this.preparing.set(roomId, tickets.add(ticket));
    try {
      const identity = await this.browserIdentity();
      const egress = needsEgress(spec) ? await this.egressProxy() : null;
      if (ticket.calledOff) throw calledOff();
      return { identity, egress };
    } finally {
      tickets.delete(ticket);
      if (tickets.size === 0 && this.preparing.get(roomId) === tickets) this.preparing.delete(roomId);
    }
  }

  /**
   * The proxy the room's settings ask for, from this node's proxy URLs; 503 when this node has
   * none for them. A Tor room goes through Tor whatever its region (Tor picks its own exit). A
   * direct room goes through the node's egress proxy unless private networks are allowed.
   */
  private upstreamFor(spec: VmStartSpec, egress: EgressProxy | null): RoomUpstream | null {
    if (spec.browser === 'tor') {
      const tor = this.opts.torProxy;
      if (!tor)
        throw appError(
          'ERR_ROOM_START_FAILED',
          'This room uses the Tor browser, but no Tor proxy is configured here (VM_TOR_PROXY).',
        );
      return { server: tor, remoteDns: true };
    }
    if (spec.proxy === 'none') return egress ? { server: egress.url, remoteDns: false } : null;
    const server = this.opts.regionProxies?.[spec.proxy];
    if (!server)
      throw appError(
        'ERR_ROOM_START_FAILED',
        `This room uses the ${spec.proxy} proxy, but no ${spec.proxy} proxy is configured here (VM_PROXY_${spec.proxy.toUpperCase()}).`,
      );
    return { server, remoteDns: false };
  }

  /** As whom browsers run and whether sandboxed, read once (an unknown account fails every start). */
  private browserIdentity(): Promise<BrowserIdentity> {
    this.identity ??= resolveBrowserIdentity({
      user: this.opts.browserUser ?? 'nobody',
      sandbox: this.opts.sandbox ?? true,
      uids: this.opts.browserUids,
    });
    return this.identity;
  }

  /**
   * A uid of the range that no running room holds, taken in turn (the uid after the last one
   * given first), so a uid whose browser is still exiting is not handed out again at once.
   */
  private freeUid(range: UidRange): number {
    const held = new Set([...this.rooms.values()].map((e) => e.uid));
    const size = range.last - range.first + 1;
    for (let i = 0; i < size; i += 1) {
      const uid = range.first + ((this.uidTurn + i) % size);
      if (held.has(uid)) continue;
      this.uidTurn = (uid - range.first + 1) % size;
      return uid;
    }
    // The range is at least VM_MAX_PER_NODE wide (config), so this needs a misconfigured provider.
    throw appError('ERR_ROOM_START_FAILED', 'No free browser account in VM_BROWSER_UIDS.');
  }

  /** The egress proxy, started on first use; a failure to start is a failed room start (and is retried next time). */
  private egressProxy(): Promise<EgressProxy> {
    this.egress ??= EgressProxy.start(this.opts.testOnlyEgressNetwork).catch((err: unknown) => {
      this.egress = null;
      this.log(`room egress proxy failed to start: ${err instanceof Error ? err.message : String(err)}`);
      throw appError('ERR_ROOM_START_FAILED', 'The room browser’s network proxy failed to start.');
    });
    return this.egress;
  }

  /** A browser exited by itself: one restart per run, then the room stops. */
  private crashed(roomId: string, entry: Entry): void {
    if (this.rooms.get(roomId) !== entry) return;
    if (entry.info.restarts >= 1 || this.closed) {
      this.log(`room ${roomId}: browser crashed again; stopping the room`);
      this.rooms.delete(roomId);
      entry.info.state = 'stopped';
      void entry.room.stop();
      for (const l of this.stopListeners) l(roomId, 'crashed');
      return;
    }
    this.log(`room ${roomId}: browser crashed; restarting it`);
    entry.info.restarts += 1;
    entry.info.state = 'starting';
    entry.ready = entry.room.launch().then(
      () => {
        entry.info.state = 'running';
      },
      () => this.crashed(roomId, entry),
    );
  }

  async stop(roomId: string): Promise<void> {
    for (const ticket of this.preparing.get(roomId) ?? []) ticket.calledOff = true;
    const entry = this.rooms.get(roomId);
    if (!entry) return;
    this.rooms.delete(roomId);
    entry.info.state = 'stopped';
    // A browser still starting is killed now rather than awaited (up to its 20 s ready timeout).
    const stopping = entry.room.stop();
    await entry.ready.catch(() => {});
    await stopping;
  }

  status(roomId: string): VmInfo | null {
    const entry = this.rooms.get(roomId);
    return entry ? { ...entry.info } : null;
  }

  list(): VmInfo[] {
    return [...this.rooms.values()].map((e) => ({ ...e.info }));
  }

  subscribe(roomId: string, onFrame: (frame: VmFrame) => void): () => void {
    const entry = this.rooms.get(roomId);
    if (!entry) throw appError('ERR_ROOM_NOT_RUNNING');
    return entry.room.subscribe(onFrame);
  }

  async input(roomId: string, input: VmInput): Promise<void> {
    await this.running(roomId).input(input);
  }

  async releaseInput(roomId: string): Promise<void> {
    // Starting or restarting too: the mapper is reset at once, before any later input.
    await this.rooms.get(roomId)?.room.releaseInput();
  }

  async navigate(roomId: string, nav: VmNavigation): Promise<void> {
    await this.running(roomId).navigate(nav);
  }

  onStopped(listener: (roomId: string, reason: VmProviderStop) => void): () => void {
    this.stopListeners.add(listener);
    return () => this.stopListeners.delete(listener);
  }

  /** Stops every room, then the egress proxy (ending whatever tunnels are left). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.rooms.keys()].map((id) => this.stop(id)));
    const egress = this.egress;
    this.egress = null;
    await egress?.then((proxy) => proxy.close()).catch(() => {});
  }

  /** The browser's process id (tests: crash it, check it is gone after close). */
  pidOf(roomId: string): number | undefined {
    return this.rooms.get(roomId)?.room.pid;
  }

  /** The room browser's profile directory (tests: check it is removed). */
  profileOf(roomId: string): string | undefined {
    return this.rooms.get(roomId)?.room.process?.userDataDir;
  }

  /** Evaluates an expression in the room's page (tests, diagnostics; no client reaches this). */
  evaluate(roomId: string, expression: string): Promise<unknown> {
    return this.running(roomId).evaluate(expression);
  }

  /** Sends a DevTools command to the room's browser (tests, diagnostics; no client reaches this). */
  devtools(roomId: string, method: string, params: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    return this.running(roomId).devtools(method, params);
  }

  /** Resident memory of the room's whole browser process tree, in bytes. */
  async memoryBytes(roomId: string): Promise<number> {
    return (await this.rooms.get(roomId)?.room.process?.memoryBytes()) ?? 0;
  }

  private running(roomId: string): LocalRoom {
    const entry = this.rooms.get(roomId);
    if (entry?.info.state !== 'running') throw appError('ERR_ROOM_NOT_RUNNING');
    return entry.room;
  }
}
