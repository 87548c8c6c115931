import { type Server, type ServerResponse, STATUS_CODES } from 'node:http';
import { Server as NetServer, type Socket } from 'node:net';
import { type ErrorBody, type ErrorCode, ErrorCodes } from '@parlor/protocol';
import type { FastifyInstance } from 'fastify';
import { UNAVAILABLE_RETRY_AFTER_SECONDS } from './errors.js';
import { API_SECURITY_HEADERS } from './security-headers.js';

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
 * main.ts caps the wait); `installDrain` ends the others once answered, and answers requests that
 * arrive meanwhile with its 503.
 */
export const connectionOptions = {
  requestTimeout: REQUEST_TIMEOUT_MS,
  forceCloseConnections: 'idle',
  return503OnClosing: false,
  clientErrorHandler: answerClientError,
} as const;

/** A socket's response in progress: Node's own field (`ServerResponse.assignSocket` sets it). */
type HttpSocket = Socket & { _httpMessage?: ServerResponse | null };

/**
 * Node's `clientError`: what its HTTP parser refuses before Fastify sees a request, or a request
 * that did not arrive within REQUEST_TIMEOUT_MS. Fastify's and Node's own answers have bodies of
 * their own; these answer the API's error body, with `Connection: close`:
 * - a request that is not HTTP (malformed request line, header or chunk): `400 ERR_VALIDATION`;
 * - request line and headers over Node's 16 KiB: `431 ERR_HEADERS_TOO_LARGE`;
 * - the request timeout: `408 ERR_REQUEST_TIMEOUT`.
 * Each carries the API's security headers (security-headers.ts), like every JSON error answer.
 * Nothing is written to a socket that is gone or no longer writable, nor where an earlier
 * request's answer has begun on the connection (pipelining): a second status line would corrupt
 * it. The connection ends in every case.
 */
export function answerClientError(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const started = (socket as HttpSocket)._httpMessage?.headersSent === true;
  if (socket.writable && !started) {
    const [status, body] = clientErrorBody(err.code);
    const text = JSON.stringify(body);
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(text)}\r\nContent-Type: application/json; charset=utf-8\r\n${SECURITY_HEADER_LINES}\r\n${text}`,
    );
  }
  socket.destroy(err);
}

/** The API's security headers as the header lines of a raw answer, each ending its line. */
const SECURITY_HEADER_LINES = Object.entries(API_SECURITY_HEADERS)
  .map(([name, value]) => `${name}: ${value}\r\n`)
  .join('');

/** The status and API error body for a `clientError` code of Node's. */
function clientErrorBody(code: string | undefined): [number, ErrorBody] {
  const answer = (c: ErrorCode, message: string = ErrorCodes[c].message): [number, ErrorBody] => [
    ErrorCodes[c].status,
    { code: c, message },
  ];
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return answer('ERR_REQUEST_TIMEOUT');
  if (code === 'HPE_HEADER_OVERFLOW') return answer('ERR_HEADERS_TOO_LARGE');
  return answer('ERR_VALIDATION', 'The request is not valid HTTP.');
}

/**
 * Once the app begins to close, every request answers `503 ERR_SERVICE_UNAVAILABLE` in the API's
 * error body (Fastify's own drain answer is `{"error":"Service Unavailable"}`): a load balancer
 * sends the client elsewhere. It carries `Retry-After` as every other 503 of the API does
 * (errors.ts): a client talking to this node alone (a single-node install restarting) is told to
 * come back, not that the request failed for good. Register before other preClose hooks: the node stops accepting
 * connections here, at once, rather than once every preClose hook has run (Fastify closes the
 * server only then, and the background tasks' stop and the sockets' close take seconds).
 *
 * Every answer written from then on, to a request in flight or a new one, Socket.IO's included,
 * says `Connection: close` and ends its connection. Fastify's `server.close()` closes only the
 * connections idle when it runs, after every preClose hook: a keep-alive connection answered later
 * would hold the close until the client hung up. One whose answer was already under way (its
 * `Connection: keep-alive` sent) is closed once that answer is finished.
 */
export function installDrain(app: FastifyInstance): void {
  let draining = false;
  const server = app.server;
  const connections = new Set<HttpSocket>();
  server.on('connection', (socket: HttpSocket) => {
    connections.add(socket);
    socket.once('close', () => connections.delete(socket));
  });
  app.addHook('preClose', (done) => {
    draining = true;
    // net's close, not http's: that one would also end the idle keep-alive connections now, where a
    // request already on its way is answered 503 (the load balancer retries it); Fastify's close ends
    // them after the preClose hooks, and its callback still comes (ERR_SERVER_NOT_RUNNING, ignored).
    if (server.listening) NetServer.prototype.close.call(server);
    for (const socket of connections) if (socket._httpMessage) endAfterAnswer(server, socket._httpMessage);
    // Before Fastify's and Socket.IO's own listeners, which may answer at once.
    server.prependListener('request', (_request, response) => endAfterAnswer(server, response));
    done();
  });
  app.addHook('onRequest', (_request, reply, done) => {
    if (!draining) {
      done();
      return;
    }
    void reply
      .status(503)
      .header('retry-after', String(UNAVAILABLE_RETRY_AFTER_SECONDS))
      .send({ code: 'ERR_SERVICE_UNAVAILABLE', message: ErrorCodes.ERR_SERVICE_UNAVAILABLE.message });
  });
}

/**
 * Makes an answer of the drain end its connection: `Connection: close` if its headers are not
 * written yet (Node then closes the connection after it), else the connection closes once idle.
 */
function endAfterAnswer(server: Server, response: ServerResponse): void {
  if (!response.headersSent) response.shouldKeepAlive = false;
  response.once('finish', () => server.closeIdleConnections());
}
