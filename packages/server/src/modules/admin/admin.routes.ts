import {
  AdminUserUpdateBody,
  BotCreateBody,
  BotCreateResponse,
  FullUserSchema,
  IdParam,
  PublicUserSchema,
} from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { Guards } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import type { Actor } from '../audit/audit.store.js';
import type { BotsService } from '../bots/bots.service.js';
import type { ActorLevel } from './admin.rules.js';
import type { AdminService } from './admin.service.js';

const tags = ['admin'];

/** The caller of an admin route: the operator token or an Admin-or-above session. */
export function adminActor(req: FastifyRequest): { actor: Actor; level: ActorLevel } {
  if (req.principal.operator) return { actor: { kind: 'operator' }, level: 'operator' };
  const u = req.principal.user;
  if (!u) throw new Error('admin route reached without a principal');
  return { actor: { kind: 'user', id: u.id }, level: u.permissionLevel };
}

export function registerAdminRoutes(app: App, deps: { admin: AdminService; bots: BotsService; guards: Guards }) {
  const { admin, bots, guards } = deps;

  app.post('/v1/admin/bots/create', {
    schema: {
      tags,
      security: security.operator,
      description: 'Registers a bot. The API key is shown in this answer only.',
      body: BotCreateBody,
      response: { 200: BotCreateResponse, ...errorResponses },
    },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => bots.create(req.body, adminActor(req).actor),
  });

  app.post('/v1/admin/users/:user_id/update', {
    schema: {
      tags,
      security: security.operator,
      description: 'Sets permission level and/or username, under the level rules of spec 2.11.',
      params: Type.Object({ user_id: IdParam }),
      body: AdminUserUpdateBody,
      response: { 200: Type.Union([FullUserSchema, PublicUserSchema]), ...errorResponses },
    },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return admin.updateUser(actor, level, req.params.user_id, req.body);
    },
  });
}
