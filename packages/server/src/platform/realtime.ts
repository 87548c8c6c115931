import type { Server as HttpServer, IncomingMessage } from 'node:http';
import type { ClientToServerEvents, ServerToClientEvents } from '@parlor/protocol';
import { createAdapter } from '@socket.io/redis-streams-adapter';
import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import { Server } from 'socket.io';
import { logPublishFailures } from './adapter-failures.js';
import { type HeldPresence, trackNodePresence } from './node-presence.js';
import { guardRecovery, type RecoveryCheck, reachRecoveringSockets, trackReplays } from './recovery.js';
import { countPendingConnections } from './socket-admission.js';
import { type ClientEvent, refuseAndDrop, refuseUnknown, serveEvent } from './socket-events.js';
import { authenticateHandshakes, type HandshakeRefusal, sessionFull } from './socket-handshake.js';
import { CROSS_NODE_READ_TIMEOUT_MS, crossNodeReads } from './socket-reads.js';
import { type AppSocket, type Io, rooms, type SocketData } from './socket-rooms.js';
import { coalesceSocketWrites } from './socket-writes.js';
import { type StreamReader, trackStreamOrder } from './stream-order.js';
import { compilePayload } from './validation.js';

// Room names, socket types and the handshake's limits live beside this file; their importers keep
// importing them from here.
export { type HandshakeRefusal, SOCKETS_PER_SESSION_MAX } from './socket-handshake.js';
export { type AppSocket, emitSnapshot, type Io, rooms, type SocketData } from './socket-rooms.js';

export interface RealtimeOptions {
  allowedOrigins: string[];
  /**
   * Authenticates the handshake from its Cookie header; a refusal (null: no session,
   * `ERR_UNAUTHENTICATED`) refuses the connection with its code. A connection that would be
   * recovered is checked with it first (recovery.ts), so its look-up should be cached.
   */
  authenticate(cookieHeader: string | undefined): Promise<SocketData | HandshakeRefusal | null>;
  /** Cluster mode: a Redis connection of its own for the streams adapter, and the key prefix. */
  redis: { client: Redis; prefix: string } | null;
  /** The app's logger: failed handshakes and events (query values kept out by its serializer). */
  log: FastifyBaseLogger;
  /**
   * The client address of a handshake, for PENDING_CONNECTIONS_PER_ADDRESS_MAX; unset: the
   * connection's peer (behind a proxy, the proxy).
   */
  clientAddress?: (req: IncomingMessage) => string;
}

/** The cluster's Redis stream of room changes and broadcasts (the streams adapter's). */
const streamNameOf = (prefix: string) => `${prefix}socket.io`;

/** How long a dropped client may come back and receive what it missed. */
const RECOVERY_WINDOW_MS = 2 * 60 * 1000;

/**
 * How long the streams adapter's reader blocks in one `XREAD` (the adapter's default, named here
 * because its Redis connection's command timeout must be longer: RedisState.socketAdapterConnection).
 */
export const STREAM_BLOCK_MS = 5_000;

/**
 * At shutdown, how long the work of the sockets this node dropped (`afterDisconnect`: presence
 * deltas) may take before the adapter closes: a cross-node read and the emits after it.
 */
const DISCONNECT_WORK_WAIT_MS = CROSS_NODE_READ_TIMEOUT_MS + 1_000;

/**
 * How long a transport connection may take to send its Socket.IO CONNECT and be authenticated
 * before it is closed (Socket.IO's `connectTimeout`, 45 s by default): a client sends it at once.
 */
const SOCKET_CONNECT_TIMEOUT_MS = 10_000;

/** At shutdown, how long this node's connections may take to write what they have buffered. */
const CONNECTION_CLOSE_WAIT_MS = 1_000;

/**
 * The largest message a client may send on the socket (Engine.IO's `maxHttpBufferSize`: a longer
 * WebSocket message closes the connection, a longer polling request is refused), like the HTTP
 * body limit. The largest legitimate client event is `vm:input {kind: "text"}` with
 * `Limits.VM_INPUT_TEXT_MAX` (4096) characters, each at most 6 bytes of JSON (a control character
 * or a lone surrogate is written `\u001f`): 24,576 bytes, plus under 100 for the rest of its packet
 * (event name, chat id, ack id). The next largest, `vm:input` navigate (2000-character URL), is
 * under 12.1 KB; the others are under 3.2 KB. 32 KiB covers the largest with a margin of a quarter,
 * where Socket.IO's default (1 MB) let every socket make the server buffer and parse a megabyte.
 */
export const SOCKET_MESSAGE_MAX_BYTES = 32 * 1024;

export function createRealtime(server: HttpServer, opts: RealtimeOptions) {
  let closing = false;
  /** Work of sockets that disconnected (afterDisconnect), still running: close() lets it finish. */
  const disconnectWork = new Set<Promise<void>>();
  const io: Io = new Server(server, {
    path: '/socket.io',
    serveClient: false,
    maxHttpBufferSize: SOCKET_MESSAGE_MAX_BYTES,
    connectTimeout: SOCKET_CONNECT_TIMEOUT_MS,
    allowRequest: (req, cb) => {
      // A node shutting down takes no new connection: the client tries again (another node).
      if (closing) return cb('server shutting down', false);
      const origin = req.headers.origin;
      if (origin !== undefined && !opts.allowedOrigins.includes(origin)) return cb(null, false);
      if (!admitPending(req)) return cb('too many connections from this address', false);
      cb(null, true);
    },
    // Pages on the allowed origins may read the polling transport's answers with the cookie (the
    // handshake's Origin check is allowRequest's); WebSockets need no CORS.
    cors: { origin: opts.allowedOrigins, credentials: true },
    connectionStateRecovery: { maxDisconnectionDuration: RECOVERY_WINDOW_MS, skipMiddlewares: false },
    ...(opts.redis
      ? {
          adapter: createAdapter(opts.redis.client, {
            streamName: streamNameOf(opts.redis.prefix),
            blockTimeInMs: STREAM_BLOCK_MS,
            channelPrefix: `${opts.redis.prefix}socket.io`,
            sessionKeyPrefix: `${opts.redis.prefix}sio:session:`,
          }),
        }
      : {}),
  });

  if (opts.redis) logPublishFailures(io.of('/').adapter, opts.log);
  const admitPending = countPendingConnections(io, opts.clientAddress ?? ((req) => req.socket.remoteAddress ?? ''));
  // One write per connection per turn: the frames of a group-committed batch leave together.
  coalesceSocketWrites(io.engine as unknown as Parameters<typeof coalesceSocketWrites>[0]);

  /** Set by the chats wiring: which restored rooms a recovered connection keeps (recovery.ts). */
  let recoveryCheck: RecoveryCheck | null = null;
  /** What was replayed to recovered sockets that this node has yet to deliver (recovery.ts). */
  const replays = trackReplays(io.of('/').adapter);
  guardRecovery(io.of('/'), {
    // The handshake's own session look-up, which is cached: the middleware's, right after, finds it there.
    sessionOf: async (cookie) => {
      const data = await opts.authenticate(cookie);
      return data && !('refused' in data) ? data.sessionId : null;
    },
    check: () => recoveryCheck,
    sessionFull: (sessionId) => sessionFull(io.of('/').adapter, sessionId),
    replays,
  });
  /** Recovered sockets in their handshake: what their rooms are sent meanwhile reaches them (recovery.ts). */
  const recovering = reachRecoveringSockets(io.of('/').adapter, replays);

  authenticateHandshakes(io, opts, recovering);

  /** The client events of every module (`on`), served by one middleware per socket. */
  const handlers = new Map<string, ClientEvent>();
  /** Set by the sessions wiring: whether a socket may still act (its session has not expired). */
  let eventGate: ((socket: AppSocket) => boolean) | null = null;

  io.on('connection', (socket) => {
    recovering.done(socket);
    // Its session's room it joined in the handshake, where it was counted (admitToSession).
    void socket.join(rooms.user(socket.data.userId));
    // One function per socket serves every client event: a listener per event and socket cost
    // about 2 KiB per connection (measured with the connect bench), for events most never send.
    socket.use((packet, next) => {
      if (eventGate && !eventGate(socket)) return refuseAndDrop(socket, packet);
      const handler = handlers.get(packet[0] as string);
      if (handler) serveEvent(socket, handler, packet.slice(1), opts.log);
      else refuseUnknown(packet, next);
    });
  });

  const reads = crossNodeReads(io, opts.log);
  // Cluster mode: how far this node's stream reader has applied the other nodes' room changes.
  const redis = opts.redis;
  const streamOrder = redis
    ? trackStreamOrder(io.of('/').adapter as unknown as StreamReader, {
        tail: async () => {
          const last = await redis.client.xrevrange(streamNameOf(redis.prefix), '+', '-', 'COUNT', 1);
          return last[0]?.[0] ?? null;
        },
        log: opts.log,
      })
    : null;
  /** Set by the chats wiring: announces presences of a node that died (offline) or came back (online). */
  let nodePresenceListener: ((held: HeldPresence[], online: boolean) => void) | null = null;
  // Cluster mode: the presence this node holds, kept in Redis for the others to announce offline
  // if it is killed outright (node-presence.ts).
  const nodePresence = redis
    ? trackNodePresence(io, {
        redis: redis.client,
        prefix: redis.prefix,
        log: opts.log,
        lost: (gone) => nodePresenceListener?.(gone, false),
        back: (held) => nodePresenceListener?.(held, true),
      })
    : null;

  return {
    io,
    /**
     * Cluster mode: tells `listener` the presences held by a node that stopped without shutting
     * down (killed: `online` false, once its heartbeat expired and no live node holds them), and
     * those of this node once it finds it was taken for dead (`online` true). Never in embedded mode.
     */
    onNodePresence(listener: (held: HeldPresence[], online: boolean) => void): void {
      nodePresenceListener = listener;
    },
    /** This node's heartbeat and sweep of dead nodes, run now (tests); null in embedded mode. */
    nodePresence,
    /**
     * The sockets in a room (null: every socket) on every node; without those of a node that does
     * not answer in time (socket-reads.ts): for reads that follow a committed change.
     */
    socketsIn: reads.socketsIn,
    /**
     * Runs `work` for a socket that is disconnecting, once it has left its rooms (Socket.IO takes
     * them from it right after `disconnecting`). At shutdown the node waits for such work (up to
     * DISCONNECT_WORK_WAIT_MS) before its adapter closes, so what it emits reaches the other nodes.
     */
    afterDisconnect(work: () => Promise<void>): void {
      const run = new Promise<void>((resolve) => setImmediate(resolve))
        .then(work)
        .catch((err: unknown) => opts.log.warn({ err }, 'work after a socket disconnect failed'))
        .finally(() => disconnectWork.delete(run));
      disconnectWork.add(run);
    },
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
    /**
     * Decides what a connection recovered within the window keeps of its rooms before anything is
     * replayed to it (recovery.ts); without one it keeps them all.
     */
    checkRecovery(check: RecoveryCheck): void {
      recoveryCheck = check;
    },
    /**
     * Decides, before any client event is served, whether its socket may still act; one that may
     * not gets `ERR_UNAUTHENTICATED` (to an ack) and is dropped.
     */
    gateEvents(gate: (socket: AppSocket) => boolean): void {
      eventGate = gate;
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
    /**
     * Resolves once this node has applied the room changes the other nodes had sent when it was
     * called (cluster mode: its stream reader reached the stream's tail, or STREAM_CATCH_UP_MAX_MS
     * passed; stream-order.ts); at once in embedded mode, where every change applies at once. A
     * socket entering a room for a new membership waits for it, so a leave of an ended membership
     * of the same user, sent by another node before, cannot take it out afterwards.
     */
    catchUpRooms(): Promise<void> {
      return streamOrder ? streamOrder.catchUp() : Promise.resolve();
    },
    /** Makes every socket of a user leave a chat room (kick, ban, leave), on every node. */
    leaveChat(userId: number, chatId: number) {
      io.in(rooms.user(userId)).socketsLeave(rooms.chat(chatId));
    },
    /**
     * Stops this node's socket server (a preClose hook). Only this node's connections close
     * (`io.disconnectSockets` would reach every node through the adapter), and they close as in a
     * restart, not by a server-side disconnect: each socket's session is kept for recovery, its
     * `disconnecting` work runs (the chats hear it go offline), and the client reconnects by
     * itself, to any node, and gets what it missed. New connections are refused meanwhile. The
     * adapter stays open for the requests still in flight: `closeAdapter` closes it.
     */
    async close() {
      closing = true;
      const sockets = [...io.of('/').sockets.values()];
      const gone = sockets.map((s) => new Promise((resolve) => s.once('disconnect', resolve)));
      // Each connection closes once what it has buffered is written ("forced close" on the server,
      // "transport close" on the client: both recoverable).
      for (const socket of sockets) socket.conn.close();
      await waitFor(gone, CONNECTION_CLOSE_WAIT_MS);
      // A socket still open (a peer that does not read, a long-poll client between polls) is cut
      // now, as io.close would cut it ("server shutting down": recoverable, its session kept), and
      // every transport with it: an open WebSocket would hold the HTTP server's close.
      for (const socket of [...io.of('/').sockets.values()]) socket._onclose('server shutting down');
      io.engine.close();
    },
    /**
     * Closes the adapter and its Redis connection (an onClose hook, once the HTTP server has
     * closed and before the stores close): what the requests answered during the drain emitted
     * (a message, a kick, a logout's disconnect) has reached the other nodes by then. The work of
     * the sockets `close` dropped may take up to DISCONNECT_WORK_WAIT_MS more.
     */
    async closeAdapter() {
      await waitFor([...disconnectWork], DISCONNECT_WORK_WAIT_MS);
      await nodePresence?.close();
      // io.close closes the HTTP server too: Fastify has closed it, so that part ends at once.
      await io.close();
      await opts.redis?.client.quit().catch(() => opts.redis?.client.disconnect());
    },
  };
}

export type Realtime = ReturnType<typeof createRealtime>;

/** Resolves once every promise settled, or after `ms`. */
async function waitFor(work: Promise<unknown>[], ms: number): Promise<void> {
  if (work.length === 0) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.allSettled(work),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    }),
  ]);
  clearTimeout(timer);
}
