import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  real,
  serial,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

export const users = pgTable(
  'users',
  {
    id: serial('id').primaryKey(),
    username: text('username').notNull(),
    avatarSource: text('avatar_source').notNull().default(''),
    subscriptionTier: integer('subscription_tier').notNull().default(0),
    subscriptionExpiresAt: ts('subscription_expires_at'),
    subscriptionGrantedBy: integer('subscription_granted_by'),
    state: integer('state').notNull().default(0),
    stateExpiresAt: ts('state_expires_at'),
    /**
     * The state that follows when state_expires_at passes, and when that one ends: a timeout that
     * outlasts a temporary ban (moderation.store platformState). Readers apply it at once; the
     * expiry sweep writes it into state later.
     */
    thenState: integer('then_state').notNull().default(0),
    thenStateExpiresAt: ts('then_state_expires_at'),
    permissionLevel: integer('permission_level').notNull().default(0),
    permissionSince: ts('permission_since'),
    /** Bot-initiated logins since the last website login (spec: every 5, the web is required). */
    botLoginsSinceWeb: integer('bot_logins_since_web').notNull().default(0),
    /** Anonymous matchmaking-only account (POST /v1/portal/stranger). */
    isStranger: boolean('is_stranger').notNull().default(false),
    /** Set when a moderator blocks this (stranger) account from matchmaking. */
    matchBlockedAt: ts('match_blocked_at'),
    lastActivityAt: ts('last_activity_at').notNull(),
    createdAt: ts('created_at').notNull(),
    updatedAt: ts('updated_at').notNull(),
  },
  (t) => [
    uniqueIndex('users_username_lower_idx').on(sql`lower(${t.username})`),
    // The subscription sweep's lookup: only Trial and Premium expire.
    index('users_subscription_expiry_idx').on(t.subscriptionExpiresAt).where(sql`${t.subscriptionTier} in (1, 2)`),
    // The stranger sweep's lookup (auth.strangers sweepStrangers): only anonymous accounts.
    index('users_stranger_idx').on(t.id).where(sql`${t.isStranger}`),
    // The punishment expiry sweep's state restore (moderation.store restoreExpiredStates): Timeout and Banned.
    index('users_state_expiry_idx').on(t.stateExpiresAt).where(sql`${t.state} in (1, 2)`),
  ],
);

export const linkedPlatforms = pgTable(
  'linked_platforms',
  {
    id: serial('id').primaryKey(),
    userId: integer('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    platform: text('platform').notNull(),
    platformUserId: text('platform_user_id').notNull(),
    platformUsername: text('platform_username').notNull(),
    platformAvatarUrl: text('platform_avatar_url').notNull(),
    linkedAt: ts('linked_at').notNull(),
    lastAuthenticatedAt: ts('last_authenticated_at').notNull(),
  },
  (t) => [
    uniqueIndex('linked_platforms_identity_idx').on(t.platform, t.platformUserId),
    index('linked_platforms_user_idx').on(t.userId),
  ],
);

export const sessions = pgTable(
  'sessions',
  {
    id: serial('id').primaryKey(),
    userId: integer('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    /** sha256 of the token, hex. The token itself is never stored. */
    tokenHash: text('token_hash').notNull(),
    tokenSuffix: text('token_suffix').notNull(),
    createdAt: ts('created_at').notNull(),
    expiresAt: ts('expires_at').notNull(),
    endedAt: ts('ended_at'),
    endReason: text('end_reason'),
    clientIp: text('client_ip').notNull(),
    userAgent: text('user_agent').notNull(),
    geo: jsonb('geo').notNull(),
    lastSeenAt: ts('last_seen_at').notNull(),
  },
  (t) => [
    uniqueIndex('sessions_token_hash_idx').on(t.tokenHash),
    index('sessions_user_idx').on(t.userId, t.endedAt),
    // Retention: when a session was over (its end, else its expiry; sessions.store sessionsOver).
    index('sessions_over_idx').on(sql`least(${t.endedAt}, ${t.expiresAt})`),
    // The expiry sweep: sessions not ended, by expiry (sessions.store expiryDue; migration 0013).
    index('sessions_expiry_idx').on(t.expiresAt).where(sql`${t.endedAt} is null`),
  ],
);

export const moderationActions = pgTable(
  'moderation_actions',
  {
    id: serial('id').primaryKey(),
    userId: integer('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    chatId: integer('chat_id'),
    actionType: text('action_type').notNull(),
    reason: text('reason'),
    actorUserId: integer('actor_user_id'),
    expiresAt: ts('expires_at'),
    liftedAt: ts('lifted_at'),
    isLifted: boolean('is_lifted').notNull().default(false),
    createdAt: ts('created_at').notNull(),
  },
  (t) => [
    index('moderation_actions_user_idx').on(t.userId, t.createdAt),
    // The punishment expiry sweep's lookup (moderation.store liftExpired): records not yet lifted.
    index('moderation_actions_expiry_idx').on(t.expiresAt).where(sql`${t.isLifted} = false`),
  ],
);

export const notifications = pgTable(
  'notifications',
  {
    id: serial('id').primaryKey(),
    userId: integer('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    title: text('title').notNull(),
    body: text('body').notNull(),
    type: text('type').notNull(),
    readAt: ts('read_at'),
    createdBy: integer('created_by'),
    createdAt: ts('created_at').notNull(),
    /** Every copy of one admin broadcast shares this id, so the broadcast can be deleted as a whole. */
    broadcastId: uuid('broadcast_id'),
  },
  (t) => [
    index('notifications_user_idx').on(t.userId, t.id),
    index('notifications_broadcast_idx').on(t.broadcastId).where(sql`${t.broadcastId} is not null`),
    // Retention (notifications.store notificationsBefore).
    index('notifications_created_idx').on(t.createdAt),
  ],
);

export const auditLog = pgTable(
  'audit_log',
  {
    id: serial('id').primaryKey(),
    /** 'user' | 'operator' | 'system' | 'bot' */
    actorKind: text('actor_kind').notNull(),
    actorId: integer('actor_id'),
    targetUserId: integer('target_user_id'),
    targetBotId: integer('target_bot_id'),
    code: integer('code').notNull(),
    action: text('action').notNull(),
    reason: text('reason'),
    data: jsonb('data').notNull().default({}),
    createdAt: ts('created_at').notNull(),
  },
  (t) => [
    index('audit_log_target_user_idx').on(t.targetUserId, t.code),
    // GET /v1/admin/audit?code=: newest first within one code without scanning the whole log.
    index('audit_log_code_idx').on(t.code, t.id),
  ],
);

export const bots = pgTable(
  'bots',
  {
    id: serial('id').primaryKey(),
    name: text('name').notNull(),
    avatarUrl: text('avatar_url'),
    type: integer('type').notNull().default(3),
    rateLimitPerHour: integer('rate_limit_per_hour').notNull(),
    /** sha256 of the API key, hex. The key is shown once at registration and never stored. */
    keyHash: text('key_hash').notNull(),
    ownerUserId: integer('owner_user_id'),
    statsUsers: integer('stats_users'),
    statsLatencyMs: real('stats_latency_ms'),
    statsReportedAt: ts('stats_reported_at'),
    createdAt: ts('created_at').notNull(),
    updatedAt: ts('updated_at').notNull(),
    deletedAt: ts('deleted_at'),
  },
  (t) => [uniqueIndex('bots_key_hash_idx').on(t.keyHash)],
);

export const botCommands = pgTable(
  'bot_commands',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    botId: integer('bot_id')
      .notNull()
      .references(() => bots.id, { onDelete: 'cascade' }),
    command: text('command').notNull(),
    userId: integer('user_id'),
    guildId: text('guild_id'),
    success: boolean('success'),
    durationMs: integer('duration_ms'),
    executedAt: ts('executed_at').notNull(),
    createdAt: ts('created_at').notNull(),
  },
  (t) => [
    index('bot_commands_bot_idx').on(t.botId, t.executedAt),
    // Retention (bots.store commandsBefore).
    index('bot_commands_created_idx').on(t.createdAt),
  ],
);

export const chats = pgTable(
  'chats',
  {
    id: serial('id').primaryKey(),
    /** 'public' | 'private' | 'official' | 'direct' */
    type: text('type').notNull(),
    name: text('name').notNull(),
    ownerUserId: integer('owner_user_id').references(() => users.id, { onDelete: 'set null' }),
    /** Chat key generation (DESIGN.md 7); raised on membership loss and key removal. */
    epoch: integer('epoch').notNull().default(1),
    /** Last message id parts: ids are `<msgMs>-<msgSeq>`, strictly increasing per chat. */
    msgMs: bigint('msg_ms', { mode: 'number' }).notNull().default(0),
    msgSeq: integer('msg_seq').notNull().default(0),
    /**
     * Raised by each chat mute, in its transaction: a send's statement reads it with its checks and
     * writes only if the chat row still has that value (messages.sql sendBatchSql), so a mute
     * committed while the send waited for the row refuses it as the epoch does a kick.
     */
    restrictionsSeq: integer('restrictions_seq').notNull().default(0),
    /** Direct chats: when the chat ends by itself (24 h after the match). */
    expiresAt: ts('expires_at'),
    /** Direct chats: the opaque token of the match (match status, room:join {token}). */
    matchToken: text('match_token'),
    /** Direct chats: when it was archived (read-only, removed 24 h later). */
    archivedAt: ts('archived_at'),
    createdAt: ts('created_at').notNull(),
    updatedAt: ts('updated_at').notNull(),
    deletedAt: ts('deleted_at'),
  },
  (t) => [
    index('chats_owner_idx').on(t.ownerUserId),
    uniqueIndex('chats_match_token_idx').on(t.matchToken),
    // The chat lifecycle sweep's steps, predicate for predicate: active direct chats by expiry and
    // archived ones by archive time (chats.direct.store.ts dueDirect), deleted chats of every type
    // by deletion time (chats.purge.store.ts deletedBy).
    index('chats_direct_expiry_idx')
      .on(t.expiresAt)
      .where(sql`${t.type} = 'direct' and ${t.deletedAt} is null and ${t.archivedAt} is null`),
    index('chats_direct_archived_idx').on(t.archivedAt).where(sql`${t.type} = 'direct' and ${t.deletedAt} is null`),
    index('chats_deleted_idx').on(t.deletedAt).where(sql`${t.deletedAt} is not null`),
  ],
);

/** User-to-user blocks: a block keeps two users from being matched, in both directions. */
export const userBlocks = pgTable(
  'user_blocks',
  {
    blockerId: integer('blocker_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    blockedId: integer('blocked_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    createdAt: ts('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.blockerId, t.blockedId] }), index('user_blocks_blocked_idx').on(t.blockedId)],
);

export const chatMembers = pgTable(
  'chat_members',
  {
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id, { onDelete: 'cascade' }),
    userId: integer('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    joinedAt: ts('joined_at').notNull(),
    /** Null while a member; set on leave, kick or ban (the row stays for history). */
    leftAt: ts('left_at'),
  },
  (t) => [primaryKey({ columns: [t.chatId, t.userId] }), index('chat_members_user_idx').on(t.userId)],
);

export const chatActivity = pgTable(
  'chat_activity',
  {
    id: serial('id').primaryKey(),
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id, { onDelete: 'cascade' }),
    userId: integer('user_id').notNull(),
    /** 'join' | 'leave' | 'kick' | 'ban' */
    action: text('action').notNull(),
    /** For joins: 'direct' | 'vanity' | 'invite' */
    method: text('method'),
    inviteCode: text('invite_code'),
    actorUserId: integer('actor_user_id'),
    createdAt: ts('created_at').notNull(),
  },
  (t) => [
    index('chat_activity_chat_idx').on(t.chatId, t.id),
    // Retention (chats.activity.store activityBefore).
    index('chat_activity_created_idx').on(t.createdAt),
  ],
);

export const chatInvites = pgTable(
  'chat_invites',
  {
    code: text('code').primaryKey(),
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id, { onDelete: 'cascade' }),
    createdBy: integer('created_by').notNull(),
    maxUses: integer('max_uses'),
    uses: integer('uses').notNull().default(0),
    expiresAt: ts('expires_at'),
    revokedAt: ts('revoked_at'),
    createdAt: ts('created_at').notNull(),
  },
  (t) => [
    index('chat_invites_chat_idx').on(t.chatId),
    // An account's deletion revokes its invites to private chats (chats.invites.store revokePrivateOfDeleted).
    index('chat_invites_creator_idx').on(t.createdBy),
    // Retention: when an invite was dead (revoked, expired, else created if used up; chats.invites.store invitesDeadBefore).
    index('chat_invites_dead_idx').on(
      sql`least(${t.revokedAt}, ${t.expiresAt}, case when ${t.uses} >= ${t.maxUses} then ${t.createdAt} end)`,
    ),
  ],
);

/** One X25519 public key per session (spec 2.9); removed when the session ends. */
export const sessionKeys = pgTable(
  'session_keys',
  {
    sessionId: integer('session_id')
      .primaryKey()
      .references(() => sessions.id, { onDelete: 'cascade' }),
    userId: integer('user_id').notNull(),
    publicKey: text('public_key').notNull(),
    updatedAt: ts('updated_at').notNull(),
  },
  (t) => [
    index('session_keys_user_idx').on(t.userId),
    // One session per public key (migration 0012): a session that registered another's key would be
    // listed with it in key rings, and clients that looked for their own key there were misled.
    uniqueIndex('session_keys_public_key_idx').on(t.publicKey),
  ],
);

/** A chat key wrapped for one session at one epoch; never overwritten. */
export const keyEnvelopes = pgTable(
  'key_envelopes',
  {
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id, { onDelete: 'cascade' }),
    epoch: integer('epoch').notNull(),
    recipientSessionId: integer('recipient_session_id').notNull(),
    senderSessionId: integer('sender_session_id').notNull(),
    wrapped: text('wrapped').notNull(),
    createdAt: ts('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.chatId, t.epoch, t.recipientSessionId] })],
);

export const messages = pgTable(
  'messages',
  {
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id, { onDelete: 'cascade' }),
    ms: bigint('ms', { mode: 'number' }).notNull(),
    seq: integer('seq').notNull(),
    /** 'user' | 'system' */
    type: text('type').notNull(),
    senderId: integer('sender_id'),
    /** The ciphertext bundle for user messages; empty for system messages. */
    content: text('content').notNull(),
    /** Structured details of a system message (kind, user ids, tags); null for user messages. */
    system: jsonb('system'),
    createdAt: ts('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.chatId, t.ms, t.seq] }), index('messages_sender_idx').on(t.chatId, t.senderId)],
);

/**
 * Chat-platform guilds (spec 2.3), created and updated by the bot upsert. The owner is the user
 * whose linked platform identity has `owner_chatplatform_id` as its platform user id.
 */
export const guilds = pgTable(
  'guilds',
  {
    id: serial('id').primaryKey(),
    /** The platform snowflake, kept as text (up to 20 digits, beyond JavaScript's safe integers). */
    chatplatformId: text('chatplatform_id').notNull(),
    name: text('name').notNull(),
    avatarUrl: text('avatar_url'),
    prefix: text('prefix'),
    memberCount: integer('member_count').notNull().default(0),
    isWhitelisted: boolean('is_whitelisted').notNull().default(false),
    ownerChatplatformId: text('owner_chatplatform_id'),
    /** 0 active; other values reserved. */
    state: integer('state').notNull().default(0),
    hasBot: boolean('has_bot').notNull().default(false),
    /** Who created the record: 'bot' (the upsert). */
    source: text('source').notNull(),
    /**
     * The bot that reported the guild first: only it (and Official bots) may report it again.
     * Null: not known (guilds from before migration 0011) or that bot's row is gone; the next bot
     * to report the guild is recorded (docs/api.md, Guilds).
     */
    reportedByBotId: integer('reported_by_bot_id').references(() => bots.id, { onDelete: 'set null' }),
    /** Guild premium, set by admins: active while in the future. */
    subscriptionExpiresAt: ts('subscription_expires_at'),
    vanityInvite: text('vanity_invite'),
    /** The guild's public chat (created when the vanity is first set), joined by room:join {vanity}. */
    chatId: integer('chat_id').references(() => chats.id, { onDelete: 'set null' }),
    /** Room settings (spec 2.4); the service writes the defaults at creation. */
    roomBrowser: text('room_browser').notNull(),
    roomProxy: text('room_proxy').notNull(),
    roomStartUrl: text('room_start_url').notNull(),
    roomKiosk: boolean('room_kiosk').notNull(),
    roomAllowControlRequests: boolean('room_allow_control_requests').notNull(),
    createdAt: ts('created_at').notNull(),
    updatedAt: ts('updated_at').notNull(),
  },
  (t) => [
    uniqueIndex('guilds_chatplatform_id_idx').on(t.chatplatformId),
    uniqueIndex('guilds_vanity_invite_idx').on(t.vanityInvite),
    index('guilds_owner_idx').on(t.ownerChatplatformId),
    uniqueIndex('guilds_chat_idx').on(t.chatId),
  ],
);

/** Users an admin made sponsors of a guild: they manage its vanity and room settings like its owner. */
export const guildSponsors = pgTable(
  'guild_sponsors',
  {
    guildId: integer('guild_id')
      .notNull()
      .references(() => guilds.id, { onDelete: 'cascade' }),
    userId: integer('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    createdAt: ts('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.guildId, t.userId] }), index('guild_sponsors_user_idx').on(t.userId)],
);
