import type { Socket as NetSocket } from 'node:net';

/**
 * One socket write per connection per event-loop turn.
 *
 * Engine.IO hands each packet to its transport as soon as it is emitted, and its WebSocket
 * transport writes every frame with a write of its own (a `writev` of header and payload). When a
 * batch of messages is committed at once (group commit: several sends to one chat in one
 * statement), each member's connection would get one system call, one TCP segment and one
 * wake-up of the reader per message. Here every connection instead:
 *
 *   - flushes its outgoing packets once per turn (`process.nextTick`: after the synchronous code
 *     and promise continuations that emitted them, before any I/O), so the packets of one turn
 *     reach the transport together, in emission order;
 *   - has its TCP socket corked while its WebSocket transport writes them, so they leave as one
 *     `writev`.
 *
 * Nothing is held longer than the current turn, and the order of packets is Engine.IO's own
 * (one FIFO write buffer per connection). Measured with `npm run bench -- fanout` (bench/RESULTS.md).
 *
 * Engine.IO offers no option for this, so it wraps two methods of each connection (`flush`, and the
 * WebSocket transport's `send`). If a future Engine.IO lacks them, `coalesce` leaves the connection
 * as it is and answers false; socket-writes.test.ts checks that it answers true with the installed
 * version.
 */

/** The parts of an Engine.IO connection (`io.engine`'s "connection" event) this uses. */
export interface EngineConnection {
  flush(): void;
  transport: EngineTransport;
  on(event: 'upgrade', listener: (transport: EngineTransport) => void): unknown;
}

interface EngineTransport {
  name: string;
  send(packets: unknown[]): void;
  /** The `ws` WebSocket of a websocket transport; `_socket` is its TCP socket. */
  socket?: { _socket?: NetSocket };
}

/** Installs the coalescing on every new connection of an Engine.IO server. */
export function coalesceSocketWrites(engine: { on(event: 'connection', fn: (c: EngineConnection) => void): unknown }) {
  engine.on('connection', (conn) => {
    coalesce(conn);
  });
}

/** Coalesces one connection's writes; false when its shape is not the expected one (nothing changed). */
export function coalesce(conn: EngineConnection): boolean {
  if (typeof conn.flush !== 'function' || typeof conn.transport?.send !== 'function') return false;
  const flushNow = conn.flush.bind(conn);
  let scheduled = false;
  const flushLater = () => {
    scheduled = false;
    flushNow();
  };
  conn.flush = () => {
    if (scheduled) return;
    scheduled = true;
    process.nextTick(flushLater);
  };
  corkWebSocket(conn.transport);
  conn.on('upgrade', corkWebSocket);
  return true;
}

function corkWebSocket(transport: EngineTransport): void {
  if (transport.name !== 'websocket') return;
  const send = transport.send.bind(transport);
  transport.send = (packets) => {
    const tcp = transport.socket?._socket;
    if (packets.length < 2 || !tcp) {
      send(packets);
      return;
    }
    tcp.cork();
    try {
      send(packets);
    } finally {
      tcp.uncork();
    }
  };
}
