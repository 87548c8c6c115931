import { PermissionLevel } from '@parlor/protocol';

/** Who acts: a user and their platform permission level. */
export interface Actor {
  userId: number;
  permissionLevel: number;
}

/** The facts about a chat that the room VM rules read. */
export interface RoomChat {
  ownerUserId: number | null;
  type: string;
  /** An archived direct chat (read-only, spec 3). */
  archived?: boolean;
}

/** Whether a chat's room may start: not in an archived (read-only) direct chat (spec 3). */
export function canRunRoom(chat: RoomChat): boolean {
  return chat.archived !== true;
}

/**
 * Who starts a chat's VM (spec 4.6 rule 4): its owner or a platform Owner. Chats without an owner
 * (direct chats from matchmaking) are started by either of their members (`isMember`).
 */
export function canStart(viewer: Actor, chat: RoomChat, isMember: boolean): boolean {
  if (viewer.permissionLevel >= 3 || viewer.userId === chat.ownerUserId) return true;
  return chat.type === 'direct' && isMember;
}

/** Who stops it (DESIGN.md 6): its owner or Admin and above; direct chats: either member too. */
export function canStop(viewer: Actor, chat: RoomChat, isMember: boolean): boolean {
  if (viewer.permissionLevel >= 2 || viewer.userId === chat.ownerUserId) return true;
  return chat.type === 'direct' && isMember;
}

/** Who hands control over or takes it back: the chat owner, or Moderator and above. */
export function canGrant(viewer: Actor, chat: RoomChat): boolean {
  return viewer.userId === chat.ownerUserId || viewer.permissionLevel >= 1;
}

/**
 * Whether the actor's level decides `rule` for them: not when the rule lets them act at the
 * lowest level too (the chat's owner, a member of a direct chat), whose level then need not be read.
 */
export function levelDecides(rule: (a: Actor) => boolean, actor: Actor): boolean {
  return !rule({ ...actor, permissionLevel: PermissionLevel.USER });
}
