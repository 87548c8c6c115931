import { io, type Socket } from 'socket.io-client';
import { AppError, appError } from '../errors.js';
import { calledOff } from './chromium-process.js';
import {
  ackError,
  fromWire,
  type HostAck,
  type HostToNodeEvents,
  isHostFrame,
  isStartedInfo,
  type NodeToHostEvents,
} from './host-protocol.js';
import type { VmFrame, VmInfo, VmInput, VmNavigation, VmProvider, VmProviderStop, VmStartSpec } from './provider.js';

/**
 * Room VMs on browser hosts (VM_HOSTS, browser-host.ts) instead of this node's machine: the same
 * port as the local provider, so the chat code does not change. Each host is one Socket.IO
 * connection (reconnecting); a room goes to the connected host with the fewest of this node's
 * rooms, and to the next one when a host answers that it is at capacity.
 *
 * `status` and `list` answer from what this node started (the port wants them synchronous); a
 * restart after a crash happens on the host and is not counted here. A host that becomes
 * unreachable ends its rooms (reported through `onStopped` as crashed); the host stops them too.
 */
export interface RemoteProviderOptions {
  /** Browser host base URLs (http or https), as config checked them. */
  hosts: string[];
  /** VM_HOST_TOKEN, as the hosts have it. */
  token: string;
  log?: (message: string) => void;
  /** How long a start may take (a browser launch on the host), and any other call. */
  startTimeoutMs?: number;
  callTimeoutMs?: number;
  /** How long a start waits for a first connection to any host (the node may have just started; 5 s). */
  connectWaitMs?: number;
}

type HostSocket = Socket<HostToNodeEvents, NodeToHostEvents>;

interface Link {
  /**
   * The host's origin, for log lines: never its whole URL, which may name a user and password
   * (config refuses them; a URL given here directly may still hold them).
   */
  name: string;
  socket: HostSocket;
}

/** A start under way: the host it was last sent to, and whether a stop (or close) called it off. */
interface StartRun {
  link: Link | null;
  calledOff: boolean;
}
interface Pending extends StartRun {
  done: Promise<VmInfo>;
}

interface Room {
  link: Link;
  info: VmInfo;
  subscribers: Set<(frame: VmFrame) => void>;
  latest: VmFrame | null;
}

export class RemoteBrowserProvider implements VmProvider {
  private readonly links: Link[];
  private readonly rooms = new Map<string, Room>();
  private readonly starting = new Map<string, Pending>();
  private readonly stopListeners = new Set<(roomId: string, reason: VmProviderStop) => void>();
  private readonly startTimeoutMs: number;
  private readonly callTimeoutMs: number;
  private closed = false;

  constructor(private readonly opts: RemoteProviderOptions) {
    this.startTimeoutMs = opts.startTimeoutMs ?? 30_000;
    this.callTimeoutMs = opts.callTimeoutMs ?? 10_000;
    this.links = opts.hosts.map((url) => this.connect(url));
  }

  private connect(url: string): Link {
    const socket: HostSocket = io(url, {
      path: '/browser-host',
      transports: ['websocket'],
      auth: { token: this.opts.token },
      reconnectionDelayMax: 5_000,
    });
    const link = { name: new URL(url).origin, socket };
    socket.on('host:frame', (f) => {
      if (!isHostFrame(f)) return;
      const room = this.rooms.get(f.roomId);
      if (!room || room.link !== link) return;
      const frame: VmFrame = { seq: f.seq, mime: f.mime, data: f.data, width: f.width, height: f.height };
      room.latest = frame;
      for (const fn of room.subscribers) fn(frame);
    });
    socket.on('host:stopped', (e) => {
      const roomId = typeof e?.roomId === 'string' ? e.roomId : '';
      if (this.rooms.get(roomId)?.link === link) this.end(roomId, 'crashed');
    });
    socket.on('disconnect', (reason) => {
      for (const [roomId, room] of [...this.rooms]) if (room.link === link) this.end(roomId, 'crashed');
      // Calls made while the link was down are not replayed on the next connection (the host has
      // stopped this node's rooms by then): they time out and fail.
      socket.sendBuffer.length = 0;
      // A host that closed the connection itself (shutting down, or refusing) is not retried by the
      // client on its own: ask again shortly, as for a lost link.
      if (reason === 'io server disconnect' && !this.closed)
        setTimeout(() => this.closed || socket.connect(), 1_000).unref();
    });
    socket.on('connect_error', (err) => this.opts.log?.(`browser host ${link.name}: ${err.message}`));
    return link;
  }

  private end(roomId: string, reason: VmProviderStop) {
    this.rooms.delete(roomId);
    for (const fn of this.stopListeners) fn(roomId, reason);
  }

  private async call<T extends object>(
    link: Link,
    event: keyof NodeToHostEvents,
    payload: object,
    timeoutMs = this.callTimeoutMs,
  ): Promise<T> {
    let ack: HostAck<T>;
    try {
      const emitter = link.socket.timeout(timeoutMs) as unknown as {
        emitWithAck(e: string, p: object): Promise<HostAck<T>>;
      };
      ack = await emitter.emitWithAck(event, payload);
    } catch {
      throw new HostUnanswered(event === 'host:start' ? 'ERR_ROOM_START_FAILED' : 'ERR_ROOM_NOT_RUNNING');
    }
    if (!ack.ok) throw ackError(ack);
    return ack as T;
  }

  /** Connected hosts, fewest of this node's rooms first; waits a little for a first connection. */
  private async candidates(): Promise<Link[]> {
    const connected = () => this.links.filter((l) => l.socket.connected);
    const deadline = Date.now() + (this.opts.connectWaitMs ?? 5_000);
    while (connected().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const load = (l: Link) => [...this.rooms.values()].filter((r) => r.link === l).length;
    return connected().sort((a, b) => load(a) - load(b));
  }

  start(roomId: string, spec: VmStartSpec): Promise<VmInfo> {
    if (this.closed) return Promise.reject(appError('ERR_ROOM_START_FAILED', 'This node is shutting down.'));
    const running = this.rooms.get(roomId);
    if (running) return Promise.resolve(running.info);
    const pending = this.starting.get(roomId);
    // A start called off is not joined: this one starts anew once that one has failed.
    if (pending?.calledOff) return pending.done.catch(() => {}).then(() => this.start(roomId, spec));
    if (pending) return pending.done;
    const run: StartRun = { link: null, calledOff: false };
    const done = this.place(roomId, spec, run).finally(() => {
      if (this.starting.get(roomId) === run) this.starting.delete(roomId);
    });
    this.starting.set(roomId, Object.assign(run, { done }));
    return done;
  }

  private async place(roomId: string, spec: VmStartSpec, run: StartRun): Promise<VmInfo> {
    const links = await this.candidates();
    if (links.length === 0) {
      throw appError('ERR_ROOM_START_FAILED', 'No browser host is reachable (VM_HOSTS, VM_HOST_TOKEN).');
    }
    for (const link of links) {
      if (run.calledOff) throw calledOff();
      run.link = link;
      try {
        const { info } = await this.call<{ info: unknown }>(link, 'host:start', { roomId, spec }, this.startTimeoutMs);
        // A host (buggy, older, or lying) that says it started the room without saying what runs.
        if (!isStartedInfo(info, roomId)) throw new HostMisanswered();
        const vm = fromWire(info);
        // Stopped while the host launched it (the host's answer was on its way): it goes again.
        if (run.calledOff) {
          await this.stopOn(link, roomId);
          throw calledOff();
        }
        this.rooms.set(roomId, { link, info: vm, subscribers: new Set(), latest: null });
        return vm;
      } catch (caught) {
        // Anything but an answer of the host failing the start (a bad answer, a bug here) came after
        // the host may have started the browser.
        const err = caught instanceof AppError ? caught : new HostMisanswered();
        // A host that did not answer in time may still start the browser: ask it to stop it.
        if (err instanceof HostUnanswered) void this.stopOn(link, roomId);
        // One that answered badly may run it: it is stopped before the start fails.
        if (err instanceof HostMisanswered) {
          this.opts.log?.(`browser host ${link.name}: invalid start of room ${roomId}: ${caught}`);
          await this.stopOn(link, roomId);
        }
        // A start called off fails as such, whatever the host answered (it killed the browser).
        if (run.calledOff) throw calledOff();
        // A full host says so in its refusal (the local provider's "No capacity: …").
        if (!/capacity/i.test(err.message)) throw err;
      }
    }
    throw appError('ERR_ROOM_START_FAILED', 'Every browser host is at capacity; try again later.');
  }

  /**
   * Stops the room on its host. One still starting is called off: its host is told at once (it
   * kills a browser it is launching), and the start fails once the host has answered it.
   */
  async stop(roomId: string): Promise<void> {
    const pending = this.starting.get(roomId);
    if (pending) {
      pending.calledOff = true;
      if (pending.link) void this.stopOn(pending.link, roomId);
      await pending.done.catch(() => {});
    }
    const room = this.rooms.get(roomId);
    if (!room) return;
    this.rooms.delete(roomId);
    await this.stopOn(room.link, roomId);
  }

  /** Asks a host to stop a room; a link that is down needs nothing (the host stops its rooms). */
  private async stopOn(link: Link, roomId: string): Promise<void> {
    if (link.socket.connected) await this.call(link, 'host:stop', { roomId }).catch(() => {});
  }

  status(roomId: string): VmInfo | null {
    return this.rooms.get(roomId)?.info ?? null;
  }

  list(): VmInfo[] {
    return [...this.rooms.values()].map((r) => r.info);
  }

  subscribe(roomId: string, onFrame: (frame: VmFrame) => void): () => void {
    const room = this.running(roomId);
    const first = room.subscribers.size === 0;
    room.subscribers.add(onFrame);
    if (first) {
      this.call(room.link, 'host:subscribe', { roomId }).catch((err: unknown) =>
        this.opts.log?.(`browser host ${room.link.name}: subscribing to ${roomId}: ${err}`),
      );
    } else if (room.latest) {
      onFrame(room.latest);
    }
    return () => {
      if (!room.subscribers.delete(onFrame) || room.subscribers.size > 0) return;
      room.latest = null;
      if (this.rooms.get(roomId) === room && room.link.socket.connected)
        this.call(room.link, 'host:unsubscribe', { roomId }).catch(() => {});
    };
  }

  async input(roomId: string, input: VmInput): Promise<void> {
    await this.call(this.running(roomId).link, 'host:input', { roomId, input });
  }

  /** The host lets go (host:release); sent on the room's connection, so ahead of the inputs that follow. */
  async releaseInput(roomId: string): Promise<void> {
    const room = this.rooms.get(roomId);
    if (room) await this.call(room.link, 'host:release', { roomId });
  }

  async navigate(roomId: string, nav: VmNavigation): Promise<void> {
    await this.call(this.running(roomId).link, 'host:navigate', { roomId, nav });
  }

  /** A room this node runs, or ERR_ROOM_NOT_RUNNING. */
  private running(roomId: string): Room {
    const room = this.rooms.get(roomId);
    if (!room) throw appError('ERR_ROOM_NOT_RUNNING');
    return room;
  }

  onStopped(listener: (roomId: string, reason: VmProviderStop) => void): () => void {
    this.stopListeners.add(listener);
    return () => this.stopListeners.delete(listener);
  }

  /**
   * Stops every room; the starts still under way are called off (their hosts kill the browsers
   * they are launching) and not waited for: the disconnect ends their calls, and the hosts stop
   * whatever this node still had there.
   */
  async close(): Promise<void> {
    this.closed = true;
    for (const [roomId, pending] of this.starting) {
      pending.calledOff = true;
      if (pending.link) void this.stopOn(pending.link, roomId);
    }
    await Promise.all([...this.rooms.keys()].map((roomId) => this.stop(roomId)));
    for (const link of this.links) link.socket.disconnect();
  }
}

/** A start the host answered as done, but not with what runs (the room may run there all the same). */
class HostMisanswered extends AppError {
  constructor() {
    super('ERR_ROOM_START_FAILED', 'The browser host answered an invalid start.');
  }
}

/**
 * A call the host did not answer in time (it may still carry it out). Users get this message (a
 * start's 503, an input's ack): it names no host, whose address is the private network's.
 */
class HostUnanswered extends AppError {
  constructor(code: 'ERR_ROOM_START_FAILED' | 'ERR_ROOM_NOT_RUNNING') {
    super(code, 'A browser host did not answer in time.');
  }
}
