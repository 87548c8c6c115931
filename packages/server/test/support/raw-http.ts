import { once } from 'node:events';
import net from 'node:net';

/**
 * A raw TCP connection to a local HTTP server, for what an HTTP client cannot send (a malformed or
 * half-sent request, pipelining): everything received so far, and when the server ended it.
 */
export function rawConnection(port: number) {
  const socket = net.connect(port, '127.0.0.1');
  let received = '';
  socket.on('data', (d: Buffer) => {
    received += d.toString('utf8');
  });
  socket.on('error', () => {});
  const closed = once(socket, 'close').then(() => undefined);
  return { socket, received: () => received, closed };
}

/** Writes `text` on a new connection and reads everything until the server ends it. */
export async function rawExchange(port: number, text: string): Promise<string> {
  const c = rawConnection(port);
  c.socket.write(text);
  await c.closed;
  return c.received();
}
