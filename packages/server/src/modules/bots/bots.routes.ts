import {
  BotBatchBody,
  BotBatchResponse,
  BotListQuery,
  BotProfileSchema,
  BotSearchQuery,
  BotUpdateBody,
  BotUserSchema,
  BotUserUpdateBody,
  BotUserUpdatedSchema,
  IdParam,
  PublicBotSchema,
} from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import { currentBot, type Guards } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import type { UsersService } from '../users/users.service.js';
import type { BotsService } from './bots.service.js';

const tags = ['bots'];
const idParams = Type.Object({ id: IdParam });

/** Routes for bot-authenticated callers (B). */
export function registerBotRoutes(app: App, deps: { bots: BotsService; users: UsersService; guards: Guards }) {
  const { bots, users, guards } = deps;

  app.get('/v1/bot/me', {
    schema: { tags, security: security.bot, response: { 200: BotProfileSchema, ...errorResponses } },
    onRequest: guards.bot,
    handler: async (req) => bots.me(currentBot(req).id),
  });

  app.post('/v1/bot/me/update', {
    schema: {
      tags,
      security: security.bot,
      description: 'Own info (name, avatar_url) and/or stats (users, latency_ms) in one call.',
      body: BotUpdateBody,
      response: { 200: BotProfileSchema, ...errorResponses },
    },
    onRequest: guards.bot,
    handler: async (req) => bots.updateMe(currentBot(req).id, req.body),
  });

  app.post('/v1/bot/batch', {
    schema: {
      tags,
      security: security.bot,
      description: 'Reports up to 100 command executions.',
      body: BotBatchBody,
      response: { 200: BotBatchResponse, ...errorResponses },
    },
    onRequest: guards.bot,
    handler: async (req) => bots.batch(currentBot(req).id, req.body),
  });

  app.get('/v1/bot/users/:user_id', {
    schema: {
      tags,
      security: security.bot,
      params: Type.Object({ user_id: IdParam }),
      response: { 200: BotUserSchema, ...errorResponses },
    },
    onRequest: guards.bot,
    handler: async (req) => users.botView(req.params.user_id),
  });

  app.post('/v1/bot/users/:user_id/update', {
    schema: {
      tags,
      security: security.bot,
      params: Type.Object({ user_id: IdParam }),
      description:
        'Official bots rename anyone; verified and community bots only users below Admin (403 ERR_FORBIDDEN).',
      body: BotUserUpdateBody,
      response: { 200: BotUserUpdatedSchema, ...errorResponses },
    },
    onRequest: guards.bot,
    handler: async (req) => bots.renameUser(currentBot(req), req.params.user_id, req.body.username),
  });
}

/** Public bot listings (K), served under /v1 and, as the spec lists them, without it. */
export function registerPublicBotRoutes(app: App, deps: { bots: BotsService; guards: Guards }) {
  const { bots, guards } = deps;
  const viewer = (req: { principal: { user: { permissionLevel: number } | null } }) =>
    req.principal.user?.permissionLevel ?? null;
  const anyBot = Type.Union([BotProfileSchema, PublicBotSchema]);

  for (const prefix of ['/v1', '']) {
    app.get(`${prefix}/bots`, {
      schema: {
        tags,
        security: security.publicKey,
        querystring: BotListQuery,
        response: { 200: Type.Object({ bots: Type.Array(PublicBotSchema) }), ...errorResponses },
      },
      onRequest: guards.publicKey,
      handler: async (req) => ({ bots: await bots.list(req.query.offset, req.query.limit) }),
    });

    app.get(`${prefix}/bots/search`, {
      schema: {
        tags,
        security: security.publicKey,
        description: 'Name search; with an Admin session cookie, full profiles.',
        querystring: BotSearchQuery,
        response: { 200: Type.Object({ bots: Type.Array(anyBot) }), ...errorResponses },
      },
      onRequest: guards.publicKeyOptionalSession,
      handler: async (req) => ({
        bots: await bots.search(req.query.q, viewer(req), req.query.offset, req.query.limit),
      }),
    });

    app.get(`${prefix}/bots/:id`, {
      schema: {
        tags,
        security: security.publicKey,
        description: 'Public profile; with an Admin session cookie, owner, rate limit and type too.',
        params: idParams,
        response: { 200: anyBot, ...errorResponses },
      },
      onRequest: guards.publicKeyOptionalSession,
      handler: async (req) => bots.get(req.params.id, viewer(req)),
    });
  }
}
