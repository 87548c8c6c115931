import type {
  AnyBot,
  AppStatisticsAnswer,
  BotListAnswer,
  BotSearchAnswer,
  BotStatisticsAnswer,
  ChatStatisticsAnswer,
  Guild,
  HealthAnswer,
  PageInput,
  RoomSettings,
  RoomSettingsBody,
  SearchInput,
  UserStatisticsAnswer,
  VanityGuild,
} from '../types.js';
import { guildPath } from './base.js';
import { NotificationRoutes } from './notifications.js';

/** ParlorClient's bot, statistics, health and guild routes (spec 4.4). */
export abstract class BotGuildRoutes extends NotificationRoutes {
  // Bots and statistics (K: the public key; an Admin session sees full bot profiles)

  /** `GET /v1/bots` → `{bots}`. */
  bots(page: PageInput = {}): Promise<BotListAnswer> {
    return this.get('/v1/bots', { ...page });
  }

  /** `GET /v1/bots/search?q=` → `{bots}`. */
  searchBots(input: SearchInput): Promise<BotSearchAnswer> {
    return this.get('/v1/bots/search', { ...input });
  }

  /** `GET /v1/bots/{id}` → the bot. */
  bot(botId: number): Promise<AnyBot> {
    return this.get(`/v1/bots/${botId}`);
  }

  /** `GET /v1/statistics/users`. */
  userStatistics(): Promise<UserStatisticsAnswer> {
    return this.get('/v1/statistics/users');
  }

  /** `GET /v1/statistics/bots`. */
  botStatistics(): Promise<BotStatisticsAnswer> {
    return this.get('/v1/statistics/bots');
  }

  /** `GET /v1/statistics/chats`: running room browsers, their viewers and controllers. */
  chatStatistics(): Promise<ChatStatisticsAnswer> {
    return this.get('/v1/statistics/chats');
  }

  /** `GET /v1/statistics/app`. */
  appStatistics(): Promise<AppStatisticsAnswer> {
    return this.get('/v1/statistics/app');
  }

  /** `GET /v1/health` (no key needed). */
  health(): Promise<HealthAnswer> {
    return this.get('/v1/health');
  }

  // Guilds (spec 4.4, on {guild_api_url}; docs/api.md "Guilds")

  /** `GET /v1/users/me/guilds`: the guilds your `platform_a` identity owns (a bare array, oldest first). */
  guilds(): Promise<Guild[]> {
    return this.get('/v1/users/me/guilds');
  }

  /** `GET {guild_api_url}/v1/guilds/{guild_id}` → the guild, `room_settings` included (owner, sponsor or Admin). */
  getGuild(guildId: string): Promise<Guild> {
    return this.request('GET', guildPath(guildId), { base: this.guildApiUrl });
  }

  /** `PUT {guild_api_url}/v1/guilds/{guild_id}/vanity` → the guild's spec 4.4 fields (needs guild premium). */
  setVanity(guildId: string, vanityInvite: string): Promise<VanityGuild> {
    return this.request('PUT', `${guildPath(guildId)}/vanity`, {
      body: { vanity_invite: vanityInvite },
      base: this.guildApiUrl,
    });
  }

  /** `PUT {guild_api_url}/v1/guilds/{guild_id}/room-settings` → all the room settings (omitted ones stay). */
  updateRoomSettings(guildId: string, body: RoomSettingsBody): Promise<RoomSettings> {
    return this.request('PUT', `${guildPath(guildId)}/room-settings`, { body, base: this.guildApiUrl });
  }
}
