import type { AppSocket, Io, SocketData } from './realtime.js';

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
 * and from its first handshake middleware on what the rooms are sent reaches it
 * (reachRecoveringSockets), then live once it is connected. Both adapters (in-memory, Redis
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

/** The filters of an adapter delivery (`BroadcastOptions` of socket.io-adapter). */
interface Delivery {
  rooms: Set<string>;
  except?: Set<string>;
}

/** The two in-memory adapter methods every delivery on this node goes through (both adapters). */
interface AdapterInternals {
  _encode(...args: unknown[]): unknown;
  apply(opts: Delivery, deliver: (socket: AppSocket) => void): void;
}

/**
 * Gives a recovered socket what its rooms are sent while its handshake middlewares run.
 *
 * Socket.IO restores the socket (its rooms, the missed packets) before the middlewares, but the
 * adapter delivers only to the namespace's sockets, and the socket is one of them only once the
 * middlewares are done: what its rooms were sent meanwhile (while the session look-up waited on
 * the database, say) reached neither the replay, read before, nor the socket. Here such a socket,
 * from its first middleware (`connecting`) until it is connected, is delivered to as if it were
 * connected: the client holds those events until the handshake answers, as it holds the replayed
 * ones, so they arrive in order, after the replay and before anything sent later. Only event
 * deliveries (broadcasts) reach it this way; joins, leaves and reads of sockets do not, so a
 * removal that commits meanwhile is caught once it is connected (chats.routes.ts).
 *
 * Every delivery on this node (an emit of its own, or one read from the cluster's stream) runs
 * the adapter's `_encode` then its `apply`, in one go; both are wrapped on this adapter. A
 * socket.io-adapter without them leaves the adapter as it is (recovery.test.ts fails then).
 */
export function reachRecoveringSockets(adapter: Adapter) {
  const connecting = new Map<string, AppSocket>();
  const internals = adapter as unknown as Partial<AdapterInternals>;
  const { _encode: encode, apply } = internals;
  if (typeof encode === 'function' && typeof apply === 'function') {
    /** Set by an encode (a delivery's first step), taken by the apply that follows it. */
    let delivering = false;
    internals._encode = (...args) => {
      const encoded = encode.apply(adapter, args);
      delivering = true;
      return encoded;
    };
    internals.apply = (opts, deliver) => {
      const isDelivery = delivering;
      delivering = false;
      apply.call(adapter, opts, deliver);
      if (!isDelivery) return;
      for (const [id, socket] of connecting) {
        // Connected (delivered above) or gone (its handshake failed: it left every room).
        if (adapter.nsp.sockets.has(id) || !adapter.sids.has(id)) connecting.delete(id);
        else if (reaches(adapter, id, opts)) deliver(socket);
      }
    };
  }
  return {
    /** A recovered socket whose handshake middlewares run; it is forgotten once connected or closed. */
    connecting(socket: AppSocket): void {
      connecting.set(socket.id, socket);
      socket.conn.once('close', () => {
        if (connecting.get(socket.id) === socket) connecting.delete(socket.id);
      });
    },
    /** The socket is connected (or refused): deliveries reach it, if at all, as any other. */
    done(socket: AppSocket): void {
      if (connecting.get(socket.id) === socket) connecting.delete(socket.id);
    },
  };
}

/** Whether a delivery with these filters is for the socket `id` (as the adapter's own `apply` decides). */
function reaches(adapter: Adapter, id: string, { rooms, except }: Delivery): boolean {
  const inRoom = (room: string) => adapter.rooms.get(room)?.has(id) === true;
  if (except && [...except].some(inRoom)) return false;
  return rooms.size === 0 ? adapter.sids.has(id) : [...rooms].some(inRoom);
}
