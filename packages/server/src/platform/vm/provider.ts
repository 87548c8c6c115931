/**
 * The VM provider port: what the chat code needs from "something that runs room browsers".
 * Two implementations: local-provider.ts (Debian chromium on this node over the DevTools pipe) and
 * remote-provider.ts (the same on browser hosts, VM_HOSTS); from-config.ts picks one, and the chat
 * code does not know which. Rooms are named by an opaque string id (the vm module uses the chat id).
 *
 * Failures to start throw `appError('ERR_ROOM_START_FAILED', <why>)`; input and navigation on a room
 * that is not running throw `appError('ERR_ROOM_NOT_RUNNING')`.
 */

/** Room settings (spec 2.4) as the provider needs them, plus the node's network policy. */
export interface VmStartSpec {
  browser: 'brave' | 'tor';
  proxy: 'us' | 'eu' | 'none';
  /** First page: about:blank or an http(s) URL. */
  startUrl: string;
  /** False: requests to loopback, private, link-local and metadata addresses fail (DESIGN.md 9). */
  allowPrivateNetworks: boolean;
  width: number;
  height: number;
}

export type VmState = 'starting' | 'running' | 'stopped';

export interface VmInfo {
  roomId: string;
  state: VmState;
  width: number;
  height: number;
  startedAt: Date;
  /** How many times the browser was restarted after a crash during this run. */
  restarts: number;
}

/** One encoded frame of the room's screen. `seq` increases within a room, across restarts. */
export interface VmFrame {
  seq: number;
  mime: 'image/jpeg';
  data: Buffer;
  width: number;
  height: number;
}

export type VmInput =
  | { kind: 'mouse'; type: 'move' | 'down' | 'up'; x: number; y: number; button?: 'left' | 'middle' | 'right' }
  | { kind: 'wheel'; x: number; y: number; dx: number; dy: number }
  | { kind: 'key'; type: 'down' | 'up'; key: string; code: string }
  | { kind: 'text'; text: string };

export type VmNavigation = { url: string } | { action: 'back' | 'forward' | 'reload' };

/** Why the provider ended a room by itself (a stop asked through `stop` is not reported). */
export type VmProviderStop = 'crashed';

export interface VmProvider {
  /** Starts the room's browser; a room already starting or running resolves with its info at once. */
  start(roomId: string, spec: VmStartSpec): Promise<VmInfo>;
  /** Stops the room's browser and frees everything it held; a stopped room is a no-op. */
  stop(roomId: string): Promise<void>;
  status(roomId: string): VmInfo | null;
  list(): VmInfo[];
  /**
   * Frames of the room while subscribed; the latest frame (if any) comes first. The provider only
   * encodes frames while at least one subscriber exists. Returns the unsubscribe function.
   */
  subscribe(roomId: string, onFrame: (frame: VmFrame) => void): () => void;
  input(roomId: string, input: VmInput): Promise<void>;
  /**
   * Lets go of the keys and mouse buttons the room's input holds (control changed hands): the page
   * gets a key-up or mouse-up for each, ahead of any input sent after this call, and the next
   * controller starts with nothing held. A room that is not running holds nothing: resolves.
   */
  releaseInput(roomId: string): Promise<void>;
  navigate(roomId: string, nav: VmNavigation): Promise<void>;
  /** Rooms the provider ended by itself (a crash after its one restart). */
  onStopped(listener: (roomId: string, reason: VmProviderStop) => void): () => void;
  /** Stops every room (server shutdown). */
  close(): Promise<void>;
}
