import type { ClientToServerEvents, RoomJoinAck, RoomJoinPayload, ServerToClientEvents } from '@parlor/protocol';
import type { Static } from '@sinclair/typebox';
import { io, type Socket } from 'socket.io-client';
import { ClientErrorCode, ParlorApiError } from './errors.js';
import type { HttpClient } from './http.js';

/** A Socket.IO client typed with the protocol's event maps. */
export type ParlorSocket = Socket<ServerToClientEvents, ClientToServerEvents>;

/** The `room:join` acknowledgement without its `ok` flag: `{chat, epoch, members, key_ring}`. */
export type RoomJoined = Omit<Static<typeof RoomJoinAck>, 'ok'>;

export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
export const DEFAULT_ACK_TIMEOUT_MS = 10_000;

export interface ConnectOptions {
  /** How long the first connection may take (default 10 s). */
  timeoutMs?: number;
  /**
   * Reconnect automatically after a drop (default true; the server recovers state for 2 min),
   * also after the server dropped the socket or refused a reconnection ({@link keepConnected}).
   */
  reconnection?: boolean;
}

/**
 * Handshake refusals that no retry can change: the session ended, or the account is banned. A
 * timeout (`ERR_TIMED_OUT`) is not one: the session lives on, and connects again when it ends.
 */
export const TERMINAL_CONNECT_CODES: readonly string[] = ['ERR_UNAUTHENTICATED', 'ERR_BANNED'];

/**
 * The longest wait between two handshakes while the account is timed out. Timeouts last up to 30
 * days, longer than a timer can wait (about 24.8 days); a session ended meanwhile (a logout on
 * another device) is reported within this long too.
 */
export const TIMED_OUT_RETRY_MAX_MS = 10 * 60_000;

/**
 * How far past a timeout's end the next handshake is spread (at random), so that the clients of
 * users timed out together (a raid) do not all come back in the same instant.
 */
export const TIMED_OUT_RETRY_SPREAD_MS = 1_000;

/**
 * How long to wait after a handshake refused with `ERR_TIMED_OUT` before the next one: until the
 * timeout ends (the connect error's `retry_after`, in seconds) plus up to
 * {@link TIMED_OUT_RETRY_SPREAD_MS}, but at most {@link TIMED_OUT_RETRY_MAX_MS} (also when the
 * server did not say when it ends). `random` is in [0, 1).
 */
export function timedOutRetryDelayMs(retryAfterS: unknown, random: number = Math.random()): number {
  if (typeof retryAfterS !== 'number' || !Number.isFinite(retryAfterS) || retryAfterS < 0)
    return TIMED_OUT_RETRY_MAX_MS;
  return Math.min(retryAfterS * 1000 + random * TIMED_OUT_RETRY_SPREAD_MS, TIMED_OUT_RETRY_MAX_MS);
}

export interface KeepConnectedOptions {
  /** Called once when the server refuses the session for good ({@link TERMINAL_CONNECT_CODES}); reconnecting stops. */
  onRefused?: (error: ParlorApiError) => void;
}

interface Supervisor {
  refused: Set<(error: ParlorApiError) => void>;
  stop(): void;
}

const supervisors = new WeakMap<ParlorSocket, Supervisor>();

/**
 * Keeps a socket connected where Socket.IO itself gives up: after the server dropped it
 * (`io server disconnect`: a graceful shutdown, a permission change, an ended session) and after
 * the server's middleware refused a reconnection (`connect_error` with the socket inactive). It
 * calls `socket.connect()` again after a capped, randomised, doubling delay (the Manager's
 * `reconnectionDelay` … `reconnectionDelayMax`, 1-5 s by default); after an `ERR_TIMED_OUT`
 * refusal, when the timeout ends ({@link timedOutRetryDelayMs}: at most every 10 minutes). A
 * refusal with a code of {@link TERMINAL_CONNECT_CODES} stops it and calls `onRefused`. A
 * disconnect the client asked for (`socket.disconnect()`) is left alone, as is a socket made with
 * `reconnection: false`.
 * `connect` installs it; installing it again on the same socket only adds `onRefused`.
 * @returns a function that removes this `onRefused` (and stops supervising when it was the last).
 */
export function keepConnected(socket: ParlorSocket, opts: KeepConnectedOptions = {}): () => void {
  let supervisor = supervisors.get(socket);
  if (!supervisor) {
    supervisor = supervise(socket);
    supervisors.set(socket, supervisor);
  }
  const own = supervisor;
  const onRefused = opts.onRefused ?? (() => {});
  own.refused.add(onRefused);
  return () => {
    own.refused.delete(onRefused);
    if (own.refused.size === 0 && supervisors.get(socket) === own) {
      own.stop();
      supervisors.delete(socket);
    }
  };
}

function supervise(socket: ParlorSocket): Supervisor {
  const refused = new Set<(error: ParlorApiError) => void>();
  let attempts = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  /** Connects again after `delayMs`, or the next backoff delay. */
  const retry = (delayMs?: number) => {
    if (stopped || timer !== undefined || !socket.io.reconnection()) return;
    const cap = Math.min(socket.io.reconnectionDelayMax(), socket.io.reconnectionDelay() * 2 ** attempts);
    attempts++;
    timer = setTimeout(
      () => {
        timer = undefined;
        if (!stopped && !socket.active) socket.connect();
      },
      delayMs ?? cap / 2 + Math.random() * (cap / 2),
    );
  };
  const onDisconnect = (reason: string) => {
    if (reason === 'io server disconnect') retry();
  };
  const onConnectError = (err: Error) => {
    // While the socket is active the Manager retries transport failures itself.
    if (socket.active) return;
    const code = connectErrorCode(err);
    if (TERMINAL_CONNECT_CODES.includes(code)) {
      stop();
      const error = connectError(err);
      for (const listener of [...refused]) listener(error);
      return;
    }
    // A timed-out session is live: try again when the timeout ends, not every few seconds.
    if (code === 'ERR_TIMED_OUT') retry(timedOutRetryDelayMs(connectErrorData(err).retry_after));
    else retry();
  };
  const onConnect = () => {
    attempts = 0;
  };
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    timer = undefined;
    socket.off('disconnect', onDisconnect);
    socket.off('connect_error', onConnectError);
    socket.off('connect', onConnect);
  };
  socket.on('disconnect', onDisconnect);
  socket.on('connect_error', onConnectError);
  socket.on('connect', onConnect);
  return { refused, stop };
}

/**
 * The server refuses a handshake with an Error whose message is the catalogue code, and whose
 * `data` may add fields (`retry_after` of `ERR_TIMED_OUT`).
 */
function connectErrorCode(err: Error): string {
  return /^ERR_[A-Z_]+$/.test(err.message) ? err.message : ClientErrorCode.ERR_SOCKET_CONNECT;
}

function connectErrorData(err: Error): Record<string, unknown> {
  const data = (err as Error & { data?: unknown }).data;
  return typeof data === 'object' && data !== null && !Array.isArray(data) ? (data as Record<string, unknown>) : {};
}

/** The ParlorApiError of a refused handshake: its code, and the fields of its `data` in `body`. */
function connectError(err: Error): ParlorApiError {
  return ParlorApiError.fromAck({ ...connectErrorData(err), code: connectErrorCode(err), message: err.message });
}

/**
 * Opens the realtime socket of a logged-in client: Socket.IO at `/socket.io` on the API's origin,
 * WebSocket transport only, authenticated by the `psession` cookie (an explicit `Cookie` header in
 * Node; browsers send the cookie themselves with `withCredentials`). Resolves once connected.
 * @throws ParlorApiError `ERR_UNAUTHENTICATED` (or the server's connect error code: `ERR_TIMED_OUT`
 *   with `retryAfter`, `ERR_BANNED`, `ERR_SERVICE_UNAVAILABLE`, …) when refused;
 *   `ERR_SOCKET_TIMEOUT` when the connection does not open in time.
 */
export function connect(client: HttpClient, opts: ConnectOptions = {}): Promise<ParlorSocket> {
  const headers: Record<string, string> = { ...client.headers };
  const cookie = client.cookieHeader();
  if (cookie) headers.cookie = cookie;
  const socket: ParlorSocket = io(client.baseUrl, {
    path: '/socket.io',
    transports: ['websocket'],
    extraHeaders: headers,
    withCredentials: true,
    reconnection: opts.reconnection ?? true,
    autoConnect: false,
    forceNew: true,
  });
  // Socket.IO keeps what arrives during a handshake until the handshake is accepted, also across
  // a refused one: what a refused handshake was sent (a recovery's missed events) belongs to no
  // connection, and would be delivered on the next one, which may be another session's.
  socket.on('connect_error', () => {
    socket.receiveBuffer = [];
  });
  return new Promise((resolve, reject) => {
    const cleanup = () => {
      clearTimeout(timer);
      socket.off('connect', onConnect);
      socket.off('connect_error', onError);
    };
    const fail = (error: ParlorApiError) => {
      cleanup();
      socket.disconnect();
      reject(error);
    };
    const onConnect = () => {
      cleanup();
      if (opts.reconnection ?? true) keepConnected(socket);
      resolve(socket);
    };
    const onError = (err: Error) => fail(connectError(err));
    const timer = setTimeout(
      () =>
        fail(
          ParlorApiError.fromAck({
            code: ClientErrorCode.ERR_SOCKET_TIMEOUT,
            message: 'The socket did not connect in time.',
          }),
        ),
      opts.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    );
    socket.on('connect', onConnect);
    socket.on('connect_error', onError);
    socket.connect();
  });
}

/**
 * Emits a client event and waits (bounded) for its `{ok, …}` acknowledgement.
 * @throws ParlorApiError for `{ok: false, code, message}`; `ERR_SOCKET_DISCONNECTED` when the
 *   socket disconnects before the answer (the server may or may not have acted on the event);
 *   `ERR_SOCKET_TIMEOUT` without an answer in time.
 */
export async function emitAck<T extends object>(
  socket: ParlorSocket,
  event: keyof ClientToServerEvents,
  payload: unknown,
  timeoutMs = DEFAULT_ACK_TIMEOUT_MS,
): Promise<T> {
  // The typed emitWithAck cannot express the timeout-decorated ack; the payload is checked by the
  // callers' signatures and by the server's schema.
  const emitter = socket.timeout(timeoutMs) as unknown as {
    emitWithAck(event: string, payload: unknown): Promise<unknown>;
  };
  let ack: unknown;
  try {
    ack = await emitter.emitWithAck(event, payload);
  } catch (error) {
    // Socket.IO rejects the pending acknowledgements with this message when the socket disconnects.
    const dropped = error instanceof Error && error.message === 'socket has been disconnected';
    throw ParlorApiError.fromAck(
      dropped
        ? {
            code: ClientErrorCode.ERR_SOCKET_DISCONNECTED,
            message: `The socket disconnected before ${event} was acknowledged.`,
          }
        : { code: ClientErrorCode.ERR_SOCKET_TIMEOUT, message: `No acknowledgement of ${event} in time.` },
      { cause: error },
    );
  }
  if (typeof ack === 'object' && ack !== null && (ack as { ok?: unknown }).ok === true) {
    const { ok: _ok, ...rest } = ack as { ok: true } & T;
    return rest as unknown as T;
  }
  throw ParlorApiError.fromAck(ack);
}

/** `room:join {chat_id} | {invite} | {vanity}` → `{chat, epoch, members, key_ring}`. */
export function joinRoom(socket: ParlorSocket, payload: RoomJoinPayload, timeoutMs?: number): Promise<RoomJoined> {
  return emitAck<RoomJoined>(socket, 'room:join', payload, timeoutMs);
}

/** `room:leave {chat_id}`: ends the membership (the chat moves to a new epoch). */
export async function leaveRoom(socket: ParlorSocket, chatId: number, timeoutMs?: number): Promise<void> {
  await emitAck<object>(socket, 'room:leave', { chat_id: chatId }, timeoutMs);
}
