import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from './config.js';
import { appError } from './errors.js';
import { SESSION_COOKIE } from './http.js';
import { safeEqual } from './secrets.js';

/** Who is calling. Filled by the guards below; handlers read it through the accessors. */
export interface Principal {
  /** The active session and its user, when the psession cookie is valid. */
  session: { id: number; userId: number; expiresAt: Date; tokenSuffix: string } | null;
  user: AuthUser | null;
  bot: { id: number; type: number } | null;
  operator: boolean;
  publicKey: boolean;
}

/** The fields of the stored user every permission check reads (never the cookie). */
export interface AuthUser {
  id: number;
  username: string;
  permissionLevel: number;
  state: number;
  stateExpiresAt: Date | null;
  /** An anonymous matchmaking-only account (POST /v1/portal/stranger). */
  stranger: boolean;
  /** Blocked from matchmaking by a moderator. */
  matchBlocked: boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
}

export interface SessionResolver {
  /** The live session and its user for a raw token, or null; also records activity. */
  resolve(token: string): Promise<{ session: NonNullable<Principal['session']>; user: AuthUser } | null>;
}

export interface BotResolver {
  /** The bot for a raw API key (with its rate limits spent), or null. */
  resolve(apiKey: string): Promise<{ id: number; type: number } | null>;
}

export interface GuardDeps {
  config: Pick<Config, 'allowedOrigins'>;
  publicApiKey: string;
  operatorToken: string;
  sessions: SessionResolver;
  bots: BotResolver;
}

type Guard = (request: FastifyRequest, reply: FastifyReply) => Promise<void>;

export function emptyPrincipal(): Principal {
  return { session: null, user: null, bot: null, operator: false, publicKey: false };
}

function apiKeyHeader(request: FastifyRequest): string | null {
  const v = request.headers['x-api-key'];
  return typeof v === 'string' && v.length > 0 && v.length <= 256 ? v : null;
}

function bearer(request: FastifyRequest): string | null {
  const v = request.headers.authorization;
  // The scheme's name is case-insensitive (RFC 9110 11.1): `bearer` and `BEARER` are Bearer.
  if (typeof v !== 'string' || !/^bearer /i.test(v)) return null;
  const t = v.slice(7).trim();
  return t.length > 0 && t.length <= 256 ? t : null;
}

/**
 * Why a user in this state may not use its session (spec 3 user states): Banned, or Timeout; null
 * for Active. The HTTP guards and the socket handshake (wiring/services.ts) refuse alike.
 */
export function stateRefusal(state: number): 'ERR_BANNED' | 'ERR_TIMED_OUT' | null {
  if (state === 2) return 'ERR_BANNED';
  if (state === 1) return 'ERR_TIMED_OUT';
  return null;
}

/**
 * Guards, one per kind of caller of spec 5: K (public key), S (session), B (bot), and the
 * operator token of the CLI. Each throws the error body's 401/403; none trusts the cookie alone.
 */
export function makeGuards(deps: GuardDeps) {
  const checkOrigin = (request: FastifyRequest) => {
    // Cookie-authenticated mutations from a browser must come from an allowed origin (CSRF).
    const origin = request.headers.origin;
    if (request.method === 'GET' || request.method === 'HEAD' || origin === undefined) return;
    if (!deps.config.allowedOrigins.includes(origin)) throw appError('ERR_ORIGIN_NOT_ALLOWED');
  };

  const loadSession = async (request: FastifyRequest): Promise<boolean> => {
    const token = request.cookies[SESSION_COOKIE];
    if (!token || token.length > 256) return false;
    const found = await deps.sessions.resolve(token);
    if (!found) return false;
    request.principal.session = found.session;
    request.principal.user = found.user;
    return true;
  };

  const publicKey: Guard = async (request) => {
    const key = apiKeyHeader(request);
    if (!key || !safeEqual(key, deps.publicApiKey)) throw appError('ERR_INVALID_API_KEY');
    request.principal.publicKey = true;
  };

  /**
   * A live session, anonymous strangers included, whose user is not banned and, unless
   * `timedOutMayPass`, not timed out (stateRefusal).
   */
  const liveSession =
    (timedOutMayPass: boolean): Guard =>
    async (request) => {
      if (!(await loadSession(request))) throw appError('ERR_UNAUTHENTICATED');
      checkOrigin(request);
      const refusal = stateRefusal((request.principal.user as AuthUser).state);
      if (refusal === 'ERR_BANNED' || (refusal === 'ERR_TIMED_OUT' && !timedOutMayPass)) throw appError(refusal);
    };

  /** `guard`, then a registered account only: a stranger's session gets 401 (spec 4.5 statistics). */
  const registered =
    (guard: Guard): Guard =>
    async (request, reply) => {
      await guard(request, reply);
      if ((request.principal.user as AuthUser).stranger)
        throw appError('ERR_UNAUTHENTICATED', 'This needs a registered account.');
    };

  /** Any live session, anonymous strangers included (matchmaking, direct chats, keys). */
  const anySession = liveSession(false);
  /** A registered account's session. */
  const session = registered(anySession);
  /**
   * Signing out: as anySession, but a timed-out user passes. A timeout ends no session, and a
   * user on a shared device, or whose account was taken over, must be able to end sessions while
   * it runs (logout, and ending its own other sessions); nothing else is let through. A ban ends
   * every session, so a banned user is still refused (ERR_BANNED) should one be read before that.
   */
  const anySessionSigningOut = liveSession(true);
  /** Signing out as a registered account (anySessionSigningOut). */
  const sessionSigningOut = registered(anySessionSigningOut);

  /** K required, session optional (public reads that show more to Admins). */
  const publicKeyOptionalSession: Guard = async (request, reply) => {
    await publicKey(request, reply);
    if (await loadSession(request)) {
      const user = request.principal.user as AuthUser;
      if (user.state !== 0) {
        request.principal.session = null;
        request.principal.user = null;
      }
    }
  };

  /** The public key or a session (GET /v1/users/{id}: public, with more for Admins). */
  const publicKeyOrSession: Guard = async (request, reply) => {
    const key = apiKeyHeader(request);
    if (key && safeEqual(key, deps.publicApiKey)) {
      request.principal.publicKey = true;
      if (request.cookies[SESSION_COOKIE]) await publicKeyOptionalSession(request, reply);
      return;
    }
    await session(request, reply);
  };

  const bot: Guard = async (request) => {
    const key = apiKeyHeader(request);
    const found = key ? await deps.bots.resolve(key) : null;
    if (!found) throw appError('ERR_INVALID_API_KEY');
    request.principal.bot = found;
  };

  /** The operator token, or an Admin-or-above session; services check levels per target. */
  const operatorOrAdmin: Guard = async (request, reply) => {
    const token = bearer(request);
    if (token) {
      if (!safeEqual(token, deps.operatorToken))
        throw appError('ERR_UNAUTHENTICATED', 'The operator token is not valid.');
      request.principal.operator = true;
      return;
    }
    await session(request, reply);
    if ((request.principal.user as AuthUser).permissionLevel < 2) throw appError('ERR_FORBIDDEN');
  };

  return {
    publicKey,
    session,
    anySession,
    sessionSigningOut,
    anySessionSigningOut,
    publicKeyOptionalSession,
    publicKeyOrSession,
    bot,
    operatorOrAdmin,
  };
}

export type Guards = ReturnType<typeof makeGuards>;

/** The signed-in user; only call behind the session guard. */
export function currentUser(request: FastifyRequest): AuthUser {
  const u = request.principal.user;
  if (!u) throw appError('ERR_UNAUTHENTICATED');
  return u;
}

export function currentSession(request: FastifyRequest): NonNullable<Principal['session']> {
  const s = request.principal.session;
  if (!s) throw appError('ERR_UNAUTHENTICATED');
  return s;
}

export function currentBot(request: FastifyRequest): NonNullable<Principal['bot']> {
  const b = request.principal.bot;
  if (!b) throw appError('ERR_INVALID_API_KEY');
  return b;
}

/** The signed-in caller as chat rules see it. */
export function viewerOf(request: FastifyRequest): {
  userId: number;
  sessionId: number;
  permissionLevel: number;
  stranger: boolean;
} {
  const u = currentUser(request);
  return {
    userId: u.id,
    sessionId: currentSession(request).id,
    permissionLevel: u.permissionLevel,
    stranger: u.stranger,
  };
}
