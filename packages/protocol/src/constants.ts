/** Limits and constants of the spec (section 8 and elsewhere). One place, used by server, sdk and tests. */
export const Limits = {
  /** Pending web login codes per requesting IP; the next request answers 429. */
  PENDING_WEB_CODES_PER_IP: 5,
  LOGIN_CODE_LENGTH: 8,
  LOGIN_CODE_TTL_MS: 10 * 60 * 1000,
  /** After this many bot-initiated logins in a row, the next login must be through the website. */
  BOT_LOGIN_WEB_REQUIRED_EVERY: 5,
  /** Failed verify attempts allowed per IP per window (docs/security.md has the arithmetic). */
  VERIFY_FAILURES_PER_IP: 10,
  VERIFY_FAILURE_WINDOW_MS: 15 * 60 * 1000,
  /** Failed verify attempts allowed service-wide per window, whatever the address. */
  VERIFY_FAILURES_GLOBAL: 300,
  MAX_SESSIONS_PER_USER: 5,
  SESSION_TTL_STAFF_MS: 24 * 60 * 60 * 1000,
  SESSION_TTL_USER_MS: 30 * 24 * 60 * 60 * 1000,
  BOT_REQUESTS_PER_MINUTE: 600,
  BOT_DEFAULT_RATE_LIMIT_PER_HOUR: 10_000,
  USERNAME_MIN: 3,
  USERNAME_MAX: 32,
  PUNISHMENTS_PAGE_DEFAULT: 50,
  PUNISHMENTS_PAGE_MAX: 100,
  SEARCH_PAGE_DEFAULT: 20,
  SEARCH_PAGE_MAX: 100,
  BOT_BATCH_MAX: 100,
  BOT_NAME_MAX: 64,
  URL_MAX: 2000,
  CHAT_NAME_MAX: 64,
  MESSAGE_CONTENT_MAX: 4096,
  MESSAGES_PAGE_DEFAULT: 50,
  MESSAGES_PAGE_MAX: 100,
  BULK_DELETE_MAX: 100,
  /** Messages one user may send to one chat per window, and to all chats per window. */
  MESSAGES_PER_CHAT: 20,
  MESSAGES_GLOBAL: 60,
  MESSAGE_WINDOW_MS: 10_000,
  /**
   * Anonymous (stranger) accounts one address may create per window: each is an account and a
   * session, and the public key (K) that creates them is public. Generous enough for many people
   * behind one address (a school, a carrier's NAT) re-rolling now and then.
   */
  STRANGERS_PER_IP: 20,
  STRANGER_WINDOW_MS: 10 * 60 * 1000,
  /**
   * Room VM starts one user may ask for per window when the room is not running yet (each launches
   * a browser); starting a running room is free.
   */
  ROOM_STARTS_PER_USER: 20,
  ROOM_START_WINDOW_MS: 10 * 60 * 1000,
  /**
   * Changes (every POST) one signed-in user may make per window, over all the routes that have no
   * limit of their own: two a second, sustained for a minute, is beyond what a person does by hand
   * and stops a script from filling tables through an account. Message sends, logout and ending
   * sessions are not counted.
   */
  WRITES_PER_USER: 120,
  WRITE_WINDOW_MS: 60_000,
  /**
   * `room:join` events one user may send per window, entering a chat it is in included (a client
   * enters each of its chats after a reconnect; a chat it joins anew also spends a write).
   */
  ROOM_ENTERS_PER_USER: 300,
  ROOM_ENTER_WINDOW_MS: 60_000,
  /**
   * Users one user may block (Parlor's choice; the spec names no limit). Blocks keep two users from
   * being matched, and each match-queue entry carries its user's block list, so the list is
   * bounded; a thousand is far beyond what a person blocks by hand.
   */
  BLOCKS_PER_USER: 1000,
  /**
   * Live invites one chat holds at most (Parlor's choice; the spec names no limit). Any member of
   * a public chat may invite, without an expiry, and `GET …/invites` lists them all unpaged, so the
   * list is bounded; a thousand is far beyond what a chat hands out by hand.
   */
  INVITES_PER_CHAT: 1000,
  INVITE_MAX_USES: 1000,
  INVITE_MAX_TTL_S: 30 * 24 * 3600,
  /** Chat slots by tier/level (spec 2.11). Owners: unlimited. */
  CHAT_SLOTS_PREMIUM: 1,
  CHAT_SLOTS_ADMIN: 5,
  ACTIVITY_PAGE_MAX: 100,
  INTERESTS_MIN: 1,
  INTERESTS_MAX: 3,
  /** How long a lone user waits in the match queue. */
  MATCH_QUEUE_WAIT_MS: 120_000,
  /** A matched direct chat lives 24 hours, then stays archived (read-only) 24 hours more. */
  DIRECT_CHAT_TTL_MS: 24 * 3600_000,
  DIRECT_ARCHIVE_TTL_MS: 24 * 3600_000,
  DIRECT_SLOTS_FREE: 1,
  DIRECT_SLOTS_PREMIUM: 3,
  /** A user counts as online this long after its last connected socket was seen. */
  ONLINE_TTL_MS: 75_000,
  /** Timeouts, and the optional duration of bans and mutes (spec 4.6, 8). */
  PUNISH_DURATION_MIN_S: 60,
  PUNISH_DURATION_MAX_S: 2_592_000,
  PUNISH_REASON_MAX: 500,
  /**
   * A chat's moderators warn or time out its members, and former members this long after their
   * membership ended (a user who misbehaves and leaves, or was just kicked, is still within reach).
   */
  CHAT_FORMER_MEMBER_REACH_MS: 24 * 3600_000,
  BODY_LIMIT_BYTES: 64 * 1024,
  /**
   * Envelopes one key share request carries at most, and the longest envelope accepted (the SDK's
   * are 140 characters, docs/e2e.md). A key ring larger than one request is keyed over several
   * (docs/api.md, Keys). The share route's body limit follows from these (KEY_SHARE_BODY_MAX_BYTES).
   */
  KEY_SHARE_ENVELOPES_MAX: 500,
  ENVELOPE_MAX_CHARS: 256,
  /** Characters of text one `vm:input {kind: "text"}` carries (paste, IME). */
  VM_INPUT_TEXT_MAX: 4096,
  /** Notifications (spec 2.7, 4.7): list page size, and what an admin may write. */
  NOTIFICATIONS_PAGE_DEFAULT: 20,
  NOTIFICATIONS_PAGE_MAX: 100,
  NOTIFICATION_TITLE_MAX: 100,
  NOTIFICATION_BODY_MAX: 2000,
  /** Subscriptions (spec 2.11, 8): the trial is 7 days, once per user; Premium 1-3650 days. */
  TRIAL_DAYS: 7,
  SUBSCRIPTION_DAYS_MAX: 3650,
  /** Free text an admin attaches to a subscription change (kept in the audit log). */
  REASON_MAX: 500,
  /** The admin audit log listing (GET /v1/admin/audit). */
  AUDIT_PAGE_DEFAULT: 50,
  AUDIT_PAGE_MAX: 100,
  /** Guilds (spec 2.3, 2.4, 4.3, 4.4): names as the chat platform allows, command prefixes, premium days. */
  GUILD_NAME_MAX: 100,
  GUILD_PREFIX_MAX: 32,
  GUILD_PREMIUM_DAYS_MAX: 3650,
  /** Room settings start_url (spec 8). */
  START_URL_MAX: 2000,
} as const;

export const INTEREST_PATTERN = '^[a-z0-9]{3,12}$';

export const USERNAME_PATTERN = '^[A-Za-z0-9._-]{3,32}$';

/** A chat-platform snowflake id (guilds, guild owners): 1-20 decimal digits, compared as text. */
export const SNOWFLAKE_PATTERN = '^[0-9]{1,20}$';

/** Guild vanity invites (spec 4.4): 3-32 lower-case letters, digits and inner hyphens. */
export const VANITY_PATTERN = '^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$';

/** Room settings of a guild before its owner changes any (spec 2.4). */
export const RoomSettingsDefaults = {
  browser: 'brave',
  proxy: 'none',
  start_url: 'https://duckduckgo.com/',
  kiosk: false,
  allow_control_requests: true,
} as const;

/**
 * Login code alphabet: digits and upper-case letters without 0/O and 1/I, so a code read aloud or
 * retyped is unambiguous. 32 symbols, so 8 characters carry 40 bits. Verify upper-cases its input.
 */
export const LOGIN_CODE_ALPHABET = '23456789ABCDEFGHJKLMNPQRSTUVWXYZ';

export const Platforms = ['platform_a', 'platform_b'] as const;
export type Platform = (typeof Platforms)[number];

/**
 * The platform guilds live on (the spec's "chatplatform"): `chatplatform_id` and
 * `owner_chatplatform_id` are its snowflakes, and its six default avatars are the spec's
 * `platform_a_0` … `platform_a_5`. A guild's owner is the user linked to this platform's identity.
 */
export const GUILD_PLATFORM: Platform = 'platform_a';

/** Default avatar keys: platform_a_0 … platform_a_5. */
export const DefaultAvatarKeys = [0, 1, 2, 3, 4, 5].map((n) => `platform_a_${n}`);

export const SubscriptionTier = { BASIC: 0, TRIAL: 1, PREMIUM: 2, LIFETIME: 3 } as const;
export const UserState = { ACTIVE: 0, TIMEOUT: 1, BANNED: 2 } as const;
export const PermissionLevel = { USER: 0, MODERATOR: 1, ADMIN: 2, OWNER: 3 } as const;
export const BotType = { OFFICIAL: 1, VERIFIED: 2, COMMUNITY: 3 } as const;
export const BotTypeNames = { official: 1, verified: 2, community: 3 } as const;
export const PermissionNames = { user: 0, moderator: 1, admin: 2, owner: 3 } as const;

/**
 * Audit event codes. 801-803 are the spec's; the others are Parlor's, grouped by hundreds:
 * 1xx users, 2xx bots, 3xx subscriptions, 4xx punishments, 5xx guilds, 6xx chats (admin), 8xx notifications.
 */
export const AuditCodes = {
  USER_UPDATE: 101,
  USER_PERMISSION_CHANGE: 102,
  USER_DELETE: 103,
  BOT_CREATE: 201,
  BOT_UPDATE: 202,
  BOT_DELETE: 203,
  SUBSCRIPTION_GRANT: 301,
  SUBSCRIPTION_REVOKE: 302,
  PUNISH_BAN: 401,
  PUNISH_UNBAN: 402,
  PUNISH_TIMEOUT: 403,
  PUNISH_WARN: 404,
  CHAT_KICK: 405,
  CHAT_BAN: 406,
  CHAT_UNBAN: 407,
  CHAT_MUTE: 408,
  CHAT_UNMUTE: 409,
  STRANGER_BLOCK: 410,
  HARD_MUTE: 411,
  HARD_UNMUTE: 412,
  GUILD_PREMIUM_GRANT: 501,
  GUILD_PREMIUM_REVOKE: 502,
  GUILD_SPONSOR_ADD: 503,
  GUILD_SPONSOR_REMOVE: 504,
  GUILD_VANITY_SET: 505,
  GUILD_ROOM_SETTINGS_UPDATE: 506,
  CHAT_CREATE_OFFICIAL: 601,
  CHAT_ADMIN_UPDATE: 602,
  CHAT_ADMIN_DELETE: 603,
  NOTIFICATION_CREATE: 801,
  NOTIFICATION_BROADCAST: 802,
  NOTIFICATION_DELETE: 803,
} as const;

export const NotificationTypes = ['success', 'info', 'warning', 'danger', 'system'] as const;
export type NotificationType = (typeof NotificationTypes)[number];

export const ChatTypes = ['public', 'private', 'official', 'direct'] as const;
export type ChatType = (typeof ChatTypes)[number];
