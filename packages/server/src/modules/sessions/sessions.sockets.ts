import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../../platform/clock.js';
import type { AppSocket, Realtime } from '../../platform/realtime.js';
import { localSocketsIn } from '../../platform/socket-reads.js';
import { rooms } from '../../platform/socket-rooms.js';
import type { ChangeListener } from '../users/users.changes.js';
import type { LiveOwner, SessionsService } from './sessions.service.js';

/** How often each node looks for its sockets whose session expired (ms): they drop within this. */
export const SOCKET_EXPIRY_CHECK_MS = 1_000;

export interface SessionSocketsDeps {
  realtime: Realtime;
  sessions: Pick<SessionsService, 'liveOwner' | 'endExpired'>;
  clock: Clock;
  log: Pick<FastifyBaseLogger, 'warn'>;
}

/**
 * Whether the user a socket's handshake read (its level and name, which its handlers use: chat
 * joins, room VM moderation, presence) is still the user now. The user's stranger flag never
 * changes; its state and session are what `liveOwner` answers for.
 */
const handshakeHolds = (data: AppSocket['data'], owner: LiveOwner) =>
  owner.permissionLevel === data.permissionLevel && owner.username === data.username;

/**
 * Keeps this node's sockets within the lives of their sessions (a socket's data carries its
 * session's expiry from the handshake):
 *
 * - Once a socket is in its session's room, the session and its user are read again from SQL,
 *   past any cache, and the socket is dropped if the session is no longer live, its user may no
 *   longer connect, or its user's level or name is no longer what the handshake read. A session
 *   end, a level change or a rename (admin.service.ts) that committed between the handshake's
 *   look-up and that join found no socket to drop; one after the join does. Dropped, not updated
 *   in place, as a level change or a rename drops the sockets it finds: the client reconnects
 *   with the new level and name.
 *   The expiry read replaces the handshake's.
 * - The same check runs again for the sockets here of every user a user-change message names
 *   (`recheck`, fed by users.changes.ts: sessions ended, a level, name or state changed), and for
 *   every socket here once that channel's delivery is back after a loss. A session's end drops its
 *   sockets on every node through the socket adapter (realtime.disconnectSessions), once and not
 *   awaited: a message the adapter lost (a Redis error at that moment) would leave a socket of an
 *   ended session connected, and hearing its user's events, until the session's expiry. The change
 *   message is one the write waits for, and a node that may have missed some checks them all.
 * - No client event is served to a socket whose session's expiry passed (`gateEvents`).
 * - `check`, run every SOCKET_EXPIRY_CHECK_MS, drops the sockets whose session expired and ends
 *   those sessions as a logout does (their keys go, their chats move to a new epoch, their sockets
 *   on other nodes drop). Until the earliest expiry among this node's sockets, it costs a comparison.
 *   (One check per node rather than a timer per socket: no timer to clear, no 2^31-1 ms limit on a
 *   30-day delay, and a fake clock moves it in tests.)
 *
 * Expiry is read from the clock, so tests move it with a fake one.
 */
export function watchSessionSockets({ realtime, sessions, clock, log }: SessionSocketsDeps) {
  /** No socket of this node expires before this instant (ms); it may be earlier than the true one. */
  let earliest = Number.POSITIVE_INFINITY;
  const track = (at: number | undefined) => {
    if (at !== undefined && at < earliest) earliest = at;
  };
  const expired = (socket: AppSocket, now: number) =>
    socket.data.expiresAt !== undefined && socket.data.expiresAt <= now;

  /** Reads the socket's session and user again (SQL, batched per turn) and drops it unless both hold. */
  const verify = (socket: AppSocket) => {
    const { userId, sessionId } = socket.data;
    sessions.liveOwner(userId, sessionId).then(
      (owner) => {
        if (socket.disconnected) return;
        if (owner === null || !handshakeHolds(socket.data, owner)) {
          socket.disconnect(true);
          return;
        }
        socket.data.expiresAt = owner.expiresAt.getTime();
        track(socket.data.expiresAt);
      },
      // The handshake's look-up stands (and its expiry is kept); the client is not dropped for an outage.
      (err: unknown) => log.warn({ err, session_id: sessionId }, 'socket session check failed'),
    );
  };

  /** Checks again this node's sockets of these users; of every user: null. */
  const recheck = (userIds: Iterable<number> | null) => {
    const targets = userIds === null ? [null] : [...userIds].map(rooms.user);
    for (const room of targets) for (const socket of localSocketsIn(realtime.io, room)) verify(socket);
  };

  // Registered after createRealtime's own listener: the socket is in its user's and session's rooms.
  realtime.io.on('connection', (socket: AppSocket) => {
    track(socket.data.expiresAt);
    verify(socket);
  });

  realtime.gateEvents((socket) => !expired(socket, clock.now().getTime()));

  return {
    recheck,

    /** What the user-change channel tells (users.changes.ts `attach`): the users named, or everyone once delivery is back. */
    changes: {
      invalidate: (userIds: Iterable<number>) => recheck(userIds),
      reset: (live: boolean) => {
        if (live) recheck(null);
      },
    } satisfies ChangeListener,

    /**
     * Drops this node's sockets whose session expired and starts ending those sessions (not
     * awaited: a database stall must not hold the next checks' drops; each socket is dropped, and
     * its session's end started, once). Answers how many sessions it found expired.
     */
    async check(): Promise<number> {
      const now = clock.now().getTime();
      if (now < earliest) return 0;
      earliest = Number.POSITIVE_INFINITY;
      const due = new Map<number, { id: number; userId: number }>();
      for (const socket of realtime.io.of('/').sockets.values() as Iterable<AppSocket>) {
        if (!expired(socket, now)) {
          track(socket.data.expiresAt);
          continue;
        }
        due.set(socket.data.sessionId, { id: socket.data.sessionId, userId: socket.data.userId });
        socket.disconnect(true);
      }
      if (due.size === 0) return 0;
      // A failure is logged; the sweep (or the session's next use) ends those sessions then.
      sessions
        .endExpired([...due.values()])
        .catch((err: unknown) => log.warn({ err, session_ids: [...due.keys()] }, 'ending expired sessions failed'));
      return due.size;
    },
  };
}

export type SessionSockets = ReturnType<typeof watchSessionSockets>;
