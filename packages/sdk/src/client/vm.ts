import type { VmCredentials, VmFrameEvent, VmInputPayload, VmStopReason } from '@parlor/protocol';
import { TypedEmitter } from './emitter.js';
import { type BadServerEventDetails, onChecked } from './server-events.js';
import { emitAck, type ParlorSocket } from './socket.js';

/** One input event of the controller: `vm:input` without its `chat_id`. */
export type VmInput = VmInputPayload extends infer P ? (P extends unknown ? Omit<P, 'chat_id'> : never) : never;

/** What `watch` answers: the frame size and who controls the room now. */
export interface VmWatching {
  width: number;
  height: number;
  controller_user_id: number | null;
}

/** A frame as the SDK hands it out: the event plus the time it arrived (ms, `Date.now()`). */
export interface VmFrame extends VmFrameEvent {
  receivedAt: number;
}

/** Failures RoomVm reports as `error` events. */
export const RoomVmErrorCode = {
  /**
   * A server event whose payload does not have the protocol's shape (e.g. `null`): it was
   * dropped. `details`: `{event, path, problem}`.
   */
  BAD_SERVER_EVENT: 'BAD_SERVER_EVENT',
  /** Handling a server event failed; `cause` has the error. */
  BACKGROUND_FAILURE: 'BACKGROUND_FAILURE',
} as const;
export type RoomVmErrorCode = (typeof RoomVmErrorCode)[keyof typeof RoomVmErrorCode];

export class RoomVmError extends Error {
  readonly code: RoomVmErrorCode;
  readonly details: unknown;

  constructor(code: RoomVmErrorCode, message: string, opts: { cause?: unknown; details?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'RoomVmError';
    this.code = code;
    this.details = opts.details;
  }
}

export interface RoomVmEvents {
  /** The room started (or was running when this socket entered the chat): fresh credentials. */
  started: (e: { credentials: VmCredentials }) => void;
  /**
   * The room stopped (`reason` from `room:stopped`), or this object's stream ended without it:
   * `disconnected` (the socket dropped: the server ends a watch on every disconnect, and frames
   * are not replayed) or `left` (the membership ended: `room:left`). `watching` is false from then
   * on; call `watch()` again once connected (and in the chat) to resume.
   */
  stopped: (e: { reason: VmStopReason | 'disconnected' | 'left' }) => void;
  /** A frame while watching. Acknowledged automatically after the listeners ran (unless `manualAck`). */
  frame: (f: VmFrame) => void;
  control: (e: { controller_user_id: number | null }) => void;
  /** A member asks for control (for the chat owner and moderators). */
  controlRequest: (e: { user_id: number; username: string }) => void;
  /** A background failure (a malformed server event, dropped); never thrown. */
  error: (error: RoomVmError) => void;
}

export interface RoomVmOptions {
  /** Acknowledge frames yourself with `ack(seq)` (default false: acknowledged after the `frame` listeners). */
  manualAck?: boolean;
  /** Bound of each acknowledged request (default 10 s). */
  timeoutMs?: number;
}

/**
 * The shared browser (room VM) of one chat, over a connected socket (docs/api.md "Room VM"). The
 * socket must have joined the chat (`joinRoom`). Start and stop are REST calls of
 * `ParlorClient` (`startRoom`, `stopRoom`); this class watches, acknowledges frames (the server
 * keeps at most two in flight: a slow consumer skips frames, it never queues them), and controls.
 *
 * ```ts
 * const room = new RoomVm(socket, chatId);
 * room.on('frame', (f) => draw(f.data));
 * await room.watch();                 // fetches credentials when none are given
 * if ((await room.requestControl()).granted) await room.click(100, 200);
 * ```
 */
export class RoomVm extends TypedEmitter<RoomVmEvents> {
  #credentials: VmCredentials | null = null;
  #watching = false;
  readonly #detach: () => void;

  constructor(
    readonly socket: ParlorSocket,
    readonly chatId: number,
    private readonly opts: RoomVmOptions = {},
  ) {
    super();
    // Payloads are checked before `mine` reads them (onChecked): a listener runs inside Socket.IO,
    // where a TypeError on a `null` payload would be uncaught (in Node the process ends).
    const mine = (e: { chat_id: number }) => e.chat_id === chatId;
    const onStarted = (e: { chat_id: number; credentials: VmCredentials }) => {
      if (!mine(e)) return;
      this.#credentials = e.credentials;
      this.emit('started', { credentials: e.credentials });
    };
    const onStopped = (e: { chat_id: number; reason: VmStopReason }) => {
      if (!mine(e)) return;
      this.#watching = false;
      this.#credentials = null;
      this.emit('stopped', { reason: e.reason });
    };
    const onFrame = (e: VmFrameEvent) => {
      if (!mine(e) || !this.#watching) return;
      this.emit('frame', { ...e, receivedAt: Date.now() });
      if (!this.opts.manualAck) this.ack(e.seq).catch(() => {});
    };
    const onControl = (e: { chat_id: number; controller_user_id: number | null }) => {
      if (mine(e)) this.emit('control', { controller_user_id: e.controller_user_id });
    };
    const onRequest = (e: { chat_id: number; user_id: number; username: string }) => {
      if (mine(e)) this.emit('controlRequest', { user_id: e.user_id, username: e.username });
    };
    const streamEnded = (reason: 'disconnected' | 'left') => {
      if (!this.#watching) return;
      this.#watching = false;
      this.emit('stopped', { reason });
    };
    const onDisconnect = () => streamEnded('disconnected');
    const onLeft = (e: { chat_id: number }) => {
      if (!mine(e)) return;
      this.#credentials = null;
      streamEnded('left');
    };
    const bad = (details: BadServerEventDetails) => {
      const message = `The server sent ${details.event} with a malformed payload; it was ignored.`;
      this.emit('error', new RoomVmError('BAD_SERVER_EVENT', message, { details }));
    };
    const threw = (error: unknown) =>
      this.emit('error', new RoomVmError('BACKGROUND_FAILURE', 'Handling a server event failed.', { cause: error }));
    const offs = [
      onChecked(socket, 'room:started', onStarted, bad, threw),
      onChecked(socket, 'room:stopped', onStopped, bad, threw),
      onChecked(socket, 'vm:frame', onFrame, bad, threw),
      onChecked(socket, 'vm:control', onControl, bad, threw),
      onChecked(socket, 'vm:control:request', onRequest, bad, threw),
      onChecked(socket, 'room:left', onLeft, bad, threw),
    ];
    socket.on('disconnect', onDisconnect);
    this.#detach = () => {
      socket.off('disconnect', onDisconnect);
      for (const off of offs) off();
    };
  }

  /** Whether this object is watching (between `watch` and `unwatch`/`stopped`, including a drop of the socket). */
  get watching(): boolean {
    return this.#watching;
  }

  /** `vm:credentials`: a fresh viewer token (members only, room running). */
  async credentials(): Promise<VmCredentials> {
    const { credentials } = await this.#ack<{ credentials: VmCredentials }>('vm:credentials', {});
    this.#credentials = credentials;
    return credentials;
  }

  /**
   * `vm:watch`: starts the stream; the latest frame follows at once. Without a token it uses the
   * last pushed credentials when unexpired, else asks for fresh ones.
   */
  async watch(token?: string): Promise<VmWatching> {
    const usable = this.#credentials && Date.parse(this.#credentials.expires_at) > Date.now() + 5_000;
    const t = token ?? (usable && this.#credentials ? this.#credentials.token : (await this.credentials()).token);
    this.#watching = true;
    try {
      return await this.#ack<VmWatching>('vm:watch', { token: t });
    } catch (error) {
      this.#watching = false;
      throw error;
    }
  }

  async unwatch(): Promise<void> {
    this.#watching = false;
    await this.#ack('vm:unwatch', {});
  }

  /**
   * `vm:frame:ack`: the viewer is ready for the next frame (only needed with `manualAck`). Sent
   * without asking for an answer, as flow-control acknowledgements are: one per frame already, an
   * answer to each would double the packets, and a refused one (not watching any more) changes
   * nothing here. Resolves once handed to the socket.
   */
  async ack(seq: number): Promise<void> {
    this.socket.emit('vm:frame:ack', { chat_id: this.chatId, seq });
  }

  /** `vm:control:request`: granted at once when nobody controls; otherwise the chat is asked. */
  requestControl(): Promise<{ granted: boolean; controller_user_id: number | null }> {
    return this.#ack('vm:control:request', {});
  }

  /** `vm:control:grant`: the chat owner or a moderator hands control to a member. */
  async grant(userId: number): Promise<void> {
    await this.#ack('vm:control:grant', { user_id: userId });
  }

  /** `vm:control:release`: the controller gives control back (owner, moderators: take it). */
  async release(): Promise<void> {
    await this.#ack('vm:control:release', {});
  }

  /** `vm:input`: one input event of the controller. */
  async input(input: VmInput): Promise<void> {
    await this.#ack('vm:input', input);
  }

  /** A left click at frame pixel (x, y): move, down, up. */
  async click(x: number, y: number, button: 'left' | 'middle' | 'right' = 'left'): Promise<void> {
    for (const type of ['move', 'down', 'up'] as const) await this.input({ kind: 'mouse', type, x, y, button });
  }

  /** Inserts text as typed (paste, IME). */
  typeText(text: string): Promise<void> {
    return this.input({ kind: 'text', text });
  }

  /** A key press: down then up (`key`, `code` as in DOM KeyboardEvent). */
  async press(key: string, code: string): Promise<void> {
    await this.input({ kind: 'key', type: 'down', key, code });
    await this.input({ kind: 'key', type: 'up', key, code });
  }

  /** Opens a URL, or goes back, forward or reloads (refused in kiosk rooms). */
  navigate(to: string | 'back' | 'forward' | 'reload'): Promise<void> {
    const action = to === 'back' || to === 'forward' || to === 'reload' ? to : null;
    return this.input(action ? { kind: 'navigate', action } : { kind: 'navigate', url: to });
  }

  /** Stops listening to the socket (does not unwatch: call `unwatch` first to end the stream). */
  close(): void {
    this.#watching = false;
    this.#detach();
    this.removeAllListeners();
  }

  #ack<T extends object>(event: Parameters<typeof emitAck>[1], payload: object): Promise<T> {
    return emitAck<T>(this.socket, event, { chat_id: this.chatId, ...payload }, this.opts.timeoutMs);
  }
}
