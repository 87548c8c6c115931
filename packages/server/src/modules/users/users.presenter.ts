import {
  AuditCodes,
  DefaultAvatarKeys,
  type FullUser,
  type LinkedPlatform,
  type PublicUser,
  type Punishment,
  type User,
} from '@parlor/protocol';
import type { AuditRow, LinkedPlatformRow, PunishmentRow, UserRow } from './users.store.js';

const iso = (d: Date) => d.toISOString();
const isoOrNull = (d: Date | null) => (d ? d.toISOString() : null);

export function hasPremium(user: Pick<UserRow, 'subscriptionTier' | 'subscriptionExpiresAt'>, now: Date): boolean {
  if (user.subscriptionTier === 0) return false;
  return user.subscriptionExpiresAt === null || user.subscriptionExpiresAt > now;
}

/**
 * Which avatar a user shows: the chosen linked platform's picture, a default picture, or (for an
 * empty choice or a platform no longer linked) the earliest linked platform's.
 */
export function effectiveAvatar(
  source: string,
  platforms: LinkedPlatformRow[],
  publicUrl: string,
): { source: string; url: string | null } {
  if (DefaultAvatarKeys.includes(source)) return { source, url: `${publicUrl}/avatars/${source}.svg` };
  const chosen = platforms.find((p) => p.platform === source) ?? platforms[0];
  if (!chosen) return { source: 'platform_a_0', url: `${publicUrl}/avatars/platform_a_0.svg` };
  return { source: chosen.platform, url: chosen.platformAvatarUrl || null };
}

export function toLinkedPlatform(p: LinkedPlatformRow): LinkedPlatform {
  return {
    platform: p.platform,
    platform_user_id: p.platformUserId,
    platform_username: p.platformUsername,
    platform_avatar_url: p.platformAvatarUrl,
    linked_at: iso(p.linkedAt),
    last_authenticated_at: iso(p.lastAuthenticatedAt),
  };
}

/** The own profile (spec 2.1). */
export function toUser(u: UserRow, platforms: LinkedPlatformRow[], publicUrl: string): User {
  const avatar = effectiveAvatar(u.avatarSource, platforms, publicUrl);
  return {
    id: u.id,
    username: u.username,
    avatar_url: avatar.url,
    subscription_tier: u.subscriptionTier,
    state: u.state,
    permission_level: u.permissionLevel,
    subscription_expires_at: isoOrNull(u.subscriptionExpiresAt),
    subscription_granted_by: u.subscriptionGrantedBy,
    last_activity_at: iso(u.lastActivityAt),
    permission_since: isoOrNull(u.permissionSince),
    avatar_source: avatar.source,
    linked_platforms: platforms.map(toLinkedPlatform),
    created_at: iso(u.createdAt),
    updated_at: iso(u.updatedAt),
  };
}

/** The redacted view any caller may see. */
export function toPublicUser(u: UserRow, platforms: LinkedPlatformRow[], publicUrl: string, now: Date): PublicUser {
  return {
    id: u.id,
    username: u.username,
    avatar_url: effectiveAvatar(u.avatarSource, platforms, publicUrl).url,
    permission_level: u.permissionLevel,
    has_premium: hasPremium(u, now),
    created_at: iso(u.createdAt),
  };
}

/** Admin and above: everything, with the subscription history from the audit log. */
export function toFullUser(
  u: UserRow,
  platforms: LinkedPlatformRow[],
  subscriptionAudit: AuditRow[],
  publicUrl: string,
  now: Date,
): FullUser {
  return {
    ...toUser(u, platforms, publicUrl),
    has_premium: hasPremium(u, now),
    subscription_history: subscriptionAudit.map((a) => {
      const data = (a.data ?? {}) as { tier?: number; expires_at?: string | null };
      return {
        action: a.code === AuditCodes.SUBSCRIPTION_REVOKE ? 'revoke' : 'grant',
        tier: typeof data.tier === 'number' ? data.tier : 0,
        expires_at: data.expires_at ?? null,
        actor_user_id: a.actorKind === 'user' ? a.actorId : null,
        reason: a.reason,
        created_at: iso(a.createdAt),
      };
    }),
  };
}

export function toPunishment(p: PunishmentRow): Punishment {
  return {
    id: p.id,
    action_type: p.actionType,
    reason: p.reason,
    is_lifted: p.isLifted,
    expires_at: isoOrNull(p.expiresAt),
    lifted_at: isoOrNull(p.liftedAt),
    created_at: iso(p.createdAt),
  };
}

/** Bot-visible user (spec 2.2): no subscription details. */
export function toBotUser(u: UserRow, now: Date) {
  return {
    id: u.id,
    username: u.username,
    subscription_tier: hasPremium(u, now) ? u.subscriptionTier : 0,
    permission_level: u.permissionLevel,
    state: u.state,
    created_at: iso(u.createdAt),
    updated_at: iso(u.updatedAt),
  };
}
