import type { Io, SocketData } from './realtime.js';

/**
 * What a connection that comes back within the recovery window may keep of the rooms it was in:
 * the rooms still allowed, or null when it may not come back at all (its session ended, its user
 * is banned or timed out), in which case it connects afresh and the handshake decides.
 */
export type RecoveryCheck = (data: SocketData, rooms: string[]) => Promise<string[] | null>;

type Adapter = ReturnType<Io['of']>['adapter'];
type Session = Awaited<ReturnType<Adapter['restoreSession']>>;

/**
 * Holds connection state recovery to what is still allowed. Socket.IO restores a session inside
 * the adapter's `restoreSession` and sends the missed packets as it builds the socket, before any
 * middleware or `connection` handler runs, so the check happens there: a kick or ban while the
 * client was away must not give it back the chat's room nor replay what the chat was sent since.
 *
 * The session is read first (the check needs its user and rooms), then checked, then stored again
 * with the rooms it keeps and restored once more from the same offset: that last restore reads
 * the missed packets up to now, so what the rooms were sent while the check ran (a round trip to
 * the database) is replayed too, and packets of a room it lost are not (the adapter picks them by
 * the session's rooms; the packets do not say which room they went to). Socket.IO builds the
 * socket and puts it in its rooms in the same turn as that restore answers, with no I/O between,
 * so what the rooms are sent after it reaches the socket live. Both adapters (in-memory, Redis
 * streams) serve this through their public `persistSession` / `restoreSession`. A failed check
 * fails the recovery: the client then connects as a new socket.
 */
export function guardRecovery(adapter: Adapter, check: () => RecoveryCheck | null): void {
  const restore = adapter.restoreSession.bind(adapter);
  const persist = adapter.persistSession.bind(adapter);
  adapter.restoreSession = async (pid, offset): Promise<Session> => {
    const allowedOf = check();
    if (!allowedOf) return restore(pid, offset);
    const session = await restore(pid, offset);
    if (!session) return session;
    const allowed = await allowedOf(session.data as SocketData, session.rooms);
    // The socket.io namespace takes a missing session as "not recovered".
    if (allowed === null) return null as unknown as Session;
    const { missedPackets: _missed, ...kept } = session;
    persist({ ...kept, rooms: allowed });
    return restore(pid, offset);
  };
}
