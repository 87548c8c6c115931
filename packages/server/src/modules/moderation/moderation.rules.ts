/**
 * Who may moderate a chat (spec 4.6 rules 2-3), as pure functions so every combination is tested.
 * Levels: 0 User, 1 Moderator, 2 Admin, 3 Owner.
 */
export interface ChatForRules {
  type: string;
  ownerId: number | null;
  /** The chat owner's permission level (0 when the chat has no owner). */
  ownerLevel: number;
}

export interface ActorForRules {
  userId: number;
  level: number;
}

/**
 * Kick, ban, warn, timeout in a chat: the chat owner always; in public and official chats,
 * anyone who outranks the chat owner (and is at least a Moderator); in private chats only the owner
 * or Admin and above (moderators cannot). Direct chats have no owner: Moderators and above.
 */
export function canModerateChat(actor: ActorForRules, chat: ChatForRules): boolean {
  if (chat.ownerId !== null && actor.userId === chat.ownerId) return true;
  if (chat.type === 'private') return actor.level >= 2;
  return actor.level >= 1 && actor.level > chat.ownerLevel;
}

/**
 * Mute and unmute (spec 4.6 rule 3: "the chat owner, or Admin and above for public or official
 * chats, or Admin and above for any chat"): the chat owner, or Admin and above, in any chat.
 * Moderators do not mute, even in a public chat whose owner they outrank.
 */
export function canMute(actor: ActorForRules, chat: ChatForRules): boolean {
  return (chat.ownerId !== null && actor.userId === chat.ownerId) || actor.level >= 2;
}

/** Nobody moderates themselves, and a target at or above the actor's level is out of reach (Owners excepted). */
export function canTarget(actor: ActorForRules, target: { userId: number; level: number }): boolean {
  if (actor.userId === target.userId) return false;
  return actor.level === 3 || target.level < Math.max(actor.level, 1);
}

/**
 * Kick, ban and mute in a chat never take the chat's owner, whoever acts: kicked or banned, its
 * chat would drop out of its lists and still take its creation slot (spec 2.11), with no way back
 * (a ban refuses its rejoin, and nobody lifts their own); muted, it could not speak in its own chat.
 * As its room:leave is refused, the chat is deleted instead. Warn, timeout, unban and unmute may.
 */
export function canRestrictInChat(chat: Pick<ChatForRules, 'ownerId'>, targetId: number): boolean {
  return chat.ownerId !== targetId;
}
