import type { FastifyInstance } from 'fastify';
import { appError } from './errors.js';
import { apiPath } from './security-headers.js';

/** The methods the API's routes answer (http-edge.test.ts checks them against the OpenAPI document). */
const ALLOW_METHODS = 'GET, HEAD, POST, PUT';

/**
 * The request headers a page may send beyond the CORS-safelisted ones: a JSON body's type, the
 * operator token (`Authorization: Bearer …`) and the public or a bot key (`X-API-Key`).
 */
const ALLOW_HEADERS = 'content-type, authorization, x-api-key';

/** How long a browser may keep a preflight's answer, in seconds. */
export const PREFLIGHT_MAX_AGE_SECONDS = 600;

/** Answer headers a page may read beyond the safelisted ones: when to try again after a 429 or 503. */
const EXPOSE_HEADERS = 'Retry-After';

/**
 * CORS for the JSON API (apiPath), so that a page on another of the ALLOWED_ORIGINS (a second
 * site of the deployment, which the `SameSite=None` cookie, COOKIE_DOMAIN and the Origin check are
 * there for) may call it with the session cookie. A request whose `Origin` is exactly one of them
 * gets `Access-Control-Allow-Origin: <that origin>` and `Access-Control-Allow-Credentials: true`;
 * its preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered `204` with the methods,
 * headers and max age above. A preflight from any other origin is answered `403
 * ERR_ORIGIN_NOT_ALLOWED` with no CORS header (the browser then sends nothing), and that origin's
 * other requests get no CORS header (the browser keeps the answer from the page). Every API answer
 * says `Vary: Origin`, since its CORS headers depend on it. Pages and Engine.IO's path are left
 * alone (Socket.IO has its own `cors` option, realtime.ts). Register after the security headers
 * and before the 404/405 hook, which would answer the preflight 405.
 */
export function installCors(app: FastifyInstance, allowedOrigins: readonly string[]): void {
  const allowed = new Set(allowedOrigins);
  app.addHook('onRequest', (request, reply, done) => {
    if (!apiPath(request.url)) return done();
    void reply.header('vary', 'Origin');
    const origin = request.headers.origin;
    const preflight =
      request.method === 'OPTIONS' &&
      origin !== undefined &&
      request.headers['access-control-request-method'] !== undefined;
    if (origin === undefined || !allowed.has(origin)) {
      if (!preflight) return done();
      const err = appError('ERR_ORIGIN_NOT_ALLOWED');
      void reply.status(err.status).send(err.body());
      return;
    }
    void reply.header('access-control-allow-origin', origin).header('access-control-allow-credentials', 'true');
    if (!preflight) {
      void reply.header('access-control-expose-headers', EXPOSE_HEADERS);
      return done();
    }
    void reply
      .header('access-control-allow-methods', ALLOW_METHODS)
      .header('access-control-allow-headers', ALLOW_HEADERS)
      .header('access-control-max-age', String(PREFLIGHT_MAX_AGE_SECONDS))
      .status(204)
      .send();
  });
}
