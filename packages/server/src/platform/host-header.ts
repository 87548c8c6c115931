import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { appError } from './errors.js';

/**
 * An HTTP/1.1 request must carry a Host header, and a server must answer one without it 400
 * (RFC 9112, section 3.2). Node does so itself by default (`requireHostHeader`), before any
 * listener runs: a bare 400 with an empty body and none of the security headers, where every
 * answer of the API has the error body and those headers (docs/api.md, Errors; docs/security.md).
 * The app turns Node's check off (`HOST_HEADER_OPTIONS`, Fastify's `http` option) and makes it
 * itself: `installHostCheck` answers in an onRequest hook, through the app's error handler, and
 * `routeHostlessToApp` sends such a request to the app whatever its path, Engine.IO's included.
 * WebSocket upgrades are not requests but `upgrade` events, which Node never checked for Host:
 * they go to Engine.IO as before (docs/api.md, General).
 * HTTP/1.0 requests may omit Host, as Node lets them; an empty Host value is a Host header.
 */
export const HOST_HEADER_OPTIONS = { http: { requireHostHeader: false } } as const;

/** True for an HTTP/1.1 request without a Host header (Node's own test, which the app replaces). */
export function lacksHost(request: IncomingMessage): boolean {
  return request.httpVersionMajor === 1 && request.httpVersionMinor === 1 && request.headers.host === undefined;
}

/**
 * Answers an HTTP/1.1 request without Host `400 ERR_VALIDATION` naming `headers/host`, before
 * anything else reads the request. Register right after the hook that sets the security headers:
 * the error handler's answer carries them, and no later hook, route or log line sees such a request.
 */
export function installHostCheck(app: FastifyInstance): void {
  app.addHook('onRequest', (request, _reply, done) => {
    if (!lacksHost(request.raw)) {
      done();
      return;
    }
    done(appError('ERR_VALIDATION', undefined, { errors: [{ path: 'headers/host', message: 'is required' }] }));
  });
}

/**
 * Engine.IO takes `/socket.io/…` requests from the HTTP server before the app sees them (it
 * replaces the server's request listeners by one of its own that calls them for other paths).
 * With Node's Host check off, a polling request without Host would be served there; this puts a
 * listener in front again, so that such a request goes to the app (`app.routing`), which refuses
 * it like any other, and everything else goes where it went. Call it after Engine.IO attached.
 */
export function routeHostlessToApp(server: Server, app: (req: IncomingMessage, res: ServerResponse) => void): void {
  const listeners = server.listeners('request') as ((req: IncomingMessage, res: ServerResponse) => void)[];
  server.removeAllListeners('request');
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (lacksHost(req)) {
      app(req, res);
      return;
    }
    for (const listener of listeners) listener.call(server, req, res);
  });
}
