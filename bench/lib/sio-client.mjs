import { io } from 'socket.io-client';
import * as parser from 'socket.io-parser';
import { assertLoopback } from './http-client.mjs';

/**
 * socket.io-client as the scenarios use it: websocket transport, the session cookie in
 * `extraHeaders`, no reconnection, a fresh manager per socket (one connection each, like one browser
 * tab each).
 *
 * The decoder is socket.io-client's own, except that the presence events `room:members` and
 * `portal:presence` are not JSON-parsed: the benches ignore them, and in a big chat each join sends
 * every member a list of every member (see fanout.mjs), which would make the load generator, not
 * the server, the bottleneck. Their bytes are still received and counted (`ignoredBytes`), and the
 * handler still gets the event (with a null payload).
 */
const SKIPPED = ['2["room:members"', '2["portal:presence"'];
export const ignored = { packets: 0, bytes: 0 };

class LazyDecoder extends parser.Decoder {
  add(obj) {
    // An EVENT packet of the main namespace is the text `2[…]` (the engine.io `4` is already gone).
    if (typeof obj === 'string' && obj.charCodeAt(0) === 50 /* '2' */ && obj.charCodeAt(1) === 91 /* '[' */) {
      for (const prefix of SKIPPED) {
        if (obj.startsWith(prefix)) {
          ignored.packets += 1;
          ignored.bytes += obj.length;
          const name = prefix.slice(3, -1);
          this.emitReserved('decoded', { type: parser.PacketType.EVENT, nsp: '/', data: [name, null] });
          return;
        }
      }
    }
    super.add(obj);
  }
}

const lazyParser = { protocol: parser.protocol, Encoder: parser.Encoder, Decoder: LazyDecoder };

/**
 * Opens one socket for a session cookie. Resolves once connected (the handshake, the auth
 * middleware and the namespace connect all passed), rejects on connect_error or after `timeoutMs`.
 * `on` ({ event: handler }) is attached before connecting: events the server sends right after the
 * connect (chat:list) can arrive in the same read as the connect itself.
 */
export function connectSio(url, cookie, { timeoutMs = 20_000, ip, on = {} } = {}) {
  assertLoopback(new URL(url).hostname);
  const headers = { cookie: `psession=${cookie}` };
  if (ip) headers['x-forwarded-for'] = ip;
  const socket = io(url, {
    transports: ['websocket'],
    extraHeaders: headers,
    reconnection: false,
    forceNew: true,
    timeout: timeoutMs,
    parser: lazyParser,
  });
  for (const [event, handler] of Object.entries(on)) socket.on(event, handler);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      socket.close();
      reject(new Error(`socket connect timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      resolve(socket);
    });
    socket.once('connect_error', (err) => {
      clearTimeout(timer);
      socket.close();
      reject(err);
    });
  });
}
