import { AuditCodes, Limits } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { drain } from '../../platform/drain.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import { lockCallerAndTarget } from '../admin/admin.locks.js';
import type { AuditStore } from '../audit/audit.store.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MessagesService } from '../messages/messages.service.js';
import type { AutomatedKind, NotificationsService } from '../notifications/notifications.service.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import type { UsersService } from '../users/users.service.js';
import type { Tx, UserRow, UsersStore } from '../users/users.store.js';
import { type InChat, makePlatformModeration, until } from './moderation.platform.js';
import { canModerateChat, canMute, canTarget } from './moderation.rules.js';
import type { ModerationStore } from './moderation.store.js';

/** Who may moderate a chat and whom a chat action reaches (spec 4.6 rule 2), for modules acting in chats (messages). */
export { canModerateChat, canTarget } from './moderation.rules.js';

/** Punishments lifted, or users restored, per statement of the expiry sweep. */
export const EXPIRY_BATCH = 500;
/** Batches per step and tick (30 s): up to 5,000 of each per node, then the next tick goes on. */
export const EXPIRY_MAX_BATCHES = 10;

export interface ModerationDeps {
  db: Db;
  clock: Clock;
  store: ModerationStore;
  usersStore: UsersStore;
  users: Pick<UsersService, 'mustGet'>;
  chats: ChatsService;
  sessions: SessionsService;
  keys: KeysService;
  messages: MessagesService;
  notifications: NotificationsService;
  audit: AuditStore;
  realtime: Pick<Realtime, 'emitTo' | 'io' | 'disconnectSessions'>;
}

/** A chat moderator: a signed-in user acting through the chat routes. */
export interface ChatActor {
  userId: number;
  level: number;
}

/** A chat as an action read it under the chat row's lock (holdChat), and the rule it asks for. */
interface HeldChat {
  chat: { type: string; ownerUserId: number | null };
  ownerLevel: number;
  /** The rule of mute and unmute (spec 4.6 rule 3), else that of the other actions. */
  mute: boolean;
}

export function makeModerationService(deps: ModerationDeps) {
  const { db, clock, store, usersStore, users, chats, messages, notifications, audit, realtime } = deps;

  /** Writes the notification in the transaction and announces it after the commit. */
  const notify = async (userId: number, kind: AutomatedKind, vars: Record<string, string>, tx: Tx) =>
    notifications.automated(userId, kind, vars, tx);

  /** Bans, timeouts and warnings platform-wide (moderation.platform.ts). */
  const platform = makePlatformModeration({
    db,
    clock,
    store,
    usersStore,
    users,
    sessions: deps.sessions,
    keys: deps.keys,
    notifications,
    audit,
    realtime,
    notify,
  });

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
    const { level, target } = await lockCallerAndTarget(tx, actor.userId, targetId, clock.now());
    if (!target) throw appError('ERR_USER_NOT_FOUND');
    assertMayAct({ userId: actor.userId, level }, target, opts);
    return target;
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
   * users' rows in opposite orders.
   */
  const decideOnLocked = async (
    tx: Tx,
    actor: ChatActor,
    chat: { type: string; ownerUserId: number | null },
    mute = false,
  ): Promise<HeldChat> => {
    const owner = chat.ownerUserId === null ? undefined : await usersStore.byId(chat.ownerUserId, tx);
    const held = {
      chat: { type: chat.type, ownerUserId: chat.ownerUserId },
      ownerLevel: owner?.permissionLevel ?? 0,
      mute,
    };
    assertMayModerate(actor, held.chat, held.ownerLevel, mute);
    return held;
  };

  /**
   * Locks the chat row for an action's transaction (ModerationStore.lockChat: `write` for one that
   * writes in the chat, else FOR SHARE) and decides the chat rules on it (decideOnLocked). An
   * action that writes in the chat (a system message) answers ERR_CHAT_READ_ONLY in an archived one
   * (spec 3), as sends and deletes do. Answers the chat as held (decideOnLocked).
   */
  const holdChat = async (tx: Tx, actor: ChatActor, chatId: number, opts: { mute?: boolean; write?: boolean } = {}) => {
    const chat = await store.lockChat(chatId, clock.now(), tx, opts.write ? 'write' : 'share');
    if (!chat) throw appError('ERR_CHAT_NOT_FOUND');
    const held = await decideOnLocked(tx, actor, chat, opts.mute);
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
   * CHAT_FORMER_MEMBER_REACH_MS. Refused early without a lock; the decisions that count are made
   * again under the locks (holdChat, decideOnLocked, lockReachable).
   */
  const chatContext = async (
    actor: ChatActor,
    chatId: number,
    targetId: number,
    opts: { mute?: boolean; member?: boolean } = {},
  ) => {
    const chat = await chats.find(chatId);
    const ownerLevel = chat.ownerUserId ? (await users.mustGet(chat.ownerUserId)).permissionLevel : 0;
    assertMayModerate(actor, chat, ownerLevel, opts.mute);
    if (!reachOf(actor)(await users.mustGet(targetId)))
      throw appError('ERR_FORBIDDEN', 'That user is out of your reach.');
    const since = new Date(clock.now().getTime() - Limits.CHAT_FORMER_MEMBER_REACH_MS);
    if (opts.member && !(await chats.memberSince(chatId, targetId, since)))
      throw appError('ERR_NOT_CHAT_MEMBER', 'That user is not in this chat.');
    return chat;
  };

  /**
   * Lifts a chat restriction (`chatId` null: a hard one) and writes its audit entry in one
   * transaction, under the target's row lock: an unban or unmute is never recorded without taking
   * effect, nor the reverse. Nothing to lift: nothing is recorded; answers how many were lifted.
   * A chat's is decided on its row held FOR SHARE (holdChat); it writes nothing in the chat, so an
   * archived chat's restrictions may be lifted.
   */
  const liftChat = (
    actor: ChatActor,
    targetId: number,
    type: 'CHAT_BAN' | 'CHAT_MUTE',
    chatId: number | null,
    entry: { code: number; action: string; reason?: string; withCount?: boolean },
  ): Promise<number> =>
    db.transaction(async (tx) => {
      const held = chatId === null ? undefined : await holdChat(tx, actor, chatId, { mute: type === 'CHAT_MUTE' });
      await lockReachable(tx, actor, targetId, { held, hard: chatId === null });
      const lifted = await store.lift(targetId, [type], chatId, clock.now(), tx);
      if (lifted === 0) return 0;
      await audit.record(
        {
          actor: { kind: 'user', id: actor.userId },
          code: entry.code,
          action: entry.action,
          targetUserId: targetId,
          reason: entry.reason,
          ...(chatId === null ? {} : { data: { chat_id: chatId, ...(entry.withCount ? { lifted } : {}) } }),
        },
        tx,
      );
      return lifted;
    });

  /** A chat restriction record and its audit entry; `chatId` null is a hard (every-chat) one. */
  const recordChat = async (
    actor: ChatActor,
    chatId: number | null,
    targetId: number,
    actionType: string,
    code: number,
    body: { duration?: number; reason?: string },
    tx: Tx,
    action = actionType.toLowerCase(),
  ) => {
    const now = clock.now();
    const record = await store.record(
      {
        userId: targetId,
        chatId,
        actionType,
        reason: body.reason ?? null,
        actorUserId: actor.userId,
        expiresAt: until(now, body.duration),
        createdAt: now,
      },
      tx,
    );
    await audit.record(
      {
        actor: { kind: 'user', id: actor.userId },
        code,
        action,
        targetUserId: targetId,
        reason: body.reason,
        data: { chat_id: chatId, duration: body.duration ?? null },
      },
      tx,
    );
    return record;
  };

  /** Hard mutes: Moderators and above, on users they reach (decided again under the locks: lockReachable). */
  const hardMuteTarget = async (actor: ChatActor, userId: number) => {
    const target = await users.mustGet(userId);
    if (actor.level < 1 || !reachOf(actor)(target)) throw appError('ERR_FORBIDDEN');
    return target;
  };

  const chat = {
    async kick(actor: ChatActor, chatId: number, body: { user_id: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id);
      let note: Awaited<ReturnType<typeof notify>> | undefined;
      let held: HeldChat | undefined;
      const removed = await chats.expel(chatId, body.user_id, 'kick', actor.userId, body.reason ?? null, {
        decide: async (locked, tx) => {
          held = await decideOnLocked(tx, actor, locked);
        },
        extra: async (tx) => {
          await lockReachable(tx, actor, body.user_id, { held });
          await recordChat(actor, chatId, body.user_id, 'CHAT_KICK', AuditCodes.CHAT_KICK, body, tx);
          note = await notify(body.user_id, 'kicked', { reason: body.reason ?? '' }, tx);
        },
      });
      if (!removed) throw appError('ERR_NOT_CHAT_MEMBER', 'That user is not in this chat.');
      if (note) notifications.publish(note);
    },

    /** Bans from the chat: removed now (if a member) and refused when joining again. */
    async ban(actor: ChatActor, chatId: number, body: { user_id: number; duration?: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id);
      let held: HeldChat | undefined;
      await chats.expel(chatId, body.user_id, 'ban', actor.userId, body.reason ?? null, {
        decide: async (locked, tx) => {
          held = await decideOnLocked(tx, actor, locked);
        },
        extra: async (tx) => {
          await lockReachable(tx, actor, body.user_id, { held });
          await recordChat(actor, chatId, body.user_id, 'CHAT_BAN', AuditCodes.CHAT_BAN, body, tx);
        },
      });
    },

    async unban(actor: ChatActor, chatId: number, body: { user_id: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id);
      await liftChat(actor, body.user_id, 'CHAT_BAN', chatId, {
        code: AuditCodes.CHAT_UNBAN,
        action: 'chat-unban',
        reason: body.reason,
        withCount: true,
      });
    },

    async mute(actor: ChatActor, chatId: number, body: { user_id: number; duration?: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id, { mute: true });
      // The record, its audit entry and the system message (spec 2.9) commit together. The chat
      // row's lock (the system message's id) comes before the target's, as for a kick or a join.
      // The mute also marks the chat row (messages.restrict): a send by the target waiting for that
      // row read its checks before the mute, and must not land after the system message.
      const system = await db.transaction(async (tx) => {
        const held = await holdChat(tx, actor, chatId, { mute: true, write: true });
        await lockReachable(tx, actor, body.user_id, { held });
        await recordChat(actor, chatId, body.user_id, 'CHAT_MUTE', AuditCodes.CHAT_MUTE, body, tx);
        await messages.restrict(chatId, tx);
        return messages.appendSystem(
          chatId,
          {
            kind: 'mute',
            user_id: body.user_id,
            actor_id: actor.userId,
            duration: body.duration ?? null,
            reason: body.reason ?? null,
          },
          tx,
        );
      });
      messages.publish(system);
    },

    /**
     * Spec 4.6 rule 3: removes this chat's mutes only, never a hard mute; user:unmuted to the chat.
     * No mute of this chat to lift: 200 with nothing recorded and no event.
     */
    async unmute(actor: ChatActor, chatId: number, body: { user_id: number }) {
      await chatContext(actor, chatId, body.user_id, { mute: true });
      const lifted = await liftChat(actor, body.user_id, 'CHAT_MUTE', chatId, {
        code: AuditCodes.CHAT_UNMUTE,
        action: 'chat-unmute',
      });
      if (lifted > 0) realtime.emitTo(rooms.chat(chatId), 'user:unmuted', { chat_id: chatId, user_id: body.user_id });
    },

    async warn(actor: ChatActor, chatId: number, body: { user_id: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id, { member: true });
      // The warning and the system message (spec 2.9) commit together, the chat row locked first
      // as for a write in the chat.
      let system: Awaited<ReturnType<typeof messages.appendSystem>> | undefined;
      await platform.warn({ kind: 'user', id: actor.userId }, actor.level, body.user_id, body, {
        ...inChat(actor, chatId, { write: true }),
        write: async (tx) => {
          const details = { kind: 'warn', user_id: body.user_id, actor_id: actor.userId, reason: body.reason ?? null };
          system = await messages.appendSystem(chatId, details, tx);
        },
      });
      if (system) messages.publish(system);
    },

    /**
     * Spec 4.6: a timeout from a chat applies platform-wide. It writes nothing in the chat, so an
     * archived one does not refuse it; spec 4.6 rule 2 is decided on the chat row held FOR SHARE.
     */
    async timeout(actor: ChatActor, chatId: number, body: { user_id: number; duration: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id, { member: true });
      await platform.timeout(
        { kind: 'user', id: actor.userId },
        actor.level,
        body.user_id,
        body,
        inChat(actor, chatId),
      );
    },
  };

  return {
    platform,
    chat,

    /** Hard mute: a mute in every chat (Moderators and above); chat unmutes do not lift it. */
    async hardMute(actor: ChatActor, body: { user_id: number; duration?: number; reason?: string }) {
      const target = await hardMuteTarget(actor, body.user_id);
      await db.transaction(async (tx) => {
        await lockReachable(tx, actor, target.id, { hard: true });
        await recordChat(actor, null, target.id, 'CHAT_MUTE', AuditCodes.HARD_MUTE, body, tx, 'hard-mute');
      });
    },

    async hardUnmute(actor: ChatActor, body: { user_id: number }) {
      const target = await hardMuteTarget(actor, body.user_id);
      await liftChat(actor, target.id, 'CHAT_MUTE', null, { code: AuditCodes.HARD_UNMUTE, action: 'hard-unmute' });
    },

    /**
     * Lifts records whose time is up and settles users whose timeout or ban ended to the state
     * their other records still give: each in batches of `batch` while they come back full, at most
     * `maxBatches` a tick (the next tick goes on). `restored` counts the users back to Active (a
     * user whose timeout outlasts a temporary ban moves to Timeout, and is not counted). Safe on
     * many nodes.
     */
    async sweep(opts: { batch?: number; maxBatches?: number } = {}): Promise<{ lifted: number; restored: number }> {
      const size = opts.batch ?? EXPIRY_BATCH;
      const maxBatches = opts.maxBatches ?? EXPIRY_MAX_BATCHES;
      const now = clock.now();
      const lifted = await drain(size, maxBatches, async () => (await store.liftExpired(now, size)).length);
      let restored = 0;
      await drain(size, maxBatches, async () => {
        const settled = await store.restoreExpiredStates(now, size);
        restored += settled.filter((u) => u.state === 0).length;
        return settled.length;
      });
      return { lifted, restored };
    },
  };
}

export type ModerationService = ReturnType<typeof makeModerationService>;
