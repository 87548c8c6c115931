import type { IncomingMessage } from 'node:http';
import { addressKey } from './client-address.js';
import type { Io } from './socket-rooms.js';

/**
 * How many Engine.IO transport connections from one client address (addressKey: an IPv6 client by
 * its /64) a node holds before they are authenticated sockets. Every connection is accepted before
 * its cookie is read (at the Socket.IO CONNECT packet), so without a bound one address could hold
 * any number for SOCKET_CONNECT_TIMEOUT_MS (realtime.ts) each. A client has one at a time, or a few while it
 * reconnects; the connect bench has 100 handshakes in flight from one address. Beyond it the
 * handshake is refused (allowRequest).
 */
export const PENDING_CONNECTIONS_PER_ADDRESS_MAX = 256;

/** An Engine.IO transport connection, as far as the count uses it. */
interface TransportConnection {
  request: IncomingMessage;
  once(event: 'close', f: () => void): void;
  off(event: 'close', f: () => void): void;
}

/**
 * Counts each client address's transport connections (PENDING_CONNECTIONS_PER_ADDRESS_MAX) from
 * the handshake that admits them until they are authenticated sockets or close; the function it
 * returns admits one more if its address has room. A handshake that fails once admitted (Engine.IO's
 * `connection_error`, or its TCP connection closing before the transport opened) gives it back.
 * Once given back, nothing of the count stays with the connection (no entry, no listener): an
 * authenticated socket costs it no memory for its life.
 */
export function countPendingConnections(io: Io, addressOf: (req: IncomingMessage) => string) {
  const counts = new Map<string, number>();
  const pending = new WeakMap<IncomingMessage, { release: () => void; opened: (conn: TransportConnection) => void }>();
  io.engine.on('connection', (conn: TransportConnection) => pending.get(conn.request)?.opened(conn));
  io.engine.on('connection_error', (err: { req: IncomingMessage }) => pending.get(err.req)?.release());
  io.on('connection', (socket) => pending.get(socket.conn.request)?.release());
  return (req: IncomingMessage): boolean => {
    const key = addressKey(addressOf(req));
    const count = counts.get(key) ?? 0;
    if (count >= PENDING_CONNECTIONS_PER_ADDRESS_MAX) return false;
    counts.set(key, count + 1);
    let transport: TransportConnection | null = null;
    const release = () => {
      if (!pending.delete(req)) return;
      req.socket.off('close', release);
      transport?.off('close', release);
      const left = (counts.get(key) ?? 1) - 1;
      if (left > 0) counts.set(key, left);
      else counts.delete(key);
    };
    // From the transport's opening its own close ends it (a polling client's TCP connection may not).
    const opened = (conn: TransportConnection) => {
      req.socket.off('close', release);
      transport = conn;
      conn.once('close', release);
    };
    pending.set(req, { release, opened });
    req.socket.once('close', release);
    return true;
  };
}
