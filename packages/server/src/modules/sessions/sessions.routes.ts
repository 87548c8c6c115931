import { EmptyBody, SessionsResponse, TokenSuffixParam } from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import { currentSession, type Guards } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import type { SessionsService } from './sessions.service.js';

const tags = ['sessions'];

export function registerSessionsRoutes(app: App, { sessions, guards }: { sessions: SessionsService; guards: Guards }) {
  app.get('/v1/users/me/sessions', {
    schema: { tags, security: security.session, response: { 200: SessionsResponse, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => {
      const s = currentSession(req);
      return sessions.list(s.userId, s.id);
    },
  });

  app.post('/v1/users/me/sessions/:token_suffix/destroy', {
    schema: {
      tags,
      security: security.session,
      description: 'Ends another session of yours. A timed-out user may too.',
      params: TokenSuffixParam,
      body: EmptyBody,
      response: { 200: Type.Object({ destroyed: Type.Boolean() }), ...errorResponses },
    },
    // Ending one's own sessions is signing out: a timed-out user may (docs/api.md, Moderation).
    onRequest: guards.sessionSigningOut,
    config: { ownWriteLimit: true },
    handler: async (req) => {
      const s = currentSession(req);
      return { destroyed: await sessions.destroyBySuffix(s.userId, s.id, req.params.token_suffix) };
    },
  });

  app.post('/v1/users/me/sessions/destroy', {
    schema: {
      tags,
      security: security.session,
      description: 'Ends every session but the current one. A timed-out user may too.',
      body: EmptyBody,
      response: { 200: Type.Object({ destroyed: Type.Integer() }), ...errorResponses },
    },
    // As above: a timed-out user may end its other sessions.
    onRequest: guards.sessionSigningOut,
    config: { ownWriteLimit: true },
    handler: async (req) => {
      const s = currentSession(req);
      return { destroyed: await sessions.destroyOthers(s.userId, s.id) };
    },
  });
}
