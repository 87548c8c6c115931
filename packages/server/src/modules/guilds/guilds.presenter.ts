import type { BotGuild, Guild, RoomSettings, VanityGuild } from '@parlor/protocol';
import { guildHasPremium } from './guilds.rules.js';
import type { GuildRow } from './guilds.store.js';

const iso = (d: Date | null) => (d ? d.toISOString() : null);
/** Spec 2.3 types avatar_url, prefix and owner_chatplatform_id as strings: one not known is "". */
const text = (v: string | null) => v ?? '';

export function toRoomSettings(g: GuildRow): RoomSettings {
  return {
    browser: g.roomBrowser as RoomSettings['browser'],
    proxy: g.roomProxy as RoomSettings['proxy'],
    start_url: g.roomStartUrl,
    kiosk: g.roomKiosk,
    allow_control_requests: g.roomAllowControlRequests,
  };
}

/** The whole record, for the owner, sponsors and admins. */
export function toGuild(g: GuildRow, sponsorIds: number[], now: Date): Guild {
  return {
    id: g.id,
    chatplatform_id: g.chatplatformId,
    name: g.name,
    avatar_url: text(g.avatarUrl),
    prefix: text(g.prefix),
    member_count: g.memberCount,
    is_whitelisted: g.isWhitelisted,
    owner_chatplatform_id: text(g.ownerChatplatformId),
    state: g.state,
    has_bot: g.hasBot,
    has_premium: guildHasPremium(g, now),
    subscription_expires_at: iso(g.subscriptionExpiresAt),
    source: g.source,
    vanity_invite: g.vanityInvite,
    chat_id: g.chatId,
    sponsor_ids: sponsorIds,
    room_settings: toRoomSettings(g),
    created_at: g.createdAt.toISOString(),
    updated_at: g.updatedAt.toISOString(),
  };
}

/** The bot upsert's answer (spec 4.3's field list). */
export function toBotGuild(g: GuildRow): BotGuild {
  return {
    chatplatform_id: g.chatplatformId,
    name: g.name,
    prefix: text(g.prefix),
    member_count: g.memberCount,
    is_whitelisted: g.isWhitelisted,
    owner_chatplatform_id: text(g.ownerChatplatformId),
    state: g.state,
    id: g.id,
    has_bot: g.hasBot,
    source: g.source,
    created_at: g.createdAt.toISOString(),
    updated_at: g.updatedAt.toISOString(),
  };
}

/** The vanity update's answer (spec 4.4's field list, plus the vanity and the chat it opens). */
export function toVanityGuild(g: GuildRow, now: Date): VanityGuild {
  return {
    chatplatform_id: g.chatplatformId,
    name: g.name,
    avatar_url: text(g.avatarUrl),
    has_premium: guildHasPremium(g, now),
    member_count: g.memberCount,
    prefix: text(g.prefix),
    subscription_expires_at: iso(g.subscriptionExpiresAt),
    source: g.source,
    vanity_invite: g.vanityInvite,
    chat_id: g.chatId,
    created_at: g.createdAt.toISOString(),
    updated_at: g.updatedAt.toISOString(),
  };
}
