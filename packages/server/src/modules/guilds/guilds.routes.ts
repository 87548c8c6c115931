import {
  BotGuildSchema,
  GuildIdParams,
  GuildPremiumBody,
  GuildPremiumRevokeBody,
  GuildSchema,
  GuildSponsorBody,
  GuildUpsertBody,
  RoomSettingsBody,
  RoomSettingsSchema,
  VanityBody,
  VanityGuildSchema,
} from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import { currentBot, currentUser, type Guards } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import { adminActor } from '../admin/admin.routes.js';
import type { GuildsService, GuildViewer } from './guilds.service.js';

const tags = ['guilds'];
const manage =
  'The guild owner (a linked platform identity is `owner_chatplatform_id`), a sponsor, or Admin and above.';

const viewer = (req: FastifyRequest): GuildViewer => {
  const u = currentUser(req);
  return { userId: u.id, permissionLevel: u.permissionLevel };
};

/**
 * The guild interface (spec 4.3 upsert, 4.4) and `GET /v1/users/me/guilds`. {guild_api_url} is this
 * same app (GUILD_API_URL defaults to PUBLIC_URL), so the paths are plain `/v1/…`.
 */
export function registerGuildsRoutes(app: App, deps: { guilds: GuildsService; guards: Guards }): void {
  const { guilds, guards } = deps;

  app.post('/v1/bot/guilds/:guild_id', {
    schema: {
      tags,
      security: security.bot,
      description:
        'Creates or updates the guild. `name` and `member_count` are required; `owner_chatplatform_id`, `avatar_url` and `prefix` are optional and, omitted, stay as they are. Only the bot that reported the guild first, or an Official bot, may report it again (else 403 ERR_GUILD_OTHER_BOT).',
      params: GuildIdParams,
      body: GuildUpsertBody,
      response: { 200: BotGuildSchema, ...errorResponses },
    },
    onRequest: guards.bot,
    handler: async (req) => guilds.upsert(currentBot(req).id, req.params.guild_id, req.body),
  });

  app.get('/v1/users/me/guilds', {
    schema: {
      tags: ['users', ...tags],
      security: security.session,
      description: 'The guilds owned by your linked identity on the guilds’ platform (platform_a).',
      response: { 200: Type.Array(GuildSchema), ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => guilds.ownedBy(currentUser(req).id),
  });

  app.get('/v1/guilds/:guild_id', {
    schema: {
      tags,
      security: security.session,
      description: `The whole guild record, room settings included. ${manage}`,
      params: GuildIdParams,
      response: { 200: GuildSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => guilds.get(viewer(req), req.params.guild_id),
  });

  app.put('/v1/guilds/:guild_id/vanity', {
    schema: {
      tags,
      security: security.session,
      description: `Sets the vanity invite (needs active guild premium; unique). ${manage}`,
      params: GuildIdParams,
      body: VanityBody,
      response: { 200: VanityGuildSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => guilds.setVanity(viewer(req), req.params.guild_id, req.body.vanity_invite),
  });

  app.put('/v1/guilds/:guild_id/room-settings', {
    schema: {
      tags,
      security: security.session,
      description: `Any of the room settings; omitted ones stay as they are. Answers all of them. ${manage}`,
      params: GuildIdParams,
      body: RoomSettingsBody,
      response: { 200: RoomSettingsSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => guilds.updateRoomSettings(viewer(req), req.params.guild_id, req.body),
  });

  registerAdminGuildRoutes(app, deps);
}

/** Guild premium and sponsors: the operator token or an Admin-or-above session, audited. */
function registerAdminGuildRoutes(app: App, deps: { guilds: GuildsService; guards: Guards }): void {
  const { guilds, guards } = deps;
  const admin = { tags: ['admin', ...tags], security: security.operator, params: GuildIdParams };
  const response = { 200: GuildSchema, ...errorResponses };

  app.post('/v1/admin/guilds/:guild_id/premium', {
    schema: {
      ...admin,
      description: 'Guild premium for `days` (1-3650) from now, replacing any current expiry.',
      body: GuildPremiumBody,
      response,
    },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => guilds.grantPremium(adminActor(req), req.params.guild_id, req.body),
  });

  app.post('/v1/admin/guilds/:guild_id/premium/revoke', {
    schema: {
      ...admin,
      description: 'Ends guild premium; a guild without it is left as is.',
      body: GuildPremiumRevokeBody,
      response,
    },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => guilds.revokePremium(adminActor(req), req.params.guild_id, req.body),
  });

  for (const [verb, add] of [
    ['add', true],
    ['remove', false],
  ] as const) {
    app.post(`/v1/admin/guilds/:guild_id/sponsors/${verb}`, {
      schema: {
        ...admin,
        description: add
          ? 'Makes the user a sponsor: they manage the vanity and room settings like the owner.'
          : 'Ends the user’s sponsorship.',
        body: GuildSponsorBody,
        response,
      },
      onRequest: guards.operatorOrAdmin,
      handler: async (req) => guilds.setSponsor(adminActor(req), req.params.guild_id, req.body, add),
    });
  }
}
