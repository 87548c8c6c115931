import {
  BlockSchema,
  EmptyBody,
  MatchBody,
  MatchLeaveBody,
  MatchLeaveResponse,
  MatchStatisticsSchema,
  MatchStatusSchema,
  OkSchema,
  UserIdBody,
} from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import { currentUser, type Guards, viewerOf } from '../../platform/auth.js';
import type { AppSocket, Realtime } from '../../platform/realtime.js';
import { type App, afterAnswer, errorResponses, security } from '../../platform/routing.js';
import type { BlocksService } from './blocks.service.js';
import type { MatchmakingService } from './matchmaking.service.js';

const tags = ['matchmaking'];

export function registerMatchmakingRoutes(
  app: App,
  deps: { matchmaking: MatchmakingService; blocks: BlocksService; guards: Guards },
) {
  const { matchmaking, blocks, guards } = deps;
  const auth = { security: security.session };

  app.post('/v1/portal/match', {
    schema: {
      tags,
      ...auth,
      description:
        'Queues on every tag at once and answers the search (state searching); when a peer is waiting the pair is made at once and match:found follows the answer.',
      body: MatchBody,
      response: { 200: MatchStatusSchema, ...errorResponses },
    },
    onRequest: guards.anySession,
    handler: async (req, reply) => {
      const u = currentUser(req);
      const { answer, tellCaller } = await matchmaking.enqueue(
        {
          userId: u.id,
          sessionId: viewerOf(req).sessionId,
          stranger: u.stranger,
          matchBlocked: u.matchBlocked,
        },
        req.body.interests,
      );
      if (tellCaller) afterAnswer(reply, tellCaller);
      return answer;
    },
  });

  app.get('/v1/portal/match/status', {
    schema: { tags, ...auth, response: { 200: MatchStatusSchema, ...errorResponses } },
    onRequest: guards.anySession,
    handler: async (req) => matchmaking.status(currentUser(req).id),
  });

  app.post('/v1/portal/match/dequeue', {
    schema: { tags, ...auth, body: EmptyBody, response: { 200: MatchStatusSchema, ...errorResponses } },
    onRequest: guards.anySession,
    handler: async (req) => matchmaking.dequeue(currentUser(req).id),
  });

  app.post('/v1/portal/match/leave', {
    schema: {
      tags,
      ...auth,
      description: 'Leaves (archives) your newest active direct chat, or the one named.',
      body: MatchLeaveBody,
      response: { 200: MatchLeaveResponse, ...errorResponses },
    },
    onRequest: guards.anySession,
    handler: async (req) => matchmaking.leave(currentUser(req).id, req.body?.chat_id),
  });

  app.get('/v1/portal/match/statistics', {
    schema: {
      tags,
      ...auth,
      description: 'Registered sessions only.',
      response: { 200: MatchStatisticsSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async () => matchmaking.statistics(),
  });

  app.post('/v1/portal/strangers/block', {
    schema: {
      tags,
      ...auth,
      description: 'Moderators and above: blocks an anonymous (stranger) account from matchmaking.',
      body: UserIdBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => {
      const u = currentUser(req);
      await blocks.blockStranger({ id: u.id, permissionLevel: u.permissionLevel }, req.body.user_id);
      return { ok: true };
    },
  });

  app.get('/v1/users/me/blocks', {
    schema: { tags, ...auth, response: { 200: Type.Object({ blocks: Type.Array(BlockSchema) }), ...errorResponses } },
    onRequest: guards.anySession,
    handler: async (req) => ({ blocks: await blocks.list(currentUser(req).id) }),
  });

  app.post('/v1/users/me/blocks/create', {
    schema: {
      tags,
      ...auth,
      description: 'Blocked users are never matched with you. At most 1,000 blocks: past it, 409 ERR_BLOCK_LIMIT.',
      body: UserIdBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    onRequest: guards.anySession,
    handler: async (req) => {
      await blocks.block(currentUser(req).id, req.body.user_id);
      return { ok: true };
    },
  });

  app.post('/v1/users/me/blocks/delete', {
    schema: { tags, ...auth, body: UserIdBody, response: { 200: OkSchema, ...errorResponses } },
    onRequest: guards.anySession,
    handler: async (req) => ({ ok: await blocks.unblock(currentUser(req).id, req.body.user_id) }),
  });
}

/** Sockets make their users count as online (for ERR_MATCH_NO_PEERS_ONLINE and statistics). */
export function registerMatchmakingSockets(realtime: Realtime, matchmaking: MatchmakingService) {
  realtime.io.on('connection', (socket: AppSocket) => {
    void matchmaking.connected(socket.data.userId).catch(() => {});
  });
}

/** The users with a socket on this node, for the online refresh. */
export function localUserIds(realtime: Realtime): number[] {
  return [...realtime.io.of('/').sockets.values()]
    .map((s) => (s as AppSocket).data.userId)
    .filter((id) => id !== undefined);
}
