import type { Server as HttpServer } from 'node:http';
import { type ClientToServerEvents, ErrorCodes, type ServerToClientEvents } from '@parlor/protocol';
import { createAdapter } from '@socket.io/redis-streams-adapter';
import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import { Server, type Socket } from 'socket.io';
import { logFailure, toErrorBody } from './errors.js';
import { type HeldPresence, trackNodePresence } from './node-presence.js';
import { guardRecovery, type RecoveryCheck, reachRecoveringSockets, trackReplays } from './recovery.js';
import { CROSS_NODE_READ_TIMEOUT_MS, crossNodeReads } from './socket-reads.js';
import { coalesceSocketWrites } from './socket-writes.js';
import { type StreamReader, trackStreamOrder } from './stream-order.js';
import { compilePayload } from './validation.js';

/** Socket room names; every emit goes through these, never a hand-built string. */
export const rooms = {
  chat: (id: number) => `chat:${id}`,
  user: (id: number) => `user:${id}`,
  session: (id: number) => `session:${id}`,
  /** The chat id of a chat room's name; null for any other room. */
  chatIdOf: (room: string): number | null => {
    const id = /^chat:(\d+)$/.exec(room)?.[1];
    return id === undefined ? null : Number(id);
  },
};

/** What the server knows of a connected socket (set by the handshake, read by handlers). */
export interface SocketData {
  userId: number;
  sessionId: number;
  username: string;
  permissionLevel: number;
  stranger: boolean;
  /** When the session expires (ms since the epoch); from then the socket may not act (gateEvents). */
  expiresAt?: number;
}

export type Io = Server<ClientToServerEvents, ServerToClientEvents, Record<string, never>, SocketData>;
export type AppSocket = Socket<ClientToServerEvents, ServerToClientEvents, Record<string, never>, SocketData>;

/**
 * Why a handshake's session may not connect, as the HTTP guards answer it: the connect error's
 * code, and for a timeout the whole seconds until it ends (the connect error's `retry_after`).
 */
export interface HandshakeRefusal {
  refused: 'ERR_UNAUTHENTICATED' | 'ERR_TIMED_OUT' | 'ERR_BANNED';
  retryAfter?: number;
}

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

/**
 * The most sockets one login session may hold open on one node; the next handshake is refused
 * with `ERR_TOO_MANY_CONNECTIONS`. The tabs of one browser share its session (one cookie) and the
 * web app holds one socket per tab, so 32 is more tabs of the app than a person keeps open, while
 * each socket costs the server memory, a `chat:list` read and a session read when it connects,
 * presence work when it goes, and may watch a room VM's frames. Counted on this node only (its
 * room of the session: no cross-node read on the connect path), so behind a load balancer a
 * session may hold this many on each node.
 */
export const SOCKETS_PER_SESSION_MAX = 32;

export function createRealtime(server: HttpServer, opts: RealtimeOptions) {
  let closing = false;
  /** Work of sockets that disconnected (afterDisconnect), still running: close() lets it finish. */
  const disconnectWork = new Set<Promise<void>>();
  const io: Io = new Server(server, {
    path: '/socket.io',
    serveClient: false,
    maxHttpBufferSize: SOCKET_MESSAGE_MAX_BYTES,
    allowRequest: (req, cb) => {
      // A node shutting down takes no new connection: the client tries again (another node).
      if (closing) return cb('server shutting down', false);
      const origin = req.headers.origin;
      cb(null, origin === undefined || opts.allowedOrigins.includes(origin));
    },
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

  io.use((socket, next) => {
    if (socket.recovered) recovering.connecting(socket);
    opts
      .authenticate(socket.handshake.headers.cookie)
      .then((data) => {
        if (!data || 'refused' in data) {
          recovering.done(socket);
          // The connect error's message is the code, which clients act on: ERR_UNAUTHENTICATED and
          // ERR_BANNED end the session for good, ERR_TIMED_OUT does not (the session is live and
          // connects again when the timeout ends, which `data.retry_after` tells in seconds).
          const refusal: Error & { data?: { retry_after: number } } = new Error(data?.refused ?? 'ERR_UNAUTHENTICATED');
          if (data?.retryAfter !== undefined) refusal.data = { retry_after: data.retryAfter };
          return next(refusal);
        }
        // A recovered socket is of the session its cookie signs in as (recovery.ts: another one
        // connects afresh). The data is always the fresh one (a level changed while away is the
        // current level).
        socket.data = data;
        if (!admitToSession(socket)) {
          // The session is live: its client tries again later, and is let in once one of the
          // session's sockets on this node has closed.
          recovering.done(socket);
          return next(new Error('ERR_TOO_MANY_CONNECTIONS'));
        }
        next();
      })
      .catch((err: unknown) => {
        // A store that cannot be reached refuses with ERR_SERVICE_UNAVAILABLE (the client retries).
        const answer = toErrorBody(err);
        logFailure(opts.log, err, answer, { socket_handshake: true });
        recovering.done(socket);
        next(new Error(answer.unavailable ? answer.body.code : 'ERR_INTERNAL'));
      });
  });

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
     * The sockets in a room (null: every socket) on every node, or this node's when another does
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

/**
 * Counts a handshake's socket among its session's sockets on this node if the session has a place
 * left (SOCKETS_PER_SESSION_MAX): the socket joins its session's room in the same turn as that
 * room's size is read, so two handshakes of one session racing for the last place cannot both
 * take it (the adapter's rooms are this node's, and a join updates them at once). A socket whose
 * handshake fails after this leaves the room with its other rooms (Socket.IO's cleanup). A
 * recovered socket is in the room already (its rooms were restored): it is not counted twice.
 */
function admitToSession(socket: AppSocket): boolean {
  if (sessionFull(socket.nsp.adapter, socket.data.sessionId, socket.id)) return false;
  void socket.join(rooms.session(socket.data.sessionId));
  return true;
}

/**
 * Whether a session's sockets on this node, not counting the socket `except`, take every place
 * (SOCKETS_PER_SESSION_MAX): the one rule of the handshake (admitToSession) and of a recovery,
 * which is refused before anything is restored when its handshake would be (recovery.ts).
 */
function sessionFull(adapter: AppSocket['nsp']['adapter'], sessionId: number, except?: string): boolean {
  const held = adapter.rooms.get(rooms.session(sessionId));
  const others = (held?.size ?? 0) - (except !== undefined && held?.has(except) ? 1 : 0);
  return others >= SOCKETS_PER_SESSION_MAX;
}

/** A client event of a socket that may no longer act: refused (to its ack, if any), the socket dropped. */
function refuseAndDrop(socket: AppSocket, packet: unknown[]): void {
  const ack = packet.at(-1);
  if (typeof ack === 'function')
    ack({ ok: false, code: 'ERR_UNAUTHENTICATED', message: ErrorCodes.ERR_UNAUTHENTICATED.message });
  socket.disconnect(true);
}

/**
 * An event no module serves: a client waiting for its ack is answered (ERR_NOT_FOUND) rather than
 * left to its timeout; without an ack it is dropped, as Socket.IO does for an event nobody listens to.
 */
function refuseUnknown(packet: unknown[], next: () => void): void {
  const ack = packet.at(-1);
  if (typeof ack === 'function') ack({ ok: false, code: 'ERR_NOT_FOUND', message: 'No such event.' });
  else next();
}

interface ClientEvent {
  event: string;
  valid: (payload: unknown) => boolean;
  run: (socket: AppSocket, payload: unknown) => Promise<object>;
}

/**
 * Answers one client event: ERR_VALIDATION for a bad payload, else the handler's result or error.
 * `args` are the event's arguments after its name; Socket.IO appends the ack callback last (when
 * the client asked for one), so whatever comes before it is the payload: exactly one argument,
 * else (none, or extra ones) the event is refused with nothing done.
 */
function serveEvent(socket: AppSocket, h: ClientEvent, args: unknown[], log: FastifyBaseLogger): void {
  const last = args.at(-1);
  const reply = typeof last === 'function' ? (last as (a: unknown) => void) : () => {};
  const params = typeof last === 'function' ? args.slice(0, -1) : args;
  const payload = params[0];
  if (params.length !== 1 || !h.valid(payload)) {
    reply({ ok: false, code: 'ERR_VALIDATION', message: 'The payload is not valid.' });
    return;
  }
  Promise.resolve()
    .then(() => h.run(socket, payload))
    .then((result) => reply({ ok: true, ...result }))
    .catch((err: unknown) => {
      const answer = toErrorBody(err);
      const { body } = answer;
      logFailure(log, err, answer, { event: h.event });
      reply({
        ok: false,
        code: body.code,
        message: body.message,
        ...(body.ttl !== undefined ? { ttl: body.ttl } : {}),
        ...(body.retry_after !== undefined ? { retry_after: body.retry_after } : {}),
      });
    });
}
