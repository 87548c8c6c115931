import { Limits } from '@parlor/protocol';
import { appError } from './errors.js';
import { retryAfterSeconds } from './http.js';
import type { App } from './routing.js';
import type { StateStore } from './state/index.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The route is left out of the per-user write limit: it has limits of its own (message sends)
     * or must always work (logout, ending a session).
     */
    ownWriteLimit?: boolean;
  }
}

/**
 * The per-user write limit: Limits.WRITES_PER_USER changes per Limits.WRITE_WINDOW_MS for each
 * signed-in user, on every node (the coordination port). Spent by every POST made with a session
 * (installWriteLimit) and by the socket events that change a membership (room:join as a new
 * member, room:leave).
 */
export interface WriteLimit {
  /** Spends one of the user's writes; beyond the limit throws 429 ERR_RATE_LIMITED with retry_after. */
  spend(userId: number): Promise<void>;
}

export function makeWriteLimit(state: Pick<StateStore, 'limiter'>): WriteLimit {
  const writes = state.limiter('writes-user', Limits.WRITES_PER_USER, Limits.WRITE_WINDOW_MS);
  return {
    async spend(userId) {
      const spent = await writes.consume(String(userId));
      if (!spent.allowed)
        throw appError('ERR_RATE_LIMITED', 'Too many changes in a short time; try again later.', {
          retry_after: retryAfterSeconds(spent.retryAfterMs),
        });
    },
  };
}

/**
 * Every POST made with a session spends a write before its handler runs. The hook runs after
 * authentication and validation, so a refused credential or a malformed body spends nothing; the
 * operator token and bots (limited per key) are not counted, nor routes marked `ownWriteLimit`.
 * A refused request does nothing.
 */
export function installWriteLimit(app: App, writes: WriteLimit): void {
  app.addHook('preHandler', async (request) => {
    if (request.method === 'GET' || request.method === 'HEAD') return;
    const user = request.principal.user;
    if (!user || request.principal.operator || request.routeOptions.config.ownWriteLimit) return;
    await writes.spend(user.id);
  });
}
