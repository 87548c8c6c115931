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
}

/** Who manages a chat (settings, invites, deletion): its owner, or Admin and above. */
export function canManage(viewer: Viewer, ownerId: number | null): boolean {
  return viewer.userId === ownerId || viewer.permissionLevel >= 2;
}

/** Who reads a chat's membership history: its owner, or Moderator and above. */
export function canReadActivity(viewer: Viewer, ownerId: number | null): boolean {
  return viewer.userId === ownerId || viewer.permissionLevel >= 1;
}
