/**
 * Answer bodies of the REST API, derived from the same TypeBox schemas the server validates with
 * (packages/protocol), so the SDK's types and the server's contract cannot drift apart.
 */
import type {
  ActiveSession,
  Activity,
  BotBatchBody,
  BotBatchResponse,
  BotGuild,
  BotLoginCodeBody,
  BotLoginCodeResponse,
  BotProfile,
  BotUpdateBody,
  BotUserSchema,
  BotUserUpdatedSchema,
  Chat,
  ChatKeyResponse,
  DeletedResponse,
  Guild,
  GuildUpsertBody,
  Invite,
  LookupResponse,
  Message,
  Punishment,
  RegisterKeyResponse,
  RequestCodeResponse,
  RoomSettings,
  RoomSettingsBody,
  SendCodeResponse,
  SessionHistoryEntry,
  ShareKeysBody,
  ShareKeysResponse,
  SubscriptionStatus,
  UpdateMeBody,
  UpdateMeResponse,
  User,
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
  Guild,
  GuildUpsertBody,
  Invite,
  Message,
  Punishment,
  RoomSettings,
  RoomSettingsBody,
  SessionHistoryEntry,
  ShareKeysBody,
  SubscriptionStatus,
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
