import { Limits } from '@parlor/protocol';
import type { ChatRow } from './chats.store.js';

/** Chat creation slots of spec 2.11: Basic none, Trial/Premium 1, Admin 5, Owner unlimited. */
export function chatSlots(permissionLevel: number, hasPremium: boolean): number {
  if (permissionLevel >= 3) return Number.POSITIVE_INFINITY;
  if (permissionLevel >= 2) return Limits.CHAT_SLOTS_ADMIN;
  return hasPremium ? Limits.CHAT_SLOTS_PREMIUM : 0;
}

/**
 * When a chat was archived as of `now` (null: it is not). A direct chat is archived exactly at its
 * expiry (spec 3, 8: 24 h after the match), as punishments and subscriptions end exactly at their
 * deadline: before the minute sweep writes `archived_at` (at `expires_at <= now`, chats.direct.store
 * `dueDirect`), a direct chat past its expiry already reads as archived since then. Every check of
 * a chat's archive reads it through this; `directActive` (chats.direct.store.ts) is the same rule in SQL.
 */
export function archivedAtOf(chat: Pick<ChatRow, 'type' | 'archivedAt' | 'expiresAt'>, now: Date): Date | null {
  if (chat.archivedAt !== null) return chat.archivedAt;
  const expired = chat.type === 'direct' && chat.expiresAt !== null && chat.expiresAt.getTime() <= now.getTime();
  return expired ? chat.expiresAt : null;
}

export interface Viewer {
  userId: number;
  permissionLevel: number;
  /** An anonymous stranger session: its own direct chats only (docs/api.md, Strangers). */
  stranger?: boolean;
  /** The operator (the CLI's token, admin routes): no users row, its level stands as given. */
  operator?: boolean;
}

/** Who manages a chat (settings, invites, deletion): its owner, or Admin and above. */
export function canManage(viewer: Viewer, ownerId: number | null): boolean {
  return viewer.userId === ownerId || viewer.permissionLevel >= 2;
}

/**
 * Who reads a chat's membership history: its owner, or Moderator and above for public and official
 * chats, Admin and above for private and direct ones (Moderators do not act in private chats, spec
 * 4.6 rule 2, and the history carries invite codes that would let them in).
 */
export function canReadActivity(viewer: Viewer, chat: { type: string; ownerUserId: number | null }): boolean {
  if (viewer.userId === chat.ownerUserId) return true;
  return viewer.permissionLevel >= (chat.type === 'public' || chat.type === 'official' ? 1 : 2);
}
