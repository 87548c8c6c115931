import type { FastifyInstance } from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import { appError } from './errors.js';

/**
 * Fastify answers 404 for a known path with the wrong method. This keeps a second router of every
 * registered path so the not-found handler can answer 405 with an Allow header instead.
 */
export function installMethodNotAllowed(app: FastifyInstance): void {
  const router = FindMyWay({ ignoreTrailingSlash: false });
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
  app.setNotFoundHandler((request, reply) => {
    const url = request.url.split('?')[0] ?? '/';
    const allowed = [...methods].filter((m) => m !== request.method && router.find(m, url) !== null);
    if (allowed.length > 0) {
      const err = appError('ERR_METHOD_NOT_ALLOWED');
      return reply.status(err.status).header('allow', allowed.join(', ')).send(err.body());
    }
    const err = appError('ERR_NOT_FOUND');
    return reply.status(err.status).send(err.body());
  });
}
