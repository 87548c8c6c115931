import {
  FullUserSchema,
  IdParam,
  PublicUserSchema,
  PunishmentSchema,
  PunishmentsQuery,
  SearchQuery,
  SearchResponse,
  SubscriptionStatusSchema,
  UpdateMeBody,
  UpdateMeResponse,
  UserEnvelope,
} from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import { currentSession, currentUser, type Guards } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import type { UsersService } from './users.service.js';

const tags = ['users'];

export function registerUsersRoutes(app: App, { users, guards }: { users: UsersService; guards: Guards }) {
  app.get('/v1/users/me', {
    schema: { tags, security: security.session, response: { 200: UserEnvelope, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => ({ user: await users.me(currentUser(req).id) }),
  });

  app.post('/v1/users/me/update', {
    schema: {
      tags,
      security: security.session,
      description: 'Fields succeed or fail independently; `errors` names the fields that failed.',
      body: UpdateMeBody,
      response: { 200: UpdateMeResponse, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => {
      const s = currentSession(req);
      return users.updateMe(s.userId, s.id, req.body);
    },
  });

  app.get('/v1/users/me/subscription', {
    schema: { tags, security: security.session, response: { 200: SubscriptionStatusSchema, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => users.subscription(currentUser(req).id),
  });

  app.get('/v1/users/me/punishments', {
    schema: {
      tags,
      security: security.session,
      querystring: PunishmentsQuery,
      response: { 200: Type.Array(PunishmentSchema), ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => users.punishments(currentUser(req).id, req.query.offset, req.query.limit),
  });

  app.get('/v1/users/search', {
    schema: {
      tags,
      security: security.session,
      description: 'Username substring search. Admins get full detail of users below their level only.',
      querystring: SearchQuery,
      response: { 200: SearchResponse, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => ({
      users: await users.search(req.query.q, currentUser(req).permissionLevel, req.query.offset, req.query.limit),
    }),
  });

  app.get('/v1/users/:id', {
    schema: {
      tags,
      security: security.publicKeyOrSession,
      params: Type.Object({ id: IdParam }),
      response: { 200: Type.Union([FullUserSchema, PublicUserSchema]), ...errorResponses },
    },
    onRequest: guards.publicKeyOrSession,
    handler: async (req) => users.profile(req.params.id, req.principal.user?.permissionLevel ?? null),
  });
}
