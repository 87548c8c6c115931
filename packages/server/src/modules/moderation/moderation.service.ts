import { AuditCodes } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { AuditStore } from '../audit/audit.store.js';
import type { DirectLeft } from '../chats/chats.direct.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MessagesService } from '../messages/messages.service.js';
import type { AutomatedKind, NotificationsService } from '../notifications/notifications.service.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import type { UsersService } from '../users/users.service.js';
import type { Tx, UsersStore } from '../users/users.store.js';
import { type ChatActor, type HeldChat, makeChatDecisions } from './moderation.decisions.js';
import { makePlatformModeration, type PlatformModerationDeps, until } from './moderation.platform.js';
import type { ModerationStore } from './moderation.store.js';
import { makeExpirySweep } from './moderation.sweep.js';

/** A chat moderator (moderation.decisions.ts), for the chat routes. */
export type { ChatActor } from './moderation.decisions.js';
/** Who may moderate a chat and whom a chat action reaches (spec 4.6 rule 2), for modules acting in chats (messages). */
export { canModerateChat, canTarget } from './moderation.rules.js';

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
  /** The address that made a stranger's account, for a ban's hooks (moderation.platform.ts). */
  strangerAddress: PlatformModerationDeps['strangerAddress'];
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
    users,
    sessions: deps.sessions,
    keys: deps.keys,
    notifications,
    audit,
    realtime,
    notify,
    strangerAddress: deps.strangerAddress,
  });

  /** The chat actions' decisions and locks (moderation.decisions.ts). */
  const { chatContext, holdChat, decideOnLocked, lockReachable, inChat, hardMuteTarget } = makeChatDecisions({
    clock,
    store,
    usersStore,
    users,
    chats,
  });

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

  /**
   * A direct chat a kick or ban removed a member from ends as at a leave (chats endExpelledIn), in
   * the removal's transaction: the peer alone could never write there again, and would hold its
   * direct-chat slot until the expiry. Answers what to announce after the commit (announceLeft).
   */
  const endDirect = async (held: HeldChat | undefined, chatId: number, done: { removed: boolean; at: Date }, tx: Tx) =>
    done.removed && held?.chat.type === 'direct' ? chats.endExpelledIn(chatId, done.at, tx) : undefined;

  const chat = {
    /** Removes the member now; never the chat's owner (moderation.rules canRestrictInChat). */
    async kick(actor: ChatActor, chatId: number, body: { user_id: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id, { restrict: true });
      let note: Awaited<ReturnType<typeof notify>> | undefined;
      let held: HeldChat | undefined;
      let ended: DirectLeft | undefined;
      const removed = await chats.expel(chatId, body.user_id, 'kick', actor.userId, body.reason ?? null, {
        decide: async (locked, tx) => {
          held = await decideOnLocked(tx, actor, locked, { restricting: body.user_id });
        },
        extra: async (tx, done) => {
          const target = await lockReachable(tx, actor, body.user_id, { held });
          await recordChat(actor, chatId, body.user_id, 'CHAT_KICK', AuditCodes.CHAT_KICK, body, tx);
          // A stranger gets no notifications (docs/api.md Strangers), as in platform punishments.
          if (!target.isStranger) note = await notify(body.user_id, 'kicked', { reason: body.reason ?? '' }, tx);
          ended = await endDirect(held, chatId, done, tx);
        },
      });
      if (!removed) throw appError('ERR_NOT_CHAT_MEMBER', 'That user is not in this chat.');
      if (note) notifications.publish(note);
      if (ended) await chats.announceLeft(ended);
    },

    /** Bans from the chat: removed now (if a member) and refused when joining again; never its owner. */
    async ban(actor: ChatActor, chatId: number, body: { user_id: number; duration?: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id, { restrict: true });
      let held: HeldChat | undefined;
      let ended: DirectLeft | undefined;
      await chats.expel(chatId, body.user_id, 'ban', actor.userId, body.reason ?? null, {
        decide: async (locked, tx) => {
          held = await decideOnLocked(tx, actor, locked, { restricting: body.user_id });
        },
        extra: async (tx, done) => {
          await lockReachable(tx, actor, body.user_id, { held });
          await recordChat(actor, chatId, body.user_id, 'CHAT_BAN', AuditCodes.CHAT_BAN, body, tx);
          ended = await endDirect(held, chatId, done, tx);
        },
      });
      if (ended) await chats.announceLeft(ended);
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

    /** Mutes in this chat (no notification, a system message); never the chat's owner. */
    async mute(actor: ChatActor, chatId: number, body: { user_id: number; duration?: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id, { mute: true, restrict: true });
      // The record, its audit entry and the system message (spec 2.9) commit together. The chat
      // row's lock (the system message's id) comes before the target's, as for a kick or a join.
      // The mute also marks the chat row (messages.restrict): a send by the target waiting for that
      // row read its checks before the mute, and must not land after the system message.
      const system = await db.transaction(async (tx) => {
        const held = await holdChat(tx, actor, chatId, { mute: true, write: true, restricting: body.user_id });
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

    sweep: makeExpirySweep(store, clock),
  };
}

export type ModerationService = ReturnType<typeof makeModerationService>;
