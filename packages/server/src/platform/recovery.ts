import type { IncomingMessage } from 'node:http';
import type { AppSocket, Io, SocketData } from './realtime.js';

/**
 * What a connection that comes back within the recovery window may keep of the rooms it was in:
 * the rooms still allowed, or null when it may not come back at all (its session ended, its user
 * is banned or timed out, or its user's room enters cannot pay for the chat rooms it would be put
 * back into), in which case it connects afresh and the handshake decides.
 */
export type RecoveryCheck = (data: SocketData, rooms: string[]) => Promise<string[] | null>;

/** The session a handshake's Cookie header signs in as now (its id), or null for none. */
export type SessionOfCookie = (cookieHeader: string | undefined) => Promise<number | null>;

type Namespace = ReturnType<Io['of']>;
type Adapter = Namespace['adapter'];
type Session = Awaited<ReturnType<Adapter['restoreSession']>>;

/** The namespace method that builds a handshake's socket, restoring its session (socket.io 4). */
interface NamespaceInternals {
  _createSocket(client: { request: IncomingMessage }, auth: unknown): Promise<AppSocket>;
}

/**
 * Holds connection state recovery to what is still allowed. Socket.IO restores a session inside
 * the adapter's `restoreSession` and sends the missed packets as it builds the socket, before any
 * middleware or `connection` handler runs, so the check happens there: a kick or ban while the
 * client was away must not give it back the chat's room nor replay what the chat was sent since.
 *
 * The session comes back only to the session it was: the handshake's cookie is resolved (by the
 * handshake's own cached session look-up) before the stored session is read, and a cookie that is
 * not that session's (another login in the same browser meanwhile, or none) fails the recovery,
 * so nothing the old session was sent is replayed to it nor delivered during its handshake
 * (reachRecoveringSockets starts at its first middleware, after this). Socket.IO hands
 * `restoreSession` no handshake: the namespace's `_createSocket` calls it synchronously, so the
 * cookie is passed from there; should a socket.io version call it otherwise, no session is
 * recovered (recovery.test.ts fails then).
 *
 * The session is read first (the check needs its user and rooms), then checked, then stored again
 * with the rooms it keeps and restored once more from the same offset: that last restore reads
 * the missed packets up to now, so what the rooms were sent while the check ran (a round trip to
 * the database) is replayed too, and packets of a room it lost are not (the adapter picks them by
 * the session's rooms; the packets do not say which room they went to). Socket.IO builds the
 * socket and puts it in its rooms in the same turn as that restore answers, with no I/O between,
 * and from its first handshake middleware on what the rooms are sent reaches it
 * (reachRecoveringSockets), then live once it is connected; what this node has yet to deliver of
 * the replayed packets is not delivered again (trackReplays). Both adapters (in-memory, Redis
 * streams) serve this through their public `persistSession` / `restoreSession`. A failed check
 * fails the recovery: the client then connects as a new socket. So does a session whose sockets
 * on this node take every place, before anything is checked or spent: its handshake is refused,
 * and what a refused handshake was sent would stay in the client's buffer, for whatever connection
 * the client makes next. Its stored session is left as it is, for a retry once a place is free.
 * The places are counted again as the socket is built, for a handshake of the same session that
 * took the last one while the check ran: such a recovery is refused too, but by then the check has
 * spent its room enters and the stored session was deleted as it was read (restoreOnce; the retry
 * connects afresh). Two handshakes of one session racing for its last place cost that.
 */
export function guardRecovery(
  nsp: Namespace,
  opts: {
    sessionOf: SessionOfCookie;
    check: () => RecoveryCheck | null;
    /** Whether the session's sockets on this node take every place (the handshake would refuse it). */
    sessionFull: (sessionId: number) => boolean;
    replays: Replays;
  },
): void {
  const { adapter } = nsp;
  const restore = restoreOnce(adapter);
  const persist = adapter.persistSession.bind(adapter);
  const internals = nsp as unknown as Partial<NamespaceInternals>;
  const create = internals._createSocket;
  /** The Cookie header of the handshake whose socket is being built, for the `restoreSession` it calls. */
  let handshake: { cookie: string | undefined } | null = null;
  if (typeof create === 'function') {
    internals._createSocket = (client, auth) => {
      handshake = { cookie: client.request.headers.cookie };
      try {
        return create.call(nsp, client, auth);
      } finally {
        handshake = null;
      }
    };
  }
  // The socket.io namespace takes a missing session as "not recovered".
  const notRecovered = null as unknown as Session;
  adapter.restoreSession = async (pid, offset): Promise<Session> => {
    const from = handshake;
    handshake = null;
    if (!from) return notRecovered;
    // A session whose sockets on this node take every place has its handshake refused
    // (ERR_TOO_MANY_CONNECTIONS) once the socket is built: restored, its missed packets would be
    // sent to a client that never connects and its rooms' enters spent, on every refused retry.
    // That is known before the stored session is read (a read deletes it: restoreOnce), so a
    // retry once a place is free still recovers it.
    const cookieSession = await opts.sessionOf(from.cookie);
    if (cookieSession === null || opts.sessionFull(cookieSession)) return notRecovered;
    const session = await restore(pid, offset);
    if (!session || cookieSession !== (session.data as SocketData).sessionId) return notRecovered;
    const allowedOf = opts.check();
    const allowed = allowedOf ? await allowedOf(session.data as SocketData, session.rooms) : session.rooms;
    if (allowed === null) return notRecovered;
    const { missedPackets: _missed, ...kept } = session;
    persist({ ...kept, rooms: allowed });
    const restored = await restore(pid, offset);
    // A handshake of the session may have taken the last place while the check ran: the socket
    // is built in the same turn as this answers, so the place it would be refused is checked here.
    if (!restored || opts.sessionFull(cookieSession)) return notRecovered;
    opts.replays.replayed(restored.sid, restored.missedPackets);
    return restored;
  };
}

/** The in-memory adapter's stored sessions by pid (socket.io-adapter's SessionAwareAdapter). */
interface StoredSessions {
  sessions: Map<string, unknown>;
}

/**
 * The adapter's `restoreSession`, made one-shot: a stored session is gone once read, as the Redis
 * streams adapter's GETDEL does. The in-memory adapter keeps it, so a connection the server ended
 * (`disconnect(true)` stores nothing) after an earlier recovery would be restored from that earlier
 * drop's record, with the rooms it had then: the client keeps its pid and offset. The session is
 * taken out in the same turn as it is read, before anything could store it again.
 */
function restoreOnce(adapter: Adapter): Adapter['restoreSession'] {
  const read = adapter.restoreSession.bind(adapter);
  const { sessions } = adapter as unknown as Partial<StoredSessions>;
  if (!(sessions instanceof Map)) return read;
  return (pid, offset) => {
    const session = read(pid, offset);
    sessions.delete(pid);
    return session;
  };
}

/** The Redis streams adapter's entry point for each stream entry its reader reads (with the entry's id). */
interface StreamInternals {
  onRawMessage(message: unknown, offset: string): void;
}

/** A Redis stream entry id, `<ms>-<seq>`: the offset a cluster-mode packet carries as its last element. */
const STREAM_ID = /^(\d+)-(\d+)$/;

/**
 * What was replayed to recovered sockets that this node's stream reader has yet to deliver, so
 * that it is not delivered to them a second time (cluster mode).
 *
 * The Redis streams adapter reads the missed packets from the stream up to its head, while this
 * node's reader of the same stream may be behind (it delivers what other nodes emitted as it reads
 * it): the entries in between would reach the recovered socket once more, live, after newer ones
 * of the replay. So each recovered socket's last replayed offset is kept until this node's reader
 * has read that far, and a delivery whose offset is at or before it skips that socket. What this
 * node emitted itself is delivered here once its XADD answers, on the connection the restore reads
 * the stream on, so before that read answers: before the socket exists. The embedded adapter
 * reads its packets and delivers in one turn: nothing to track there (its offsets are not stream
 * ids), nor with an adapter that reads no stream.
 */
export function trackReplays(adapter: Adapter) {
  /** Socket id → the offset of the last packet replayed to it, while this node's reader is before it. */
  const ahead = new Map<string, string>();
  /** The id of the last stream entry this node's reader delivered; null before the first. */
  let readerAt: string | null = null;
  const internals = adapter as unknown as Partial<StreamInternals>;
  const read = internals.onRawMessage;
  if (typeof read === 'function') {
    internals.onRawMessage = (message, offset) => {
      try {
        read.call(adapter, message, offset);
      } finally {
        readerAt = offset;
      }
    };
  }
  const delivered = (offset: string) => readerAt !== null && compareIds(offset, readerAt) <= 0;
  return {
    /** The packets replayed to a recovered socket (each ends with its offset): the last one's is kept. */
    replayed(socketId: string, packets: unknown[][]): void {
      const last = packets.at(-1)?.at(-1);
      if (typeof read !== 'function' || typeof last !== 'string' || !STREAM_ID.test(last)) return;
      if (delivered(last)) ahead.delete(socketId);
      else ahead.set(socketId, last);
    },
    /**
     * The recovered sockets whose replay held the packet about to be delivered (its data ends with
     * its offset); null for none, at once while no replay is ahead of the reader.
     */
    replayedTo(packet: { data?: unknown[] }): Set<string> | null {
      if (ahead.size === 0) return null;
      const offset = packet.data?.at(-1);
      if (typeof offset !== 'string' || !STREAM_ID.test(offset)) return null;
      const replayed = new Set<string>();
      for (const [id, last] of ahead) {
        if (delivered(last)) ahead.delete(id);
        else if (compareIds(offset, last) <= 0) replayed.add(id);
      }
      return replayed.size > 0 ? replayed : null;
    },
  };
}

export type Replays = ReturnType<typeof trackReplays>;

/** Orders two stream entry ids (`<ms>-<seq>`) as Redis does. */
function compareIds(a: string, b: string): number {
  const [, aMs = '0', aSeq = '0'] = STREAM_ID.exec(a) ?? [];
  const [, bMs = '0', bSeq = '0'] = STREAM_ID.exec(b) ?? [];
  return Number(aMs) - Number(bMs) || Number(aSeq) - Number(bSeq);
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
 * the adapter's `_encode` then its `apply`, in one go; both are wrapped on this adapter, which is
 * also where a packet already replayed to a recovered socket skips it (`replays`). A
 * socket.io-adapter without them leaves the adapter as it is (recovery.test.ts and nodes.test.ts
 * fail then).
 */
export function reachRecoveringSockets(adapter: Adapter, replays: Replays) {
  const connecting = new Map<string, AppSocket>();
  const internals = adapter as unknown as Partial<AdapterInternals>;
  const { _encode: encode, apply } = internals;
  if (typeof encode === 'function' && typeof apply === 'function') {
    /** Set by an encode (a delivery's first step), taken by the apply that follows it. */
    let delivering = false;
    /** The sockets the encoded packet was replayed to already, if any: the apply skips them. */
    let replayedTo: Set<string> | null = null;
    internals._encode = (...args) => {
      const encoded = encode.apply(adapter, args);
      delivering = true;
      replayedTo = replays.replayedTo(args[0] as { data?: unknown[] });
      return encoded;
    };
    internals.apply = (opts, deliver) => {
      const isDelivery = delivering;
      const skip = replayedTo;
      delivering = false;
      replayedTo = null;
      const to = skip
        ? (socket: AppSocket) => {
            if (!skip.has(socket.id)) deliver(socket);
          }
        : deliver;
      apply.call(adapter, opts, to);
      if (!isDelivery) return;
      for (const [id, socket] of connecting) {
        // Connected (delivered above) or gone (its handshake failed: it left every room).
        if (adapter.nsp.sockets.has(id) || !adapter.sids.has(id)) connecting.delete(id);
        else if (reaches(adapter, id, opts)) to(socket);
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
