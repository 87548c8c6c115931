import { isApiError } from './errors.js';
import { HttpClient, type HttpClientOptions } from './http.js';
import type {
  ActivityAnswer,
  BotBatchAnswer,
  BotBatchBody,
  BotGuild,
  BotLoginCodeAnswer,
  BotLoginCodeBody,
  BotProfile,
  BotUpdateBody,
  BotUser,
  BotUserUpdated,
  ChatAnswer,
  ChatConfigInput,
  ChatKeyAnswer,
  ChatsAnswer,
  CreateChatInput,
  CreateInviteInput,
  DeletedAnswer,
  Guild,
  GuildUpsertBody,
  HistoryInput,
  InviteAnswer,
  InvitesAnswer,
  LookupAnswer,
  MessagesAnswer,
  OkAnswer,
  PageInput,
  PlatformIdentity,
  Punishment,
  RegisterKeyAnswer,
  RequestCodeAnswer,
  RoomSettings,
  RoomSettingsBody,
  SendCodeAnswer,
  SendMessageAnswer,
  SessionsAnswer,
  ShareKeysAnswer,
  ShareKeysBody,
  SubscriptionStatus,
  UpdateMeAnswer,
  UpdateMeBody,
  UserAnswer,
  VanityGuild,
  VerifyAnswer,
} from './types.js';

export interface ParlorClientOptions extends HttpClientOptions {
  /**
   * The base of the guild interface, the server's `GUILD_API_URL` ({guild_api_url} of spec 4.3,
   * 4.4; a trailing slash is ignored). Default `baseUrl`: the server serves the guild routes itself.
   */
  guildApiUrl?: string;
}

const chatPath = (chatId: number) => `/v1/portal/chats/${chatId}`;
const guildPath = (guildId: string) => `/v1/guilds/${encodeURIComponent(guildId)}`;
const trimBase = (url: string) => url.replace(/\/+$/, '');

/**
 * The typed REST client of a Parlor user (docs/api.md). Each method returns the answer body as
 * the server sends it and throws {@link ParlorApiError} on a non-2xx answer. `apiKey` is the
 * public API key, needed by the login routes; the session cookie is kept after `verify`.
 */
export class ParlorClient extends HttpClient {
  /** The base the guild routes (`/v1/guilds/…`) are sent to: `guildApiUrl`, else `baseUrl`. */
  readonly guildApiUrl: string;

  constructor(opts: ParlorClientOptions) {
    super(opts);
    this.guildApiUrl = opts.guildApiUrl ? trimBase(opts.guildApiUrl) : this.baseUrl;
  }

  // Login (spec 4.1, 5)

  /** `POST /v1/authentication/lookup`: the linked platforms of a username (K). */
  lookup(username: string): Promise<LookupAnswer> {
    return this.post('/v1/authentication/lookup', { username });
  }

  /** `POST /v1/authentication/request`: starts a web login; a bot delivers the code (K). */
  requestCode(identity: PlatformIdentity): Promise<RequestCodeAnswer> {
    return this.post('/v1/authentication/request', identity);
  }

  /** `POST /v1/authentication/verify`: logs in with a code; the session cookie is kept (K). */
  verify(code: string): Promise<VerifyAnswer> {
    return this.post('/v1/authentication/verify', { code });
  }

  /**
   * `POST /v1/authentication/logout`: ends this session and forgets its cookie. A session that had
   * already ended (401 `ERR_UNAUTHENTICATED`, thrown) is forgotten too.
   */
  async logout(): Promise<OkAnswer> {
    try {
      const answer = await this.post<OkAnswer>('/v1/authentication/logout');
      this.setSession(null);
      return answer;
    } catch (error) {
      if (isApiError(error, 'ERR_UNAUTHENTICATED')) this.setSession(null);
      throw error;
    }
  }

  // Users and sessions (spec 2.1, 2.5)

  /** `GET /v1/users/me` → `{user}`. */
  me(): Promise<UserAnswer> {
    return this.get('/v1/users/me');
  }

  /** `POST /v1/users/me/update` → `{user, errors}` (fields succeed or fail independently). */
  updateMe(body: UpdateMeBody): Promise<UpdateMeAnswer> {
    return this.post('/v1/users/me/update', body);
  }

  /** `GET /v1/users/me/subscription`. */
  subscription(): Promise<SubscriptionStatus> {
    return this.get('/v1/users/me/subscription');
  }

  /** `GET /v1/users/me/punishments` (a bare array, newest first). */
  punishments(page: PageInput = {}): Promise<Punishment[]> {
    return this.get('/v1/users/me/punishments', { ...page });
  }

  /** `GET /v1/users/me/sessions` → `{sessions, history}`. */
  sessions(): Promise<SessionsAnswer> {
    return this.get('/v1/users/me/sessions');
  }

  /** `POST /v1/users/me/sessions/{token_suffix}/destroy` → `{destroyed}`. */
  destroySession(tokenSuffix: string): Promise<{ destroyed: boolean }> {
    return this.post(`/v1/users/me/sessions/${encodeURIComponent(tokenSuffix)}/destroy`);
  }

  /** `POST /v1/users/me/sessions/destroy`: ends every other session → `{destroyed}`. */
  destroyOtherSessions(): Promise<{ destroyed: number }> {
    return this.post('/v1/users/me/sessions/destroy');
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

  // Chats

  /** `POST /v1/portal/chats/create` → `{chat}` (needs a chat slot: spec 2.11). */
  createChat(input: CreateChatInput): Promise<ChatAnswer> {
    return this.post('/v1/portal/chats/create', input);
  }

  /** `GET /v1/portal/chats` → `{chats}` you are a member of. */
  listChats(): Promise<ChatsAnswer> {
    return this.get('/v1/portal/chats');
  }

  /** `GET /v1/portal/chats/{chat_id}` → `{chat}`. */
  getChat(chatId: number): Promise<ChatAnswer> {
    return this.get(chatPath(chatId));
  }

  /** `POST /v1/portal/chats/{chat_id}/config/update` → `{chat}` (owner or Admin). */
  updateChatConfig(chatId: number, input: ChatConfigInput): Promise<ChatAnswer> {
    return this.post(`${chatPath(chatId)}/config/update`, input);
  }

  /** `POST /v1/portal/chats/{chat_id}/delete` → `{ok}` (owner or Admin). */
  deleteChat(chatId: number): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/delete`);
  }

  /** `POST /v1/portal/chats/{chat_id}/invites/create` → `{invite}`. */
  createInvite(chatId: number, input: CreateInviteInput = {}): Promise<InviteAnswer> {
    return this.post(`${chatPath(chatId)}/invites/create`, input);
  }

  /** `GET /v1/portal/chats/{chat_id}/invites` → `{invites}` (live ones; owner or Admin). */
  listInvites(chatId: number): Promise<InvitesAnswer> {
    return this.get(`${chatPath(chatId)}/invites`);
  }

  /** `POST /v1/portal/chats/{chat_id}/invites/{code}/delete` → `{ok}`. */
  deleteInvite(chatId: number, code: string): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/invites/${encodeURIComponent(code)}/delete`);
  }

  /** `GET /v1/portal/chats/{chat_id}/activity` → `{activity}`, newest first. */
  activity(chatId: number, page: PageInput = {}): Promise<ActivityAnswer> {
    return this.get(`${chatPath(chatId)}/activity`, { ...page });
  }

  // Room VM (docs/api.md "Room VM"; the socket side is RoomVm in vm.ts)

  /** `POST /v1/portal/chats/{chat_id}/start` → `{ok}`: starts the chat's shared browser (running: at once). */
  startRoom(chatId: number): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/start`, {});
  }

  /** `POST /v1/portal/chats/{chat_id}/stop` → `{ok}`: stops it (stopped already: `{ok}` too). */
  stopRoom(chatId: number): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/stop`, {});
  }

  // Keys (DESIGN.md 7)

  /** `POST /v1/portal/keys`: registers this session's X25519 public key (base64). */
  registerKey(publicKey: string): Promise<RegisterKeyAnswer> {
    return this.post('/v1/portal/keys', { public_key: publicKey });
  }

  /** `GET /v1/portal/chats/{chat_id}/keys` → `{epoch, envelope, key_ring}`. */
  chatKey(chatId: number): Promise<ChatKeyAnswer> {
    return this.get(`${chatPath(chatId)}/keys`);
  }

  /** `POST /v1/portal/chats/{chat_id}/keys/share` → `{epoch, stored}`. */
  shareKeys(chatId: number, body: ShareKeysBody): Promise<ShareKeysAnswer> {
    return this.post(`${chatPath(chatId)}/keys/share`, body);
  }

  // Messages

  /** `POST /v1/portal/chats/{chat_id}/messages`: `content` is a ciphertext bundle → `{id}`. */
  sendMessage(chatId: number, content: string): Promise<SendMessageAnswer> {
    return this.post(`${chatPath(chatId)}/messages`, { content });
  }

  /** `GET /v1/portal/chats/{chat_id}/messages` → `{messages}`, newest first. */
  history(chatId: number, input: HistoryInput = {}): Promise<MessagesAnswer> {
    return this.get(`${chatPath(chatId)}/messages`, { ...input });
  }

  /** `POST …/messages/delete {ids}` → `{deleted, deleted_ids}`. */
  deleteMessages(chatId: number, ids: string[]): Promise<DeletedAnswer> {
    return this.post(`${chatPath(chatId)}/messages/delete`, { ids });
  }

  /** `POST …/messages/delete-mine` → `{deleted, deleted_ids}`. */
  deleteMine(chatId: number): Promise<DeletedAnswer> {
    return this.post(`${chatPath(chatId)}/messages/delete-mine`);
  }

  /** `POST …/messages/delete-last {count}` → `{deleted, deleted_ids}` (owner, Moderators and above). */
  deleteLast(chatId: number, count: number): Promise<DeletedAnswer> {
    return this.post(`${chatPath(chatId)}/messages/delete-last`, { count });
  }
}

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
