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

/**
 * Counts each client address's transport connections (PENDING_CONNECTIONS_PER_ADDRESS_MAX) from
 * the handshake that admits them until they are authenticated sockets or close; the function it
 * returns admits one more if its address has room. A handshake that fails once admitted (Engine.IO's
 * `connection_error`, or its TCP connection closing before the transport opened) gives it back.
 */
export function countPendingConnections(io: Io, addressOf: (req: IncomingMessage) => string) {
  const counts = new Map<string, number>();
  const releases = new WeakMap<IncomingMessage, () => void>();
  io.engine.on('connection', (conn: { request: IncomingMessage; once(event: 'close', f: () => void): void }) => {
    const release = releases.get(conn.request);
    if (!release) return;
    // From now on the transport's own close ends it (a polling client's TCP connection may not).
    conn.request.socket.off('close', release);
    conn.once('close', release);
  });
  io.engine.on('connection_error', (err: { req: IncomingMessage }) => releases.get(err.req)?.());
  io.on('connection', (socket) => releases.get(socket.conn.request)?.());
  return (req: IncomingMessage): boolean => {
    const key = addressKey(addressOf(req));
    const count = counts.get(key) ?? 0;
    if (count >= PENDING_CONNECTIONS_PER_ADDRESS_MAX) return false;
    counts.set(key, count + 1);
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      req.socket.off('close', release);
      const left = (counts.get(key) ?? 1) - 1;
      if (left > 0) counts.set(key, left);
      else counts.delete(key);
    };
    releases.set(req, release);
    req.socket.once('close', release);
    return true;
  };
}
