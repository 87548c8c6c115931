import { Limits } from '@parlor/protocol';

/** Chat creation slots of spec 2.11: Basic none, Trial/Premium 1, Admin 5, Owner unlimited. */
export function chatSlots(permissionLevel: number, hasPremium: boolean): number {
  if (permissionLevel >= 3) return Number.POSITIVE_INFINITY;
  if (permissionLevel >= 2) return Limits.CHAT_SLOTS_ADMIN;
  return hasPremium ? Limits.CHAT_SLOTS_PREMIUM : 0;
}

export interface Viewer {
  userId: number;
  permissionLevel: number;
  /** An anonymous stranger session: its own direct chats only (docs/api.md, Strangers). */
  stranger?: boolean;
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
