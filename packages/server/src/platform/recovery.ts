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
 * The adapter picks the missed packets by the rooms the session had (and the packets do not say
 * which room they went to), so a session that lost rooms is stored again with the rooms it keeps
 * and restored once more from the same offset. Both adapters (in-memory, Redis streams) serve this
 * through their public `persistSession` / `restoreSession`. A failed check fails the recovery: the
 * client then connects as a new socket.
 */
export function guardRecovery(adapter: Adapter, check: () => RecoveryCheck | null): void {
  const restore = adapter.restoreSession.bind(adapter);
  const persist = adapter.persistSession.bind(adapter);
  adapter.restoreSession = async (pid, offset): Promise<Session> => {
    const session = await restore(pid, offset);
    const allowedOf = check();
    if (!session || !allowedOf) return session;
    const allowed = await allowedOf(session.data as SocketData, session.rooms);
    // The socket.io namespace takes a missing session as "not recovered".
    if (allowed === null) return null as unknown as Session;
    if (allowed.length === session.rooms.length) return session;
    const { missedPackets: _missed, ...kept } = session;
    persist({ ...kept, rooms: allowed });
    return restore(pid, offset);
  };
}
