import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import { appError } from './errors.js';

/**
 * The longest path parameter the router takes (find-my-way's `maxParamLength`, 100 by default,
 * refused before any hook ran: a 400 before the 401 of a caller without credentials). Node's
 * 16 KiB limit on the request line and headers bounds a path already; each parameter's schema
 * (its maxLength, its integer range) decides what is valid, after authentication.
 */
export const MAX_PARAM_LENGTH = 16 * 1024;

/**
 * How a path is matched, for the app's router (app.ts, Fastify's `routerOptions`) and for the
 * second router below alike: a path the app's router takes must be one the second router finds.
 * When the second router kept find-my-way's default `maxParamLength` (100), a wrong method on a
 * path with a longer parameter answered 404 instead of 405.
 */
export const ROUTER_OPTIONS = Object.freeze({ ignoreTrailingSlash: false, maxParamLength: MAX_PARAM_LENGTH });

/**
 * Fastify answers 404 for a known path with the wrong method. This keeps a second router of every
 * registered path so that a request no route takes answers 405 with an Allow header instead.
 *
 * The answer is decided in an onRequest hook, before the body is read: a wrong path or method
 * answers 404/405 whatever its body (malformed JSON, over the body limit, another media type).
 * Register it after the hooks whose headers every answer carries (security headers, drain), and
 * before any route.
 */
export function installMethodNotAllowed(app: FastifyInstance): void {
  // The app's router options, so both routers take the same paths (ROUTER_OPTIONS).
  const router = FindMyWay({ ...ROUTER_OPTIONS });
  const methods = new Set<HTTPMethod>();
  app.addHook('onRoute', (route) => {
    const list = (Array.isArray(route.method) ? route.method : [route.method]) as HTTPMethod[];
    for (const m of list) {
      methods.add(m);
      try {
        router.on(m, route.url, () => {});
      } catch {
        // Already known (a route registered twice under one method); nothing to add.
      }
    }
  });

  const answer = (request: FastifyRequest, reply: FastifyReply) => {
    const url = request.url.split('?')[0] ?? '/';
    // A route of this very method took the path and found nothing there (an unknown docs asset
    // calls the not-found handler): that is a 404, not a 405 pointing at another method.
    const taken = router.find(request.method as HTTPMethod, url) !== null;
    const allowed = taken ? [] : [...methods].filter((m) => m !== request.method && router.find(m, url) !== null);
    if (allowed.length > 0) {
      const err = appError('ERR_METHOD_NOT_ALLOWED');
      return reply.status(err.status).header('allow', allowed.join(', ')).send(err.body());
    }
    const err = appError('ERR_NOT_FOUND');
    return reply.status(err.status).send(err.body());
  };

  app.addHook('onRequest', (request, reply, done) => {
    if (!request.is404) {
      done();
      return;
    }
    void answer(request, reply);
  });
  // Reached through reply.callNotFound() (a route that found nothing) and as Fastify's fallback.
  app.setNotFoundHandler(answer);
}
