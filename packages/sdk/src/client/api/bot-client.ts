import { HttpClient, type HttpClientOptions } from '../http.js';
import type {
  BotBatchAnswer,
  BotBatchBody,
  BotGuild,
  BotLoginCodeAnswer,
  BotLoginCodeBody,
  BotProfile,
  BotUpdateBody,
  BotUser,
  BotUserUpdated,
  GuildUpsertBody,
  PlatformIdentity,
  SendCodeAnswer,
} from '../types.js';
import { trimBase } from './base.js';

export interface BotClientOptions extends Omit<HttpClientOptions, 'apiKey' | 'session'> {
  /** The bot's key (`pbk_…`), sent as `X-API-Key`. */
  apiKey: string;
  /** The base of the guild interface (`GUILD_API_URL`), as for {@link ParlorClientOptions}; default `baseUrl`. */
  guildApiUrl?: string;
}

/** The typed REST client of a bot (B routes, authenticated by the bot key). */
export class BotClient extends HttpClient {
  /** The base the guild report (`/v1/bot/guilds/…`) is sent to: `guildApiUrl`, else `baseUrl`. */
  readonly guildApiUrl: string;

  constructor(opts: BotClientOptions) {
    super({ ...opts, session: null });
    this.guildApiUrl = opts.guildApiUrl ? trimBase(opts.guildApiUrl) : this.baseUrl;
  }

  /** `POST /v1/authentication/bot/login-code`: the pending web code of an identity, or nulls. */
  loginCode(body: BotLoginCodeBody): Promise<BotLoginCodeAnswer> {
    return this.post('/v1/authentication/bot/login-code', body);
  }

  /** `POST /v1/authentication/bot/send-code`: a bot-initiated login code for an existing account. */
  sendCode(identity: PlatformIdentity): Promise<SendCodeAnswer> {
    return this.post('/v1/authentication/bot/send-code', identity);
  }

  /** `GET /v1/bot/me`: the bot's own profile. */
  me(): Promise<BotProfile> {
    return this.get('/v1/bot/me');
  }

  /** `POST /v1/bot/me/update` → the profile. */
  updateMe(body: BotUpdateBody): Promise<BotProfile> {
    return this.post('/v1/bot/me/update', body);
  }

  /** `POST /v1/bot/batch` → `{recorded}`. */
  batch(body: BotBatchBody): Promise<BotBatchAnswer> {
    return this.post('/v1/bot/batch', body);
  }

  /** `GET /v1/bot/users/{user_id}`: the bot-visible user. */
  user(userId: number): Promise<BotUser> {
    return this.get(`/v1/bot/users/${userId}`);
  }

  /** `POST /v1/bot/users/{user_id}/update {username}`. */
  updateUser(userId: number, body: { username?: string }): Promise<BotUserUpdated> {
    return this.post(`/v1/bot/users/${userId}/update`, body);
  }

  /**
   * `POST {guild_api_url}/v1/bot/guilds/{guild_id}`: creates or updates the guild (spec 4.3) → its
   * spec 4.3 fields. Another bot's guild answers 403 `ERR_GUILD_OTHER_BOT` (Official bots excepted).
   */
  upsertGuild(guildId: string, body: GuildUpsertBody): Promise<BotGuild> {
    return this.request('POST', `/v1/bot/guilds/${encodeURIComponent(guildId)}`, { body, base: this.guildApiUrl });
  }
}
