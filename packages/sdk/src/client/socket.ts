import type { ClientToServerEvents, RoomJoinAck, RoomJoinPayload, ServerToClientEvents } from '@parlor/protocol';
import type { Static } from '@sinclair/typebox';
import { io, type Socket } from 'socket.io-client';
import { ParlorApiError } from './errors.js';
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
  /** Reconnect automatically after a drop (default true; the server recovers state for 2 min). */
  reconnection?: boolean;
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
      resolve(socket);
    };
    // The server refuses a handshake with an Error whose message is the catalogue code.
    const onError = (err: Error) => {
      const code = /^ERR_[A-Z_]+$/.test(err.message) ? err.message : 'ERR_SOCKET_CONNECT';
      fail(ParlorApiError.fromAck({ code, message: err.message }));
    };
    const timer = setTimeout(
      () =>
        fail(ParlorApiError.fromAck({ code: 'ERR_SOCKET_TIMEOUT', message: 'The socket did not connect in time.' })),
      opts.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    );
    socket.on('connect', onConnect);
    socket.on('connect_error', onError);
    socket.connect();
  });
}

/**
 * Emits a client event and waits (bounded) for its `{ok, …}` acknowledgement.
 * @throws ParlorApiError for `{ok: false, code, message}`, and `ERR_SOCKET_TIMEOUT` without an answer.
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
  } catch {
    throw ParlorApiError.fromAck({ code: 'ERR_SOCKET_TIMEOUT', message: `No acknowledgement of ${event} in time.` });
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
