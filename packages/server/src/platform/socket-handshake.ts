import type { FastifyBaseLogger } from 'fastify';
import { logFailure, toErrorBody } from './errors.js';
import type { reachRecoveringSockets } from './recovery.js';
import { type AppSocket, type Io, rooms, type SocketData } from './socket-rooms.js';

/** Who may connect: the handshake's authentication and the sockets one session may hold on a node. */

/**
 * Why a handshake's session may not connect, as the HTTP guards answer it: the connect error's
 * code, and for a timeout the whole seconds until it ends (the connect error's `retry_after`).
 */
export interface HandshakeRefusal {
  refused: 'ERR_UNAUTHENTICATED' | 'ERR_TIMED_OUT' | 'ERR_BANNED';
  retryAfter?: number;
}

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

/**
 * Authenticates every handshake from its cookie and counts its socket among its session's sockets
 * (admitToSession); a refusal's connect error carries the code clients act on.
 */
export function authenticateHandshakes(
  io: Io,
  opts: {
    authenticate(cookieHeader: string | undefined): Promise<SocketData | HandshakeRefusal | null>;
    log: FastifyBaseLogger;
  },
  recovering: ReturnType<typeof reachRecoveringSockets>,
): void {
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
export function sessionFull(adapter: AppSocket['nsp']['adapter'], sessionId: number, except?: string): boolean {
  const held = adapter.rooms.get(rooms.session(sessionId));
  const others = (held?.size ?? 0) - (except !== undefined && held?.has(except) ? 1 : 0);
  return others >= SOCKETS_PER_SESSION_MAX;
}
