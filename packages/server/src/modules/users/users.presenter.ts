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

/** Premium now: a paid tier not expired. `premiumAtSql` (users.store.ts) is the same rule in SQL. */
export function hasPremium(user: Pick<UserRow, 'subscriptionTier' | 'subscriptionExpiresAt'>, now: Date): boolean {
  if (user.subscriptionTier === 0) return false;
  return user.subscriptionExpiresAt === null || user.subscriptionExpiresAt > now;
}

/** The stored platform state of a user: the state, its end, and what follows it (moderation.store platformState). */
export type StoredState = Pick<UserRow, 'state' | 'stateExpiresAt' | 'thenState' | 'thenStateExpiresAt'>;

/**
 * The state that applies now and its end (null: none): a timeout (or temporary ban) whose deadline
 * has passed no longer restricts, and the state stored to follow it (a timeout that outlasts a
 * temporary ban) applies in its place, before the moderation sweep writes either back. The session
 * guard, login and every view of a user read it through this.
 */
export function effectiveStateOf(u: StoredState, now: Date): { state: number; expiresAt: Date | null } {
  if (u.state === 0) return { state: 0, expiresAt: null };
  if (!u.stateExpiresAt || u.stateExpiresAt > now) return { state: u.state, expiresAt: u.stateExpiresAt };
  if (u.thenState !== 0 && (!u.thenStateExpiresAt || u.thenStateExpiresAt > now))
    return { state: u.thenState, expiresAt: u.thenStateExpiresAt };
  return { state: 0, expiresAt: null };
}

/** The state that applies now (effectiveStateOf). */
export function effectiveState(u: StoredState, now: Date): number {
  return effectiveStateOf(u, now).state;
}

/**
 * The subscription that applies now: an expired Trial or Premium is Basic, with no expiry and no
 * grantor, exactly as the downgrade sweep will write it. Every view of a user reads it through this.
 */
export function effectiveSubscription(
  u: Pick<UserRow, 'subscriptionTier' | 'subscriptionExpiresAt' | 'subscriptionGrantedBy'>,
  now: Date,
): { tier: number; expiresAt: Date | null; grantedBy: number | null } {
  if (!hasPremium(u, now)) return { tier: 0, expiresAt: null, grantedBy: null };
  return { tier: u.subscriptionTier, expiresAt: u.subscriptionExpiresAt, grantedBy: u.subscriptionGrantedBy };
}

/**
 * When (ms) the effective state or subscription of this user next changes by time alone: the
 * earliest deadline still ahead, or null. A presented profile is right until then.
 */
export function nextChangeAt(
  u: StoredState & Pick<UserRow, 'subscriptionTier' | 'subscriptionExpiresAt'>,
  now: Date,
): number | null {
  const ahead = [effectiveStateOf(u, now).expiresAt, u.subscriptionTier !== 0 ? u.subscriptionExpiresAt : null].filter(
    (d): d is Date => d !== null && d > now,
  );
  return ahead.length > 0 ? Math.min(...ahead.map((d) => d.getTime())) : null;
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

/** The own profile (spec 2.1), with the state and subscription that apply at `now`. */
export function toUser(u: UserRow, platforms: LinkedPlatformRow[], publicUrl: string, now: Date): User {
  const avatar = effectiveAvatar(u.avatarSource, platforms, publicUrl);
  const subscription = effectiveSubscription(u, now);
  return {
    id: u.id,
    username: u.username,
    avatar_url: avatar.url,
    subscription_tier: subscription.tier,
    state: effectiveState(u, now),
    permission_level: u.permissionLevel,
    subscription_expires_at: isoOrNull(subscription.expiresAt),
    subscription_granted_by: subscription.grantedBy,
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

/**
 * A subscription audit entry's action in the history: `grant` (301), `revoke` (302 by an admin or
 * the operator) or `expire` (302 written by the downgrade sweep, its action `expire`).
 */
function historyAction(a: AuditRow): 'grant' | 'revoke' | 'expire' {
  if (a.code !== AuditCodes.SUBSCRIPTION_REVOKE) return 'grant';
  return a.action === 'expire' ? 'expire' : 'revoke';
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
    ...toUser(u, platforms, publicUrl, now),
    has_premium: hasPremium(u, now),
    subscription_history: subscriptionAudit.map((a) => {
      const data = (a.data ?? {}) as { tier?: number; expires_at?: string | null };
      return {
        action: historyAction(a),
        tier: typeof data.tier === 'number' ? data.tier : 0,
        expires_at: data.expires_at ?? null,
        actor_user_id: a.actorKind === 'user' ? a.actorId : null,
        reason: a.reason,
        created_at: iso(a.createdAt),
      };
    }),
  };
}

/**
 * A punishment record as of `now`: one whose expiry has passed reads lifted at its expiry, as the
 * sweep will write it (moderation.store liftExpired), so the list agrees with the state, which
 * changes exactly at the deadline (spec 2.6: `lifted_at` null only while the record applies).
 */
export function toPunishment(p: PunishmentRow, now?: Date): Punishment {
  const expired = !p.isLifted && p.expiresAt !== null && now !== undefined && p.expiresAt.getTime() <= now.getTime();
  return {
    id: p.id,
    action_type: p.actionType,
    reason: p.reason,
    is_lifted: p.isLifted || expired,
    expires_at: isoOrNull(p.expiresAt),
    lifted_at: isoOrNull(expired ? p.expiresAt : p.liftedAt),
    created_at: iso(p.createdAt),
  };
}

/** Bot-visible user (spec 2.2): no subscription details; the state and tier that apply at `now`. */
export function toBotUser(u: UserRow, now: Date) {
  return {
    id: u.id,
    username: u.username,
    subscription_tier: effectiveSubscription(u, now).tier,
    permission_level: u.permissionLevel,
    state: effectiveState(u, now),
    created_at: iso(u.createdAt),
    updated_at: iso(u.updatedAt),
  };
}
