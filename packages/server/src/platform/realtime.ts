import type { Server as HttpServer } from 'node:http';
import type { ClientToServerEvents, ServerToClientEvents } from '@parlor/protocol';
import { createAdapter } from '@socket.io/redis-streams-adapter';
import type { Redis } from 'ioredis';
import { Server, type Socket } from 'socket.io';
import { toErrorBody } from './errors.js';
import { coalesceSocketWrites } from './socket-writes.js';
import { compilePayload } from './validation.js';

/** Socket room names; every emit goes through these, never a hand-built string. */
export const rooms = {
  chat: (id: number) => `chat:${id}`,
  user: (id: number) => `user:${id}`,
  session: (id: number) => `session:${id}`,
};

/** What the server knows of a connected socket (set by the handshake, read by handlers). */
export interface SocketData {
  userId: number;
  sessionId: number;
  username: string;
  permissionLevel: number;
  stranger: boolean;
}

export type Io = Server<ClientToServerEvents, ServerToClientEvents, Record<string, never>, SocketData>;
export type AppSocket = Socket<ClientToServerEvents, ServerToClientEvents, Record<string, never>, SocketData>;

export interface RealtimeOptions {
  allowedOrigins: string[];
  /** Authenticates the handshake from its Cookie header; null refuses the connection. */
  authenticate(cookieHeader: string | undefined): Promise<SocketData | null>;
  /** Cluster mode: a Redis connection of its own for the streams adapter, and the key prefix. */
  redis: { client: Redis; prefix: string } | null;
}

/** How long a dropped client may come back and receive what it missed. */
const RECOVERY_WINDOW_MS = 2 * 60 * 1000;

export function createRealtime(server: HttpServer, opts: RealtimeOptions) {
  const io: Io = new Server(server, {
    path: '/socket.io',
    serveClient: false,
    maxHttpBufferSize: 1e6,
    allowRequest: (req, cb) => {
      const origin = req.headers.origin;
      cb(null, origin === undefined || opts.allowedOrigins.includes(origin));
    },
    connectionStateRecovery: { maxDisconnectionDuration: RECOVERY_WINDOW_MS, skipMiddlewares: false },
    ...(opts.redis
      ? {
          adapter: createAdapter(opts.redis.client, {
            streamName: `${opts.redis.prefix}socket.io`,
            channelPrefix: `${opts.redis.prefix}socket.io`,
            sessionKeyPrefix: `${opts.redis.prefix}sio:session:`,
          }),
        }
      : {}),
  });

  // One write per connection per turn: the frames of a group-committed batch leave together.
  coalesceSocketWrites(io.engine as unknown as Parameters<typeof coalesceSocketWrites>[0]);

  io.use((socket, next) => {
    opts
      .authenticate(socket.handshake.headers.cookie)
      .then((data) => {
        if (!data) return next(new Error('ERR_UNAUTHENTICATED'));
        socket.data = data;
        next();
      })
      .catch(() => next(new Error('ERR_INTERNAL')));
  });

  /** The client events of every module (`on`), served by one middleware per socket. */
  const handlers = new Map<string, ClientEvent>();

  io.on('connection', (socket) => {
    void socket.join([rooms.user(socket.data.userId), rooms.session(socket.data.sessionId)]);
    // One function per socket serves every client event: a listener per event and socket cost
    // about 2 KiB per connection (measured with the connect bench), for events most never send.
    socket.use((packet, next) => {
      const handler = handlers.get(packet[0] as string);
      if (handler) serveEvent(socket, handler, packet[1], packet[2]);
      else next();
    });
  });

  return {
    io,
    /**
     * Registers a client event for every socket: the payload is schema-checked, the ack carries
     * `{ok: true, …}` or `{ok: false, code, message}`; bad payloads and failures never throw out.
     */
    on<P, R extends object>(
      event: keyof ClientToServerEvents,
      schema: object,
      handler: (socket: AppSocket, payload: P) => Promise<R>,
    ): void {
      if (handlers.has(event)) throw new Error(`socket event ${event} registered twice`);
      handlers.set(event, { event, valid: compilePayload(schema), run: handler as ClientEvent['run'] });
    },
    /** Typed emit to one or more rooms, on every node. */
    emitTo<E extends keyof ServerToClientEvents>(
      room: string | string[],
      event: E,
      ...args: Parameters<ServerToClientEvents[E]>
    ) {
      io.to(room).emit(event, ...args);
    },
    /** Drops the sockets of ended sessions, wherever they are connected. */
    disconnectSessions(sessionIds: number[]) {
      if (sessionIds.length > 0) io.in(sessionIds.map(rooms.session)).disconnectSockets(true);
    },
    /** Makes every socket of a user leave a chat room (kick, ban, leave), on every node. */
    leaveChat(userId: number, chatId: number) {
      io.in(rooms.user(userId)).socketsLeave(rooms.chat(chatId));
    },
    async close() {
      io.disconnectSockets(true);
      await new Promise<void>((resolve) => {
        io.close(() => resolve());
        // io.close also closes the HTTP server, which Fastify closes itself; tolerate either order.
        setTimeout(resolve, 1000).unref();
      });
      await opts.redis?.client.quit().catch(() => opts.redis?.client.disconnect());
    },
  };
}

export type Realtime = ReturnType<typeof createRealtime>;

/**
 * Sends a snapshot to one socket, on this node only: what the client is sent again on every
 * (re)connect or join (`chat:list`, `room:members`). With connection state recovery on, a plain
 * `socket.emit` is a broadcast through the adapter so that a client that comes back can be given
 * it again: in cluster mode one XADD per emit, read back and decoded by every node, with the
 * client waiting for that round trip. A snapshot needs none of that (the cluster adapter keeps a
 * local one out of its stream, so it is not replayed either; the embedded adapter may replay it,
 * and the fresh one follows).
 */
export function emitSnapshot<E extends keyof ServerToClientEvents>(
  socket: AppSocket,
  event: E,
  ...args: Parameters<ServerToClientEvents[E]>
): void {
  socket.nsp.local.to(socket.id).emit(event, ...args);
}

interface ClientEvent {
  event: string;
  valid: (payload: unknown) => boolean;
  run: (socket: AppSocket, payload: unknown) => Promise<object>;
}

/** Answers one client event: ERR_VALIDATION for a bad payload, else the handler's result or error. */
function serveEvent(socket: AppSocket, h: ClientEvent, payload: unknown, ack: unknown): void {
  const reply = typeof ack === 'function' ? (ack as (a: unknown) => void) : () => {};
  if (!h.valid(payload)) {
    reply({ ok: false, code: 'ERR_VALIDATION', message: 'The payload is not valid.' });
    return;
  }
  Promise.resolve()
    .then(() => h.run(socket, payload))
    .then((result) => reply({ ok: true, ...result }))
    .catch((err: unknown) => {
      const { body, unexpected } = toErrorBody(err);
      if (unexpected) console.error(`socket event ${h.event} failed`, err);
      reply({
        ok: false,
        code: body.code,
        message: body.message,
        ...(body.ttl !== undefined ? { ttl: body.ttl } : {}),
        ...(body.retry_after !== undefined ? { retry_after: body.retry_after } : {}),
      });
    });
}
