import { ModerationRoutes } from './api/moderation.js';

export type { ParlorClientOptions } from './api/base.js';
export { BotClient, type BotClientOptions } from './api/bot-client.js';

/**
 * The typed REST client of a Parlor user (docs/api.md). Each method returns the answer body as
 * the server sends it and throws {@link ParlorApiError} on a non-2xx answer. `apiKey` is the
 * public API key, needed by the login routes; the session cookie is kept after `verify`.
 *
 * Its methods are written by area in ./api/ (login and users, matchmaking, notifications, bots
 * and guilds, chats, moderation), each a class this one extends.
 */
export class ParlorClient extends ModerationRoutes {}
