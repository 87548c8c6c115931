import {
  ActivitySchema,
  ChatConfigBody,
  ChatEnvelope,
  ChatIdParams,
  ChatListResponse,
  CreateChatBody,
  CreateInviteBody,
  EmptyBody,
  InviteParams,
  InviteSchema,
  OkSchema,
  PageQuery,
} from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { type Guards, viewerOf } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import type { ChatsService } from './chats.service.js';

// The socket handlers (room:join, room:leave, connect and disconnect) are in chats.sockets.ts.
export { registerChatSockets } from './chats.sockets.js';

const tags = ['chats'];
const base = '/v1/portal/chats';

/**
 * The onRequest hook of a `:chat_id` route a stranger may use, after `guards.anySession`: a
 * stranger naming a chat outside its reach (docs/api.md, Strangers) is told 401 here, whether the
 * chat exists or not, before the body is read or validated and before the write limit's
 * preHandler or a send's own limits spend anything (chats.service `assertStrangerReach`). A
 * registered caller passes at once, without a promise: the message send is a hot path.
 */
export function strangerReachHook(chats: Pick<ChatsService, 'assertStrangerReach'>) {
  return (req: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void => {
    const viewer = viewerOf(req);
    if (!viewer.stranger) {
      done();
      return;
    }
    chats.assertStrangerReach(viewer, (req.params as { chat_id?: unknown }).chat_id).then(() => done(), done);
  };
}

export function registerChatsRoutes(app: App, { chats, guards }: { chats: ChatsService; guards: Guards }) {
  const auth = { security: security.session };
  const strangerReach = strangerReachHook(chats);

  app.post(`${base}/create`, {
    schema: { tags, ...auth, body: CreateChatBody, response: { 200: ChatEnvelope, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => ({ chat: await chats.create(viewerOf(req), req.body) }),
  });

  app.get(base, {
    schema: {
      tags,
      ...auth,
      description: 'Chats you are a member of, archived direct chats included.',
      response: { 200: ChatListResponse, ...errorResponses },
    },
    onRequest: guards.anySession,
    handler: async (req) => ({ chats: await chats.list(viewerOf(req).userId) }),
  });

  app.get(`${base}/:chat_id`, {
    schema: { tags, ...auth, params: ChatIdParams, response: { 200: ChatEnvelope, ...errorResponses } },
    onRequest: [guards.anySession, strangerReach],
    handler: async (req) => ({ chat: await chats.get(viewerOf(req), req.params.chat_id) }),
  });

  app.post(`${base}/:chat_id/config/update`, {
    schema: {
      tags,
      ...auth,
      params: ChatIdParams,
      body: ChatConfigBody,
      response: { 200: ChatEnvelope, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => ({ chat: await chats.updateConfig(viewerOf(req), req.params.chat_id, req.body) }),
  });

  app.post(`${base}/:chat_id/delete`, {
    schema: { tags, ...auth, params: ChatIdParams, body: EmptyBody, response: { 200: OkSchema, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => {
      await chats.remove(viewerOf(req), req.params.chat_id);
      return { ok: true };
    },
  });

  app.post(`${base}/:chat_id/invites/create`, {
    schema: {
      tags,
      ...auth,
      description: 'At most 1,000 live invites per chat: past it, 409 ERR_INVITE_LIMIT.',
      params: ChatIdParams,
      body: CreateInviteBody,
      response: { 200: Type.Object({ invite: InviteSchema }), ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => ({ invite: await chats.createInvite(viewerOf(req), req.params.chat_id, req.body ?? {}) }),
  });

  app.get(`${base}/:chat_id/invites`, {
    schema: {
      tags,
      ...auth,
      params: ChatIdParams,
      response: { 200: Type.Object({ invites: Type.Array(InviteSchema) }), ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => ({ invites: await chats.invites(viewerOf(req), req.params.chat_id) }),
  });

  app.post(`${base}/:chat_id/invites/:code/delete`, {
    schema: { tags, ...auth, params: InviteParams, body: EmptyBody, response: { 200: OkSchema, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => {
      await chats.deleteInvite(viewerOf(req), req.params.chat_id, req.params.code);
      return { ok: true };
    },
  });

  app.get(`${base}/:chat_id/activity`, {
    schema: {
      tags,
      ...auth,
      description:
        'Membership history: join (with method and invite code), leave, kick, ban. The chat owner; Moderators and above for public and official chats, Admins and above for private and direct ones.',
      params: ChatIdParams,
      querystring: PageQuery,
      response: { 200: Type.Object({ activity: Type.Array(ActivitySchema) }), ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => ({
      activity: await chats.activity(viewerOf(req), req.params.chat_id, req.query.offset, req.query.limit),
    }),
  });
}
