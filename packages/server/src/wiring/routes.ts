import { registerAdminRoutes } from '../modules/admin/admin.routes.js';
import { registerAuthRoutes } from '../modules/auth/auth.routes.js';
import { registerBotRoutes, registerPublicBotRoutes } from '../modules/bots/bots.routes.js';
import { registerChatSockets, registerChatsRoutes } from '../modules/chats/chats.routes.js';
import { registerGuildsRoutes } from '../modules/guilds/guilds.routes.js';
import { registerKeysRoutes } from '../modules/keys/keys.routes.js';
import { registerMatchmakingRoutes, registerMatchmakingSockets } from '../modules/matchmaking/matchmaking.routes.js';
import { registerMessagesRoutes } from '../modules/messages/messages.routes.js';
import { registerModerationRoutes } from '../modules/moderation/moderation.routes.js';
import {
  registerAdminNotificationsRoutes,
  registerNotificationsRoutes,
} from '../modules/notifications/notifications.routes.js';
import { registerSessionsRoutes } from '../modules/sessions/sessions.routes.js';
import { registerStatsRoutes } from '../modules/stats/stats.routes.js';
import { registerSubscriptionsRoutes } from '../modules/subscriptions/subscriptions.routes.js';
import { registerAvatarRoutes } from '../modules/users/avatars.routes.js';
import { registerUsersRoutes } from '../modules/users/users.routes.js';
import { registerVmRoutes, registerVmSockets } from '../modules/vm/vm.routes.js';
import type { Guards } from '../platform/auth.js';
import type { Config } from '../platform/config.js';
import type { App } from '../platform/routing.js';
import type { Services } from './services.js';

/** Every module's HTTP routes and socket handlers, each given only the services it calls. */
export function registerRoutes(app: App, s: Services, guards: Guards, config: Readonly<Config>) {
  registerAuthRoutes(app, { auth: s.auth, guards, config, logout: s.sessions.logout });
  registerUsersRoutes(app, { users: s.users, guards });
  registerSessionsRoutes(app, { sessions: s.sessions, guards });
  registerBotRoutes(app, { bots: s.bots, users: s.users, guards });
  registerPublicBotRoutes(app, { bots: s.bots, guards });
  registerStatsRoutes(app, { stats: s.stats, guards });
  registerAdminRoutes(app, { admin: s.admin, bots: s.bots, guards });
  registerChatsRoutes(app, { chats: s.chats, guards });
  registerKeysRoutes(app, { keys: s.keys, chats: s.chats, guards });
  registerMessagesRoutes(app, { messages: s.messages, chats: s.chats, guards });
  registerChatSockets(s.realtime, s.chats, app.log);
  registerMatchmakingRoutes(app, { matchmaking: s.matchmaking, blocks: s.blocks, guards });
  registerMatchmakingSockets(s.realtime, s.matchmaking);
  registerModerationRoutes(app, { moderation: s.moderation, guards });
  registerVmRoutes(app, { vm: s.vm, guards });
  registerVmSockets(s.realtime, s.vm);
  registerGuildsRoutes(app, { guilds: s.guilds, guards });
  registerNotificationsRoutes(app, { notifications: s.notifications, guards });
  registerAdminNotificationsRoutes(app, { notifications: s.notifications, guards });
  registerSubscriptionsRoutes(app, { subscriptions: s.subscriptions, guards });
  registerAvatarRoutes(app);
}
