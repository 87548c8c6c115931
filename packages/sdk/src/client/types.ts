/**
 * Answer bodies of the REST API, derived from the same TypeBox schemas the server validates with
 * (packages/protocol), so the SDK's types and the server's contract cannot drift apart.
 */
import type {
  ActiveSession,
  Activity,
  AppStatistics,
  BlockSchema,
  BotBatchBody,
  BotBatchResponse,
  BotGuild,
  BotLoginCodeBody,
  BotLoginCodeResponse,
  BotProfile,
  BotStatistics,
  BotUpdateBody,
  BotUserSchema,
  BotUserUpdatedSchema,
  Chat,
  ChatKeyResponse,
  ChatStatistics,
  DeletedResponse,
  FullUser,
  Guild,
  GuildUpsertBody,
  HealthResponse,
  Invite,
  LookupResponse,
  MarkedResponse,
  MatchLeaveResponse,
  MatchStatisticsSchema,
  MatchStatus,
  Message,
  Notification,
  NotificationsPage,
  PublicBot,
  PublicUser,
  PunishBody,
  Punishment,
  ReasonBody,
  RegisterKeyResponse,
  RequestCodeResponse,
  RoomSettings,
  RoomSettingsBody,
  SearchResponse,
  SendCodeResponse,
  SessionHistoryEntry,
  ShareKeysBody,
  ShareKeysResponse,
  StrangerResponse,
  SubscriptionStatus,
  TimeoutBody,
  UnreadCountResponse,
  UpdateMeBody,
  UpdateMeResponse,
  User,
  UserStatistics,
  VanityGuild,
} from '@parlor/protocol';
import type { Static } from '@sinclair/typebox';

export type {
  ActiveSession,
  Activity,
  BotBatchBody,
  BotGuild,
  BotLoginCodeBody,
  BotProfile,
  BotUpdateBody,
  Chat,
  FullUser,
  Guild,
  GuildUpsertBody,
  Invite,
  MatchStatus,
  Message,
  Notification,
  NotificationsPage,
  PublicBot,
  PublicUser,
  PunishBody,
  Punishment,
  ReasonBody,
  RoomSettings,
  RoomSettingsBody,
  SessionHistoryEntry,
  ShareKeysBody,
  SubscriptionStatus,
  TimeoutBody,
  UpdateMeBody,
  User,
  VanityGuild,
};

export type LookupAnswer = Static<typeof LookupResponse>;
export type RequestCodeAnswer = Static<typeof RequestCodeResponse>;
export type VerifyAnswer = { user: User; new_account: boolean };
export type OkAnswer = { ok: boolean };
export type UserAnswer = { user: User };
export type UpdateMeAnswer = Static<typeof UpdateMeResponse>;
export type SessionsAnswer = { sessions: ActiveSession[]; history: SessionHistoryEntry[] };
export type ChatAnswer = { chat: Chat };
export type ChatsAnswer = { chats: Chat[] };
export type InviteAnswer = { invite: Invite };
export type InvitesAnswer = { invites: Invite[] };
export type ActivityAnswer = { activity: Activity[] };
export type RegisterKeyAnswer = Static<typeof RegisterKeyResponse>;
export type ChatKeyAnswer = Static<typeof ChatKeyResponse>;
export type ShareKeysAnswer = Static<typeof ShareKeysResponse>;
export type SendMessageAnswer = { id: string };
export type MessagesAnswer = { messages: Message[] };
export type DeletedAnswer = Static<typeof DeletedResponse>;
export type SendCodeAnswer = Static<typeof SendCodeResponse>;
export type BotLoginCodeAnswer = Static<typeof BotLoginCodeResponse>;
export type BotBatchAnswer = Static<typeof BotBatchResponse>;
export type BotUser = Static<typeof BotUserSchema>;
export type BotUserUpdated = Static<typeof BotUserUpdatedSchema>;
export type StrangerAnswer = Static<typeof StrangerResponse>;
export type MatchLeaveAnswer = Static<typeof MatchLeaveResponse>;
export type MatchStatistics = Static<typeof MatchStatisticsSchema>;
export type Block = Static<typeof BlockSchema>;
export type BlocksAnswer = { blocks: Block[] };
export type UnreadCountAnswer = Static<typeof UnreadCountResponse>;
export type MarkedAnswer = Static<typeof MarkedResponse>;
/** `GET /v1/users/search`: full detail of users below an Admin caller's level, the public view otherwise. */
export type UserSearchAnswer = Static<typeof SearchResponse>;
/** `GET /v1/users/{id}`: the full profile (Admins, of users below their level) or the public one. */
export type UserProfile = FullUser | PublicUser;
/** A bot as `GET /v1/bots/{id}` and `/search` answer it: the full profile for an Admin session, else public. */
export type AnyBot = BotProfile | PublicBot;
export type BotListAnswer = { bots: PublicBot[] };
export type BotSearchAnswer = { bots: AnyBot[] };
export type HealthAnswer = Static<typeof HealthResponse>;
export type UserStatisticsAnswer = Static<typeof UserStatistics>;
export type BotStatisticsAnswer = Static<typeof BotStatistics>;
export type ChatStatisticsAnswer = Static<typeof ChatStatistics>;
export type AppStatisticsAnswer = Static<typeof AppStatistics>;

/** The login identity of spec 5: a chat platform and the user's id there. */
export interface PlatformIdentity {
  platform: string;
  platform_user_id: string;
}

export interface CreateChatInput {
  name: string;
  type: 'public' | 'private';
}

export interface ChatConfigInput {
  name?: string;
  type?: 'public' | 'private';
}

export interface CreateInviteInput {
  max_uses?: number;
  expires_in_seconds?: number;
}

export interface PageInput {
  offset?: number;
  limit?: number;
}

export interface HistoryInput {
  /** A message id: answer messages older than it (the cursor of the previous page). */
  before?: string;
  /** 1-100 (server default 50). */
  limit?: number;
}

export interface NotificationsInput {
  /** A notification id: answer older ones (the previous page's `next_before`). */
  before?: number;
  /** 1-100 (server default 20). */
  limit?: number;
}

export interface SearchInput extends PageInput {
  /** The text to look for (users: 1-32 characters of the username; bots: 1-64 of the name). */
  q: string;
}

/** `POST /v1/portal/chats/{chat_id}/unmute` and `/v1/portal/hard-unmute`. */
export interface TargetInput {
  user_id: number;
}
