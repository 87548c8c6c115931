import {
  AdminBotParams,
  AdminBotUpdateBody,
  AdminChatCreateBody,
  AdminUserUpdateBody,
  AuditPage,
  AuditQuery,
  BotCreateBody,
  BotCreateResponse,
  BotProfileSchema,
  ChatConfigBody,
  ChatEnvelope,
  ChatIdParams,
  EmptyBody,
  FullUserSchema,
  IdParam,
  OkSchema,
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
const userParams = Type.Object({ user_id: IdParam });

/** The caller of an admin route: the operator token or an Admin-or-above session. */
export function adminActor(req: FastifyRequest): { actor: Actor; level: ActorLevel } {
  if (req.principal.operator) return { actor: { kind: 'operator' }, level: 'operator' };
  const u = req.principal.user;
  if (!u) throw new Error('admin route reached without a principal');
  return { actor: { kind: 'user', id: u.id }, level: u.permissionLevel };
}

/**
 * The admin surface of spec 4.8 (the operator token, or an Admin-or-above session): the services
 * apply the level rules of spec 2.11 per target and write the audit log.
 */
export function registerAdminRoutes(app: App, deps: { admin: AdminService; bots: BotsService; guards: Guards }) {
  const { admin, bots, guards } = deps;
  const admins = { tags, security: security.operator };
  const onRequest = guards.operatorOrAdmin;

  app.post('/v1/admin/bots/create', {
    schema: {
      ...admins,
      description: 'Registers a bot. The API key is shown in this answer only. Official bots: Owners and the operator.',
      body: BotCreateBody,
      response: { 200: BotCreateResponse, ...errorResponses },
    },
    onRequest,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return bots.create(req.body, actor, level);
    },
  });

  app.post('/v1/admin/bots/:bot_id/update', {
    schema: {
      ...admins,
      description:
        'Changes a bot and answers its full profile. Official bots, and making a bot official: Owners and the operator.',
      params: AdminBotParams,
      body: AdminBotUpdateBody,
      response: { 200: BotProfileSchema, ...errorResponses },
    },
    onRequest,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return bots.adminUpdate(req.params.bot_id, req.body, actor, level);
    },
  });

  app.post('/v1/admin/bots/:bot_id/delete', {
    schema: {
      ...admins,
      description: 'Deletes a bot (soft delete): its key stops working at once.',
      params: AdminBotParams,
      body: EmptyBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    onRequest,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      await bots.remove(req.params.bot_id, actor, level);
      return { ok: true };
    },
  });

  app.post('/v1/admin/users/:user_id/update', {
    schema: {
      ...admins,
      description:
        'Sets permission level, username and/or avatar source, under the level rules of spec 2.11. The account state changes through the punishments routes.',
      params: userParams,
      body: AdminUserUpdateBody,
      response: { 200: Type.Union([FullUserSchema, PublicUserSchema]), ...errorResponses },
    },
    onRequest,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return admin.updateUser(actor, level, req.params.user_id, req.body);
    },
  });

  app.post('/v1/admin/users/:user_id/delete', {
    schema: {
      ...admins,
      description:
        'Deletes an account: sessions end at once, linked identities are freed (the person may sign up again). Nobody deletes themselves.',
      params: userParams,
      body: EmptyBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    onRequest,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      await admin.deleteUser(actor, level, req.params.user_id);
      return { ok: true };
    },
  });

  app.post('/v1/admin/chats/create', {
    schema: {
      ...admins,
      description: 'Creates an official chat (no owner). Owners and the operator.',
      body: AdminChatCreateBody,
      response: { 200: ChatEnvelope, ...errorResponses },
    },
    onRequest,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return { chat: await admin.createOfficialChat(actor, level, req.body) };
    },
  });

  app.post('/v1/admin/chats/:chat_id/update', {
    schema: {
      ...admins,
      description: 'Renames a chat or switches it between public and private. Official chats: Owners and the operator.',
      params: ChatIdParams,
      body: ChatConfigBody,
      response: { 200: ChatEnvelope, ...errorResponses },
    },
    onRequest,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return { chat: await admin.updateChat(actor, level, req.params.chat_id, req.body) };
    },
  });

  app.post('/v1/admin/chats/:chat_id/delete', {
    schema: {
      ...admins,
      description: 'Deletes a chat; its members get room:left (deleted). Official chats: Owners and the operator.',
      params: ChatIdParams,
      body: EmptyBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    onRequest,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      await admin.deleteChat(actor, level, req.params.chat_id);
      return { ok: true };
    },
  });

  app.get('/v1/admin/audit', {
    schema: {
      ...admins,
      description:
        'The audit log, newest first. `before` is an entry id: pass `next_before` to get the next page. An Admin reads only the entries about users below its level, deleted users and no user.',
      querystring: AuditQuery,
      response: { 200: AuditPage, ...errorResponses },
    },
    onRequest,
    handler: async (req) => admin.auditLog(adminActor(req).level, req.query),
  });
}
