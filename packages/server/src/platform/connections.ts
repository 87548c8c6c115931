import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { type ErrorBody, ErrorCodes } from '@parlor/protocol';
import type { FastifyInstance } from 'fastify';

/**
 * How long a client has to send a whole request, headers and body (Node's `requestTimeout`;
 * Fastify leaves it off). A client that trickles a body cannot hold a connection and its memory
 * for ever. Only receiving the request counts: an answer that takes long (a Socket.IO long-poll
 * held up to its 25 s ping interval, a room start) is not cut, and the socket's other traffic
 * (WebSocket, upgraded) is not an HTTP request. Node checks every 30 s, so a stalled request ends
 * 60–90 s after it began, with `408 ERR_REQUEST_TIMEOUT` (answerClientError).
 */
export const REQUEST_TIMEOUT_MS = 60_000;

/**
 * Fastify options of how connections end. `close()` stops accepting and waits for requests in
 * flight to be answered ('idle': only connections with nothing in flight are closed at once;
 * main.ts caps the wait); requests that arrive meanwhile get the 503 of `installDrain`.
 */
export const connectionOptions = {
  requestTimeout: REQUEST_TIMEOUT_MS,
  forceCloseConnections: 'idle',
  return503OnClosing: false,
  clientErrorHandler: answerClientError,
} as const;

/**
 * Node's `clientError`: a request that is not HTTP, or did not arrive within REQUEST_TIMEOUT_MS.
 * Fastify's own answer for the timeout is `{"error":"Request Timeout"}`; ours is the API's error
 * body. The other cases keep Fastify's answers (400, 431). The connection ends either way.
 */
export function answerClientError(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, body]: [number, ErrorBody | object] =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, { code: 'ERR_REQUEST_TIMEOUT', message: ErrorCodes.ERR_REQUEST_TIMEOUT.message }]
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, { error: STATUS_CODES[431], message: 'Exceeded maximum allowed HTTP header size', statusCode: 431 }]
        : [400, { error: STATUS_CODES[400], message: 'Client Error', statusCode: 400 }];
  const text = JSON.stringify(body);
  if (socket.writable)
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(text)}\r\nContent-Type: application/json\r\n\r\n${text}`,
    );
  socket.destroy(err);
}

/**
 * Once the app begins to close, every request answers `503 ERR_SERVICE_UNAVAILABLE` in the API's
 * error body with `Connection: close` (Fastify's own drain answer is `{"error":"Service
 * Unavailable"}`): a load balancer sends the client elsewhere. Register before other preClose hooks.
 */
export function installDrain(app: FastifyInstance): void {
  let draining = false;
  app.addHook('preClose', (done) => {
    draining = true;
    done();
  });
  app.addHook('onRequest', (_request, reply, done) => {
    if (!draining) {
      done();
      return;
    }
    void reply
      .header('connection', 'close')
      .status(503)
      .send({ code: 'ERR_SERVICE_UNAVAILABLE', message: ErrorCodes.ERR_SERVICE_UNAVAILABLE.message });
  });
}
