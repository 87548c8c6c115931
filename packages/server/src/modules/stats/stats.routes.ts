import { AppStatistics, BotStatistics, ChatStatistics, HealthResponse, UserStatistics } from '@parlor/protocol';
import type { Guards } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import type { StatsService } from './stats.service.js';

const tags = ['statistics'];

export function registerStatsRoutes(app: App, { stats, guards }: { stats: StatsService; guards: Guards }) {
  for (const prefix of ['/v1', '']) {
    app.get(`${prefix}/statistics/users`, {
      schema: { tags, security: security.publicKey, response: { 200: UserStatistics, ...errorResponses } },
      onRequest: guards.publicKey,
      handler: async () => stats.users(),
    });
    app.get(`${prefix}/statistics/bots`, {
      schema: { tags, security: security.publicKey, response: { 200: BotStatistics, ...errorResponses } },
      onRequest: guards.publicKey,
      handler: async () => stats.bots(),
    });
    app.get(`${prefix}/statistics/chats`, {
      schema: { tags, security: security.publicKey, response: { 200: ChatStatistics, ...errorResponses } },
      onRequest: guards.publicKey,
      handler: async () => stats.chats(),
    });
    app.get(`${prefix}/statistics/app`, {
      schema: { tags, security: security.publicKey, response: { 200: AppStatistics, ...errorResponses } },
      onRequest: guards.publicKey,
      handler: async () => stats.app(),
    });
  }

  app.get('/v1/health', {
    schema: {
      tags: ['health'],
      description: 'Public. 503 when the database or the coordination store does not answer.',
      response: { 200: HealthResponse, ...errorResponses },
    },
    handler: async () => stats.health(),
  });
}
