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

/** Handshake refusals that no retry can change: the session ended, or the account is banned. */
export const TERMINAL_CONNECT_CODES: readonly string[] = ['ERR_UNAUTHENTICATED', 'ERR_BANNED'];

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
 * `reconnectionDelay` … `reconnectionDelayMax`, 1-5 s by default). A refusal with a code of
 * {@link TERMINAL_CONNECT_CODES} stops it and calls `onRefused`. A disconnect the client asked for
 * (`socket.disconnect()`) is left alone, as is a socket made with `reconnection: false`.
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
  const retry = () => {
    if (stopped || timer !== undefined || !socket.io.reconnection()) return;
    const cap = Math.min(socket.io.reconnectionDelayMax(), socket.io.reconnectionDelay() * 2 ** attempts);
    attempts++;
    timer = setTimeout(
      () => {
        timer = undefined;
        if (!stopped && !socket.active) socket.connect();
      },
      cap / 2 + Math.random() * (cap / 2),
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
      const error = ParlorApiError.fromAck({ code, message: err.message });
      for (const listener of [...refused]) listener(error);
      return;
    }
    retry();
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

/** The server refuses a handshake with an Error whose message is the catalogue code. */
function connectErrorCode(err: Error): string {
  return /^ERR_[A-Z_]+$/.test(err.message) ? err.message : ClientErrorCode.ERR_SOCKET_CONNECT;
}

/**
 * Opens the realtime socket of a logged-in client: Socket.IO at `/socket.io` on the API's origin,
 * WebSocket transport only, authenticated by the `psession` cookie (an explicit `Cookie` header in
 * Node; browsers send the cookie themselves with `withCredentials`). Resolves once connected.
 * @throws ParlorApiError `ERR_UNAUTHENTICATED` (or the server's connect error code) when refused;
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
    const onError = (err: Error) => fail(ParlorApiError.fromAck({ code: connectErrorCode(err), message: err.message }));
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
