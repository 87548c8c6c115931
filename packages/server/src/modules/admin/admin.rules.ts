/**
 * The level rules of spec 2.11, as pure functions so every actor × target pair is tested.
 * The operator (CLI) stands above every level.
 */
export type ActorLevel = number | 'operator';

const OWNER = 3;
const ADMIN = 2;

/**
 * Whether a caller may use the admin surface at all: the operator, Admins and Owners. The admin
 * actions on a user ask it again of the caller's level as read under its row lock, so a caller
 * demoted (or deleted) while its request ran is refused (admin.service.ts).
 */
export function mayAdminister(actor: ActorLevel): boolean {
  return actor === 'operator' || actor >= ADMIN;
}

/** Admins act only on users below their level; Owners on everyone, other Owners included. */
export function canActOn(actor: ActorLevel, targetLevel: number): boolean {
  if (actor === 'operator') return true;
  if (actor === OWNER) return true;
  return actor >= ADMIN && targetLevel < actor;
}

/** The highest level an actor may assign: Admin → User, Owner → Admin, operator → Owner. */
export function maxAssignableLevel(actor: ActorLevel): number {
  if (actor === 'operator') return OWNER;
  if (actor === OWNER) return ADMIN;
  if (actor === ADMIN) return 0;
  return -1;
}

export function canSetLevel(actor: ActorLevel, targetLevel: number, newLevel: number): boolean {
  return canActOn(actor, targetLevel) && newLevel <= maxAssignableLevel(actor);
}

/**
 * Official bots and official chats are the platform's own (DESIGN.md: "official created by
 * Owner/CLI"): only Owners and the operator create them, change them or remove them, and only
 * they make a bot official. Admins manage every other bot and chat.
 */
export function canManageOfficial(actor: ActorLevel): boolean {
  return actor === 'operator' || actor >= OWNER;
}
