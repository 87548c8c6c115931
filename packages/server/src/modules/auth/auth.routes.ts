import {
  BotLoginCodeBody,
  BotLoginCodeResponse,
  EmptyBody,
  LookupBody,
  LookupResponse,
  OkSchema,
  RequestCodeBody,
  RequestCodeResponse,
  SendCodeBody,
  SendCodeResponse,
  StrangerResponse,
  UserSchema,
  VerifyBody,
} from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import { currentBot, currentSession, type Guards } from '../../platform/auth.js';
import { clientIp } from '../../platform/client-address.js';
import type { Config } from '../../platform/config.js';
import { SESSION_COOKIE, userAgent } from '../../platform/http.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import type { AuthService } from './auth.service.js';

export interface AuthRouteDeps {
  auth: AuthService;
  guards: Guards;
  config: Pick<Config, 'cookieDomain'>;
  logout: (userId: number, sessionId: number) => Promise<void>;
}

const tags = ['authentication'];

export function registerAuthRoutes(app: App, { auth, guards, config, logout }: AuthRouteDeps) {
  const cookieOptions = (expires: Date) => ({
    path: '/',
    httpOnly: true,
    secure: true,
    sameSite: 'none' as const,
    expires,
    ...(config.cookieDomain ? { domain: config.cookieDomain } : {}),
  });
  const clearCookie = (reply: FastifyReply) => reply.clearCookie(SESSION_COOKIE, cookieOptions(new Date(0)));

  app.post('/v1/authentication/lookup', {
    schema: {
      tags,
      security: security.publicKey,
      body: LookupBody,
      response: { 200: LookupResponse, ...errorResponses },
    },
    onRequest: guards.publicKey,
    handler: async (req) => auth.lookup(req.body.username),
  });

  app.post('/v1/authentication/request', {
    schema: {
      tags,
      security: security.publicKey,
      description: 'Starts a web login: a code is made and delivered by a platform bot; it is never in this answer.',
      body: RequestCodeBody,
      response: { 200: RequestCodeResponse, ...errorResponses },
    },
    onRequest: guards.publicKey,
    handler: async (req) => auth.request(req.body.platform, req.body.platform_user_id, clientIp(req)),
  });

  app.post('/v1/authentication/verify', {
    schema: {
      tags,
      security: security.publicKey,
      body: VerifyBody,
      response: { 200: Type.Object({ user: UserSchema, new_account: Type.Boolean() }), ...errorResponses },
    },
    onRequest: guards.publicKey,
    handler: async (req, reply) => {
      const result = await auth.verify(req.body.code, clientIp(req), userAgent(req));
      reply.setCookie(SESSION_COOKIE, result.token, cookieOptions(result.expiresAt));
      return { user: result.user, new_account: result.newAccount };
    },
  });

  app.post('/v1/portal/stranger', {
    schema: {
      tags,
      security: security.publicKey,
      description: 'Creates an anonymous session that may match, use its direct chats and keys, nothing else.',
      body: EmptyBody,
      response: { 200: StrangerResponse, ...errorResponses },
    },
    onRequest: guards.publicKey,
    handler: async (req, reply) => {
      const s = await auth.stranger(clientIp(req), userAgent(req));
      reply.setCookie(SESSION_COOKIE, s.token, cookieOptions(s.expiresAt));
      return { user: { id: s.id, username: s.username, stranger: true as const } };
    },
  });

  app.post('/v1/authentication/logout', {
    schema: {
      tags,
      security: security.session,
      description: 'Ends the current session. A timed-out user may too (docs/api.md, Moderation).',
      body: EmptyBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    // A timed-out user may still sign out (a shared device, an account taken over): docs/api.md.
    onRequest: guards.anySessionSigningOut,
    config: { ownWriteLimit: true },
    handler: async (req, reply) => {
      const s = currentSession(req);
      await logout(s.userId, s.id);
      clearCookie(reply);
      return { ok: true };
    },
  });

  app.post('/v1/authentication/bot/send-code', {
    schema: {
      tags,
      security: security.bot,
      description: 'Official bots only (403 ERR_FORBIDDEN for verified and community bots).',
      body: SendCodeBody,
      response: { 200: SendCodeResponse, ...errorResponses },
    },
    onRequest: guards.bot,
    handler: async (req) => auth.botSendCode(currentBot(req), req.body.platform, req.body.platform_user_id),
  });

  app.post('/v1/authentication/bot/login-code', {
    schema: {
      tags,
      security: security.bot,
      description: 'Official bots only (403 ERR_FORBIDDEN for verified and community bots).',
      body: BotLoginCodeBody,
      response: { 200: BotLoginCodeResponse, ...errorResponses },
    },
    onRequest: guards.bot,
    handler: async (req) => auth.botLoginCode(currentBot(req), req.body),
  });
}
