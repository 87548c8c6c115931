import { Limits } from '@parlor/protocol';
import type { FastifyRequest } from 'fastify';
import { toErrorBody } from './errors.js';
import { rateLimited } from './http.js';
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

/** A point `spend` took: its key and the window it went to, which its give-back names. */
export interface Spent {
  key: string;
  window: string;
}

/** A per-user allowance over a fixed window, shared by every node (the coordination port). */
export interface UserLimit {
  /** Spends one of the user's points; beyond the limit throws 429 ERR_RATE_LIMITED with retry_after. */
  spend(userId: number): Promise<Spent>;
  /**
   * Gives back the point `spend` took, for a request that did nothing after all. It goes back to
   * the window it was spent in while that window is open; should the window end in between, there
   * is nothing to give back (both stores): the give-back opens no window of its own, and a window
   * another request of the user opened meanwhile keeps its whole count.
   */
  giveBack(spent: Spent): Promise<void>;
}

/** A UserLimit over any key (an address, say): the same spend and give-back. */
export interface KeyLimit {
  spend(key: string): Promise<Spent>;
  giveBack(spent: Spent): Promise<void>;
}

export function makeKeyLimit(
  state: Pick<StateStore, 'limiter'>,
  opts: { name: string; points: number; windowMs: number; message: string },
): KeyLimit {
  const limiter = state.limiter(opts.name, opts.points, opts.windowMs);
  return {
    async spend(key) {
      const spent = await limiter.consume(key);
      if (spent.allowed) return { key, window: spent.window };
      // A refused request does nothing, so it spends nothing: the stores count every consume, and
      // the point it took would outlast a write given back meanwhile (one write short).
      await limiter.refund(key, spent.window);
      throw rateLimited(spent.retryAfterMs, opts.message);
    },
    async giveBack(spent) {
      await limiter.refund(spent.key, spent.window);
    },
  };
}

export function makeUserLimit(
  state: Pick<StateStore, 'limiter'>,
  opts: { name: string; points: number; windowMs: number; message: string },
): UserLimit {
  const limit = makeKeyLimit(state, opts);
  return {
    spend: (userId) => limit.spend(String(userId)),
    giveBack: limit.giveBack,
  };
}

/**
 * The per-user write limit: Limits.WRITES_PER_USER changes per Limits.WRITE_WINDOW_MS for each
 * signed-in user. Spent by every POST or PUT made with a session (installWriteLimit) and by the
 * socket events that change a membership (room:join as a new member, room:leave).
 */
export function makeWriteLimit(state: Pick<StateStore, 'limiter'>): UserLimit {
  return makeUserLimit(state, {
    name: 'writes-user',
    points: Limits.WRITES_PER_USER,
    windowMs: Limits.WRITE_WINDOW_MS,
    message: 'Too many changes in a short time; try again later.',
  });
}

/**
 * Every room:join spends one of the user's Limits.ROOM_ENTERS_PER_USER per
 * Limits.ROOM_ENTER_WINDOW_MS, whether it makes a member or only enters the room: each reads the
 * chat, its bans and its key ring, and asks every node who is present.
 */
export function makeEnterLimit(state: Pick<StateStore, 'limiter'>): UserLimit {
  return makeUserLimit(state, {
    name: 'room-enters-user',
    points: Limits.ROOM_ENTERS_PER_USER,
    windowMs: Limits.ROOM_ENTER_WINDOW_MS,
    message: 'Too many chat joins in a short time; try again later.',
  });
}

/**
 * Every request that changes something (POST, PUT: not GET or HEAD) made with a session spends a
 * write before its handler runs. The hook runs after authentication and validation, so a refused
 * credential or a malformed body spends nothing; a stranger naming a chat outside its reach is a
 * refused credential too, told 401 by its route's onRequest hook (chats.service
 * `assertStrangerReach`), so it comes before this. The operator token and bots (limited per key)
 * are not counted, nor routes marked `ownWriteLimit`.
 * A refused request does nothing.
 *
 * Some rules of a body no schema states (a usable public key, one envelope per session, a field
 * checked against the stored row) are checked by the route's own hooks and handlers, after the
 * write was spent: a request they answer 400 ERR_VALIDATION gives its write back before the answer
 * goes out, so it spends nothing either, as docs/api.md (General, Write limit) promises, and the
 * next request already counts without it. So a handler answers ERR_VALIDATION only when it has
 * committed nothing (a refusal after a commit would get its write back). Other refusals (403, 404,
 * 409…) keep theirs: they got as far as the rules, which is the work the limit bounds.
 */
export function installWriteLimit(app: App, writes: UserLimit): void {
  /** The write each request spent (those that spent one). */
  const spentBy = new WeakMap<FastifyRequest, Spent>();
  app.addHook('preHandler', async (request) => {
    if (request.method === 'GET' || request.method === 'HEAD') return;
    const user = request.principal.user;
    if (!user || request.principal.operator || request.routeOptions.config.ownWriteLimit) return;
    spentBy.set(request, await writes.spend(user.id));
  });
  // onError hooks run before the error handler answers (Fastify's reply.send), so the write is back
  // by the time the client reads its 400.
  app.addHook('onError', async (request, _reply, error) => {
    const spent = spentBy.get(request);
    if (spent === undefined || toErrorBody(error).body.code !== 'ERR_VALIDATION') return;
    spentBy.delete(request);
    // The answer is the 400 whatever happens here; a store that cannot take the point back costs
    // the user that one write.
    await writes.giveBack(spent).catch((err: unknown) => request.log.warn({ err }, 'write not given back'));
  });
}
