import { Limits } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import { lockCallerAndTarget } from '../admin/admin.locks.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { UsersService } from '../users/users.service.js';
import type { Tx, UserRow, UsersStore } from '../users/users.store.js';
import type { InChat } from './moderation.platform.js';
import { canModerateChat, canMute, canRestrictInChat, canTarget } from './moderation.rules.js';
import type { ModerationStore } from './moderation.store.js';

export interface ChatDecisionsDeps {
  clock: Clock;
  store: Pick<ModerationStore, 'lockChat'>;
  usersStore: Pick<UsersStore, 'byId'>;
  users: Pick<UsersService, 'mustGet'>;
  chats: Pick<ChatsService, 'find' | 'memberSince'>;
}

/** A chat moderator: a signed-in user acting through the chat routes. */
export interface ChatActor {
  userId: number;
  level: number;
}

/** A chat as an action read it under the chat row's lock (holdChat), and the rule it asks for. */
export interface HeldChat {
  chat: { type: string; ownerUserId: number | null };
  ownerLevel: number;
  /** The rule of mute and unmute (spec 4.6 rule 3), else that of the other actions. */
  mute: boolean;
}

/**
 * The chat actions' decisions (spec 4.6 rules 2-3, the reach) and their locks, for
 * moderation.service.ts: refused early without a lock (chatContext, hardMuteTarget), then decided
 * again under the chat row's lock (holdChat, decideOnLocked) and the users rows' (lockReachable).
 */
export function makeChatDecisions(deps: ChatDecisionsDeps) {
  const { clock, store, usersStore, users, chats } = deps;

  /** The chat rule on whom a moderator reaches (moderation.rules canTarget), on a users row. */
  const reachOf =
    (actor: ChatActor) =>
    (target: UserRow): boolean =>
      canTarget({ userId: actor.userId, level: actor.level }, { userId: target.id, level: target.permissionLevel });

  /**
   * Whether `actor` may take the action on `target`: the chat's rule on the chat as held (`held`,
   * when the action names a chat and its row is locked), the hard-mute rule (`hard`: Moderators
   * and above), and the reach. Throws to refuse.
   */
  const assertMayAct = (actor: ChatActor, target: UserRow, opts: { held?: HeldChat | undefined; hard?: boolean }) => {
    const { held } = opts;
    if (held) assertMayModerate(actor, held.chat, held.ownerLevel, held.mute);
    if (opts.hard && actor.level < 1) throw appError('ERR_FORBIDDEN');
    if (!reachOf(actor)(target)) throw appError('ERR_FORBIDDEN', 'That user is out of your reach.');
  };

  /**
   * Takes the caller's and the target's row locks for the rest of the transaction (one statement,
   * id order, after the chat row's: lockCallerAndTarget) and decides the action again on the rows
   * read under them, with the caller's level as read there (assertMayAct): a promotion of the
   * target committed since chatContext read the row counts, and so does a demotion of the caller
   * (a Moderator demoted to User while its kick runs in a public chat kicks nobody); a caller
   * deleted, banned or timed out meanwhile is refused (403), a target deleted meanwhile answers 404 (never a
   * foreign-key error).
   */
  const lockReachable = async (
    tx: Tx,
    actor: ChatActor,
    targetId: number,
    opts: { held?: HeldChat | undefined; hard?: boolean } = {},
  ) => {
    const { level, target } = await lockCallerAndTarget(tx, actor.userId, targetId, clock);
    if (!target) throw appError('ERR_USER_NOT_FOUND');
    assertMayAct({ userId: actor.userId, level }, target, opts);
    return target;
  };

  /** A kick, ban or mute of `targetId` in the chat: refused when it is the chat's owner (canRestrictInChat). */
  const assertMayRestrict = (chat: { ownerUserId: number | null }, targetId: number) => {
    if (!canRestrictInChat({ ownerId: chat.ownerUserId }, targetId))
      throw appError('ERR_FORBIDDEN', "The chat's owner cannot be kicked, banned or muted in its own chat.");
  };

  /** Spec 4.6 rules 2-3 (`mute`: the rule of mute and unmute) on a chat and its owner's level. */
  const assertMayModerate = (
    actor: ChatActor,
    chat: { type: string; ownerUserId: number | null },
    ownerLevel: number,
    mute = false,
  ) => {
    const rules = { type: chat.type, ownerId: chat.ownerUserId, ownerLevel };
    if (!(mute ? canMute : canModerateChat)({ userId: actor.userId, level: actor.level }, rules))
      throw appError('ERR_FORBIDDEN');
  };

  /**
   * Decides the chat rules again in the action's transaction, on the chat row it has locked and its
   * owner's level read there (after the lock): a chat made private, or given another owner, while
   * the action ran counts (ERR_FORBIDDEN, nothing written). Before the users rows' locks, in the
   * order chats, users, sessions (docs/api.md Moderation); answers the chat as held, for the
   * decision on the caller's level read under its row lock (lockReachable). The owner's row is
   * read, not locked: a third users row locked besides the caller's and the target's could take
   * users' rows in opposite orders. `mute`: the rule of mute and unmute; `restricting`: the user a
   * kick, ban or mute takes, refused when it owns the chat as locked (assertMayRestrict), so an
   * owner change committed before counts.
   */
  const decideOnLocked = async (
    tx: Tx,
    actor: ChatActor,
    chat: { type: string; ownerUserId: number | null },
    opts: { mute?: boolean; restricting?: number } = {},
  ): Promise<HeldChat> => {
    const mute = opts.mute ?? false;
    const owner = chat.ownerUserId === null ? undefined : await usersStore.byId(chat.ownerUserId, tx);
    const held = {
      chat: { type: chat.type, ownerUserId: chat.ownerUserId },
      ownerLevel: owner?.permissionLevel ?? 0,
      mute,
    };
    assertMayModerate(actor, held.chat, held.ownerLevel, mute);
    if (opts.restricting !== undefined) assertMayRestrict(chat, opts.restricting);
    return held;
  };

  /**
   * Locks the chat row for an action's transaction (ModerationStore.lockChat: `write` for one that
   * writes in the chat, else FOR SHARE) and decides the chat rules on it (decideOnLocked). An
   * action that writes in the chat (a system message) answers ERR_CHAT_READ_ONLY in an archived one
   * (spec 3), as sends and deletes do. Answers the chat as held (decideOnLocked, which `mute` and
   * `restricting` are for).
   */
  const holdChat = async (
    tx: Tx,
    actor: ChatActor,
    chatId: number,
    opts: { mute?: boolean; write?: boolean; restricting?: number } = {},
  ) => {
    const chat = await store.lockChat(chatId, clock.now(), tx, opts.write ? 'write' : 'share');
    if (!chat) throw appError('ERR_CHAT_NOT_FOUND');
    const held = await decideOnLocked(tx, actor, chat, { mute: opts.mute, restricting: opts.restricting });
    if (opts.write && chat.archived) throw appError('ERR_CHAT_READ_ONLY');
    return held;
  };

  /**
   * A chat's warning or timeout, given as a platform punishment: the chat row held and its rule
   * decided first (holdChat), then the platform punishment's lock of the caller's and the target's
   * rows, under which the chat's rule and the reach are decided again on the caller's level read
   * there (assertMayAct; before the hold, on the session's: only the reach).
   */
  const inChat = (actor: ChatActor, chatId: number, opts: { write?: boolean } = {}): InChat => {
    let held: HeldChat | undefined;
    return {
      chatId,
      hold: async (tx) => {
        held = await holdChat(tx, actor, chatId, opts);
      },
      decide: (target, level) => assertMayAct({ userId: actor.userId, level }, target, { held }),
    };
  };

  /**
   * The chat a moderation names, once the actor may moderate it (spec 4.6 rules 2-3: `mute` for
   * mute and unmute) and reaches the target. `member`: the action reaches beyond the chat (a
   * platform timeout or warning), so the target must be a member, or have been one within
   * CHAT_FORMER_MEMBER_REACH_MS. `restrict`: a kick, ban or mute, which never takes the chat's
   * owner (assertMayRestrict). Refused early without a lock; the decisions that count are made
   * again under the locks (holdChat, decideOnLocked, lockReachable).
   */
  const chatContext = async (
    actor: ChatActor,
    chatId: number,
    targetId: number,
    opts: { mute?: boolean; member?: boolean; restrict?: boolean } = {},
  ) => {
    const chat = await chats.find(chatId);
    const ownerLevel = chat.ownerUserId ? (await users.mustGet(chat.ownerUserId)).permissionLevel : 0;
    assertMayModerate(actor, chat, ownerLevel, opts.mute);
    if (opts.restrict) assertMayRestrict(chat, targetId);
    if (!reachOf(actor)(await users.mustGet(targetId)))
      throw appError('ERR_FORBIDDEN', 'That user is out of your reach.');
    const since = new Date(clock.now().getTime() - Limits.CHAT_FORMER_MEMBER_REACH_MS);
    if (opts.member && !(await chats.memberSince(chatId, targetId, since)))
      throw appError('ERR_NOT_CHAT_MEMBER', 'That user is not in this chat.');
    return chat;
  };

  /** Hard mutes: Moderators and above, on users they reach (decided again under the locks: lockReachable). */
  const hardMuteTarget = async (actor: ChatActor, userId: number) => {
    const target = await users.mustGet(userId);
    if (actor.level < 1 || !reachOf(actor)(target)) throw appError('ERR_FORBIDDEN');
    return target;
  };

  return { chatContext, holdChat, decideOnLocked, lockReachable, inChat, hardMuteTarget };
}
