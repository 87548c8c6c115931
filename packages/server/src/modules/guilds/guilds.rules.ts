import { isHttpUrl, Limits } from '@parlor/protocol';

const DAY_MS = 24 * 3600_000;

/** Guild premium is active while its expiry is in the future (no expiry: none). */
export function guildHasPremium(guild: { subscriptionExpiresAt: Date | null }, now: Date): boolean {
  return guild.subscriptionExpiresAt !== null && guild.subscriptionExpiresAt > now;
}

/** A premium grant counts its days from now, replacing any current expiry (as user Premium does). */
export function premiumUntil(days: number, now: Date): Date {
  return new Date(now.getTime() + days * DAY_MS);
}

/** Who may manage a guild (vanity, room settings): its owner, a sponsor, or Admin and above (spec 4.4). */
export function canManageGuild(who: { permissionLevel: number; isOwner: boolean; isSponsor: boolean }): boolean {
  return who.permissionLevel >= 2 || who.isOwner || who.isSponsor;
}

/** An absolute http(s) URL with a host (the schema has already bounded its length and characters). */
export function isStartUrl(value: string): boolean {
  return isHttpUrl(value);
}

/** The guild chat's name: the guild's, cut to what a chat name may hold (code points, as validation counts). */
export function guildChatName(guildName: string): string {
  return Array.from(guildName.trim()).slice(0, Limits.CHAT_NAME_MAX).join('').trim();
}
