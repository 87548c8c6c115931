import { HttpClient, type HttpClientOptions } from '../http.js';

export interface ParlorClientOptions extends HttpClientOptions {
  /**
   * The base of the guild interface, the server's `GUILD_API_URL` ({guild_api_url} of spec 4.3,
   * 4.4; a trailing slash is ignored). Default `baseUrl`: the server serves the guild routes itself.
   */
  guildApiUrl?: string;
}

export const chatPath = (chatId: number) => `/v1/portal/chats/${chatId}`;
export const guildPath = (guildId: string) => `/v1/guilds/${encodeURIComponent(guildId)}`;
export const trimBase = (url: string) => url.replace(/\/+$/, '');

/**
 * The root of ParlorClient. Its route methods come by area, one class per file of this folder,
 * each extending the one before (base → auth → matchmaking → notifications → bots-guilds → chats
 * → moderation → ParlorClient in ../api.ts): a plain chain keeps the methods' types and doc
 * comments as they are on ParlorClient, which mixins would not.
 */
export abstract class ParlorClientBase extends HttpClient {
  /** The base the guild routes (`/v1/guilds/…`) are sent to: `guildApiUrl`, else `baseUrl`. */
  readonly guildApiUrl: string;

  constructor(opts: ParlorClientOptions) {
    super(opts);
    this.guildApiUrl = opts.guildApiUrl ? trimBase(opts.guildApiUrl) : this.baseUrl;
  }
}
