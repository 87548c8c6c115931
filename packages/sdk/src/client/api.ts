import { isApiError } from './errors.js';
import { HttpClient, type HttpClientOptions } from './http.js';
import type {
  ActivityAnswer,
  AnyBot,
  AppStatisticsAnswer,
  BlocksAnswer,
  BotBatchAnswer,
  BotBatchBody,
  BotGuild,
  BotListAnswer,
  BotLoginCodeAnswer,
  BotLoginCodeBody,
  BotProfile,
  BotSearchAnswer,
  BotStatisticsAnswer,
  BotUpdateBody,
  BotUser,
  BotUserUpdated,
  ChatAnswer,
  ChatConfigInput,
  ChatKeyAnswer,
  ChatStatisticsAnswer,
  ChatsAnswer,
  CreateChatInput,
  CreateInviteInput,
  DeletedAnswer,
  Guild,
  GuildUpsertBody,
  HealthAnswer,
  HistoryInput,
  InviteAnswer,
  InvitesAnswer,
  LookupAnswer,
  MarkedAnswer,
  MatchLeaveAnswer,
  MatchStatistics,
  MatchStatus,
  MessagesAnswer,
  Notification,
  NotificationsInput,
  NotificationsPage,
  OkAnswer,
  PageInput,
  PlatformIdentity,
  PunishBody,
  Punishment,
  ReasonBody,
  RegisterKeyAnswer,
  RequestCodeAnswer,
  RoomSettings,
  RoomSettingsBody,
  SearchInput,
  SendCodeAnswer,
  SendMessageAnswer,
  SessionsAnswer,
  ShareKeysAnswer,
  ShareKeysBody,
  StrangerAnswer,
  SubscriptionStatus,
  TargetInput,
  TimeoutBody,
  UnreadCountAnswer,
  UpdateMeAnswer,
  UpdateMeBody,
  UserAnswer,
  UserProfile,
  UserSearchAnswer,
  UserStatisticsAnswer,
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
   * `POST /v1/portal/stranger`: an anonymous session that may match, use its direct chats and keys,
   * nothing else; its session cookie is kept (K) → `{user: {id, username, stranger: true}}`.
   */
  stranger(): Promise<StrangerAnswer> {
    return this.post('/v1/portal/stranger');
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

  /** `GET /v1/users/search?q=` → `{users}` (full detail of users below an Admin caller's level). */
  searchUsers(input: SearchInput): Promise<UserSearchAnswer> {
    return this.get('/v1/users/search', { ...input });
  }

  /** `GET /v1/users/{id}`: the public profile, or the full one for an Admin above the user (K or session). */
  user(userId: number): Promise<UserProfile> {
    return this.get(`/v1/users/${userId}`);
  }

  // Blocks and matchmaking (spec 2.8)

  /** `GET /v1/users/me/blocks` → `{blocks}`. */
  blocks(): Promise<BlocksAnswer> {
    return this.get('/v1/users/me/blocks');
  }

  /** `POST /v1/users/me/blocks/create {user_id}` → `{ok}`: never matched with that user (409 `ERR_BLOCK_LIMIT` past 1,000). */
  block(userId: number): Promise<OkAnswer> {
    return this.post('/v1/users/me/blocks/create', { user_id: userId });
  }

  /** `POST /v1/users/me/blocks/delete {user_id}` → `{ok}` (false: there was no such block). */
  unblock(userId: number): Promise<OkAnswer> {
    return this.post('/v1/users/me/blocks/delete', { user_id: userId });
  }

  /** `POST /v1/portal/match {interests}` → the search (`searching`); `match:found` follows a pairing. */
  match(interests: string[]): Promise<MatchStatus> {
    return this.post('/v1/portal/match', { interests });
  }

  /** `GET /v1/portal/match/status` → `{state: idle|searching|matched, …}`. */
  matchStatus(): Promise<MatchStatus> {
    return this.get('/v1/portal/match/status');
  }

  /** `POST /v1/portal/match/dequeue`: ends the search → the status. */
  dequeue(): Promise<MatchStatus> {
    return this.post('/v1/portal/match/dequeue');
  }

  /** `POST /v1/portal/match/leave {chat_id?}`: leaves the newest active direct chat, or the one named. */
  leaveMatch(chatId?: number): Promise<MatchLeaveAnswer> {
    return this.post('/v1/portal/match/leave', chatId === undefined ? {} : { chat_id: chatId });
  }

  /** `GET /v1/portal/match/statistics` → `{online, top_tags}` (registered sessions only). */
  matchStatistics(): Promise<MatchStatistics> {
    return this.get('/v1/portal/match/statistics');
  }

  /** `POST /v1/portal/strangers/block {user_id}` → `{ok}`: bars a stranger from matchmaking (Moderators and above). */
  blockStranger(userId: number): Promise<OkAnswer> {
    return this.post('/v1/portal/strangers/block', { user_id: userId });
  }

  // Notifications (spec 2.7, 4.7)

  /** `GET /v1/notifications` → `{notifications, next_before}`, newest first. */
  notifications(input: NotificationsInput = {}): Promise<NotificationsPage> {
    return this.get('/v1/notifications', { ...input });
  }

  /** `GET /v1/notifications/unread` → `{unread}`. */
  unreadNotifications(): Promise<UnreadCountAnswer> {
    return this.get('/v1/notifications/unread');
  }

  /** `POST /v1/notifications/read-all` → `{marked}`. */
  readAllNotifications(): Promise<MarkedAnswer> {
    return this.post('/v1/notifications/read-all');
  }

  /** `POST /v1/notifications/{notification_id}/read` → the notification, read. */
  readNotification(notificationId: number): Promise<Notification> {
    return this.post(`/v1/notifications/${notificationId}/read`);
  }

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

  // Chat moderation (spec 4.6, 4.8: the chat owner, or staff who outrank it)

  /** `POST /v1/portal/chats/{chat_id}/kick {user_id, reason?}` → `{ok}`. */
  kick(chatId: number, body: ReasonBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/kick`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/ban {user_id, duration?, reason?}` → `{ok}` (permanent without `duration`). */
  ban(chatId: number, body: PunishBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/ban`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/unban {user_id, reason?}` → `{ok}`. */
  unban(chatId: number, body: ReasonBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/unban`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/mute {user_id, duration?, reason?}` → `{ok}` (the owner or Admin and above). */
  mute(chatId: number, body: PunishBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/mute`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/unmute {user_id}` → `{ok}`; `user:unmuted` to the chat. */
  unmute(chatId: number, body: TargetInput): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/unmute`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/timeout {user_id, duration, reason?}` → `{ok}`: platform-wide, 60 s to 30 days. */
  timeout(chatId: number, body: TimeoutBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/timeout`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/warn {user_id, reason?}` → `{ok}`. */
  warn(chatId: number, body: ReasonBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/warn`, body);
  }

  /** `POST /v1/portal/hard-mute {user_id, duration?, reason?}` → `{ok}`: mutes in every chat (Moderators and above). */
  hardMute(body: PunishBody): Promise<OkAnswer> {
    return this.post('/v1/portal/hard-mute', body);
  }

  /** `POST /v1/portal/hard-unmute {user_id}` → `{ok}`. */
  hardUnmute(body: TargetInput): Promise<OkAnswer> {
    return this.post('/v1/portal/hard-unmute', body);
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
