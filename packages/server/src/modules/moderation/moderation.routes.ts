import {
  ChatIdParams,
  OkSchema,
  PunishBody,
  PunishResponse,
  ReasonBody,
  TargetBody,
  TimeoutBody,
} from '@parlor/protocol';
import type { TSchema } from '@sinclair/typebox';
import { currentUser, type Guards } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import { adminActor } from '../admin/admin.routes.js';
import type { ChatActor, ModerationService } from './moderation.service.js';

const chatBase = '/v1/portal/chats/:chat_id';

export function registerModerationRoutes(
  app: App,
  { moderation, guards }: { moderation: ModerationService; guards: Guards },
) {
  const actorOf = (req: Parameters<typeof currentUser>[0]): ChatActor => {
    const u = currentUser(req);
    return { userId: u.id, level: u.permissionLevel };
  };

  // Chat moderation (spec 4.6 rules 2-3, 4.8): the chat owner, or staff who outrank the owner
  // (mute and unmute: the chat owner or Admin and above).
  const chatRoute = <B extends TSchema>(
    path: string,
    body: B,
    description: string,
    run: (actor: ChatActor, chatId: number, body: never) => Promise<unknown>,
  ) => {
    app.post(`${chatBase}/${path}`, {
      schema: {
        tags: ['moderation'],
        security: security.session,
        description,
        params: ChatIdParams,
        body,
        response: { 200: OkSchema, ...errorResponses },
      },
      onRequest: guards.session,
      handler: async (req) => {
        await run(actorOf(req), (req.params as { chat_id: number }).chat_id, req.body as never);
        return { ok: true };
      },
    });
  };
  chatRoute(
    'kick',
    ReasonBody,
    'Removes a member now; a system message records it. An archived chat: 403 ERR_CHAT_READ_ONLY.',
    (a, c, b) => moderation.chat.kick(a, c, b),
  );
  chatRoute(
    'ban',
    PunishBody,
    'Removes a member and refuses rejoining (permanent unless duration). An archived chat: 403 ERR_CHAT_READ_ONLY.',
    (a, c, b) => moderation.chat.ban(a, c, b),
  );
  chatRoute('unban', ReasonBody, 'Lifts a chat ban.', (a, c, b) => moderation.chat.unban(a, c, b));
  chatRoute(
    'mute',
    PunishBody,
    'Mutes in this chat (permanent unless duration): the chat owner or Admin and above. An archived chat: 403 ERR_CHAT_READ_ONLY.',
    (a, c, b) => moderation.chat.mute(a, c, b),
  );
  chatRoute(
    'unmute',
    TargetBody,
    'Lifts this chat’s mutes (not a hard mute); user:unmuted to the chat. Authorised as mute.',
    (a, c, b) => moderation.chat.unmute(a, c, b),
  );
  chatRoute(
    'warn',
    ReasonBody,
    'Warns the user; a system message records it. The user is a member or left within 24 hours. An archived chat: 403 ERR_CHAT_READ_ONLY.',
    (a, c, b) => moderation.chat.warn(a, c, b),
  );
  chatRoute(
    'timeout',
    TimeoutBody,
    'Times the user out platform-wide (60 s to 30 days). The user is a member or left within 24 hours.',
    (a, c, b) => moderation.chat.timeout(a, c, b),
  );

  app.post('/v1/portal/hard-mute', {
    schema: {
      tags: ['moderation'],
      security: security.session,
      description: 'Mutes in every chat (Moderators and above).',
      body: PunishBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => {
      await moderation.hardMute(actorOf(req), req.body);
      return { ok: true };
    },
  });
  app.post('/v1/portal/hard-unmute', {
    schema: {
      tags: ['moderation'],
      security: security.session,
      body: TargetBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => {
      await moderation.hardUnmute(actorOf(req), req.body);
      return { ok: true };
    },
  });

  // Platform punishments (spec 4.8): the operator token or Admin and above, under the level rules.
  const admin = { tags: ['admin'], security: security.operator };
  app.post('/v1/admin/punishments/ban', {
    schema: {
      ...admin,
      description: 'Bans platform-wide: sessions end, login refused (permanent unless duration).',
      body: PunishBody,
      response: { 200: PunishResponse, ...errorResponses },
    },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return { ok: true, punishment: await moderation.platform.ban(actor, level, req.body.user_id, req.body) };
    },
  });
  app.post('/v1/admin/punishments/unban', {
    schema: { ...admin, body: ReasonBody, response: { 200: PunishResponse, ...errorResponses } },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      await moderation.platform.unban(actor, level, req.body.user_id, req.body);
      return { ok: true };
    },
  });
  app.post('/v1/admin/punishments/timeout', {
    schema: { ...admin, body: TimeoutBody, response: { 200: PunishResponse, ...errorResponses } },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return { ok: true, punishment: await moderation.platform.timeout(actor, level, req.body.user_id, req.body) };
    },
  });
  app.post('/v1/admin/punishments/warn', {
    schema: { ...admin, body: ReasonBody, response: { 200: PunishResponse, ...errorResponses } },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return { ok: true, punishment: await moderation.platform.warn(actor, level, req.body.user_id, req.body) };
    },
  });
}
