import { AuditCodes } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import { type ActorLevel, canActOn } from '../admin/admin.rules.js';
import type { Actor, AuditStore } from '../audit/audit.store.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MessagesService } from '../messages/messages.service.js';
import type { AutomatedKind, NotificationsService } from '../notifications/notifications.service.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import { toPunishment } from '../users/users.presenter.js';
import type { UsersService } from '../users/users.service.js';
import type { Tx, UsersStore } from '../users/users.store.js';
import { canModerateChat, canTarget, canUnmute } from './moderation.rules.js';
import type { ModerationStore } from './moderation.store.js';

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

const until = (now: Date, seconds: number | undefined) => (seconds ? new Date(now.getTime() + seconds * 1000) : null);
const human = (seconds: number | undefined) => (seconds ? `${Math.ceil(seconds / 60)} minutes` : 'permanently');

export function makeModerationService(deps: ModerationDeps) {
  const { db, clock, store, usersStore, users, chats, messages, notifications, audit, realtime } = deps;

  /** Writes the notification in the transaction and announces it after the commit. */
  const notify = async (userId: number, kind: AutomatedKind, vars: Record<string, string>, tx: Tx) =>
    notifications.automated(userId, kind, vars, tx);

  const assertPlatformTarget = async (actor: Actor, level: ActorLevel, targetId: number) => {
    const target = await users.mustGet(targetId);
    if (actor.kind === 'user' && actor.id === targetId) throw appError('ERR_FORBIDDEN', 'You cannot act on yourself.');
    if (!canActOn(level, target.permissionLevel)) throw appError('ERR_FORBIDDEN');
    return target;
  };

  /** Drops every socket of a user, on every node (timeouts, bans). */
  const dropSockets = (userId: number) => realtime.io.in(rooms.user(userId)).disconnectSockets(true);

  const chatContext = async (actor: ChatActor, chatId: number, targetId: number, unmute = false) => {
    const chat = await chats.find(chatId);
    const ownerLevel = chat.ownerUserId ? (await users.mustGet(chat.ownerUserId)).permissionLevel : 0;
    const rules = { type: chat.type, ownerId: chat.ownerUserId, ownerLevel };
    if (!(unmute ? canUnmute : canModerateChat)({ userId: actor.userId, level: actor.level }, rules))
      throw appError('ERR_FORBIDDEN');
    const target = await users.mustGet(targetId);
    if (
      !canTarget({ userId: actor.userId, level: actor.level }, { userId: target.id, level: target.permissionLevel })
    ) {
      throw appError('ERR_FORBIDDEN', 'That user is out of your reach.');
    }
    return chat;
  };

  const platform = {
    /** Bans platform-wide: every session ends (sockets drop, keys go), login is refused until lifted. */
    async ban(
      actor: Actor,
      level: ActorLevel,
      targetId: number,
      body: { duration?: number; reason?: string },
      chatId: number | null = null,
    ) {
      await assertPlatformTarget(actor, level, targetId);
      const now = clock.now();
      const { record, note, ended } = await db.transaction(async (tx) => {
        await usersStore.update(targetId, { state: 2, stateExpiresAt: until(now, body.duration), updatedAt: now }, tx);
        const record = await store.record(
          {
            userId: targetId,
            chatId,
            actionType: 'PLATFORM_BAN',
            reason: body.reason ?? null,
            actorUserId: 'id' in actor ? actor.id : null,
            expiresAt: until(now, body.duration),
            createdAt: now,
          },
          tx,
        );
        await audit.record(
          {
            actor,
            code: AuditCodes.PUNISH_BAN,
            action: 'ban',
            targetUserId: targetId,
            reason: body.reason,
            data: { duration: body.duration ?? null },
          },
          tx,
        );
        const note = await notify(
          targetId,
          'banned',
          { duration: human(body.duration), reason: body.reason ?? '' },
          tx,
        );
        const ended = await deps.sessions.endAll(targetId, 'banned', tx);
        return { record, note, ended };
      });
      notifications.publish(note);
      realtime.disconnectSessions(ended);
      dropSockets(targetId);
      await deps.keys.removeSessions(targetId, ended, true);
      return toPunishment(record);
    },

    async unban(actor: Actor, level: ActorLevel, targetId: number, body: { reason?: string }) {
      await assertPlatformTarget(actor, level, targetId);
      const now = clock.now();
      const note = await db.transaction(async (tx) => {
        await usersStore.update(targetId, { state: 0, stateExpiresAt: null, updatedAt: now }, tx);
        await store.lift(targetId, ['PLATFORM_BAN'], null, now, tx);
        await audit.record(
          { actor, code: AuditCodes.PUNISH_UNBAN, action: 'unban', targetUserId: targetId, reason: body.reason },
          tx,
        );
        return notify(targetId, 'unbanned', {}, tx);
      });
      notifications.publish(note);
    },

    /** Times out platform-wide: sockets drop and every request answers 403 ERR_TIMED_OUT until expiry. */
    async timeout(
      actor: Actor,
      level: ActorLevel,
      targetId: number,
      body: { duration: number; reason?: string },
      chatId: number | null = null,
    ) {
      await assertPlatformTarget(actor, level, targetId);
      const now = clock.now();
      const { record, note } = await db.transaction(async (tx) => {
        await usersStore.update(targetId, { state: 1, stateExpiresAt: until(now, body.duration), updatedAt: now }, tx);
        const record = await store.record(
          {
            userId: targetId,
            chatId,
            actionType: 'PLATFORM_TIMEOUT',
            reason: body.reason ?? null,
            actorUserId: 'id' in actor ? actor.id : null,
            expiresAt: until(now, body.duration),
            createdAt: now,
          },
          tx,
        );
        await audit.record(
          {
            actor,
            code: AuditCodes.PUNISH_TIMEOUT,
            action: 'timeout',
            targetUserId: targetId,
            reason: body.reason,
            data: { duration: body.duration },
          },
          tx,
        );
        return {
          record,
          note: await notify(targetId, 'timed_out', { duration: human(body.duration), reason: body.reason ?? '' }, tx),
        };
      });
      notifications.publish(note);
      dropSockets(targetId);
      return toPunishment(record);
    },

    async warn(
      actor: Actor,
      level: ActorLevel,
      targetId: number,
      body: { reason?: string },
      chatId: number | null = null,
    ) {
      await assertPlatformTarget(actor, level, targetId);
      const now = clock.now();
      const { record, note } = await db.transaction(async (tx) => {
        const record = await store.record(
          {
            userId: targetId,
            chatId,
            actionType: 'PLATFORM_WARNING',
            reason: body.reason ?? null,
            actorUserId: 'id' in actor ? actor.id : null,
            createdAt: now,
          },
          tx,
        );
        await audit.record(
          { actor, code: AuditCodes.PUNISH_WARN, action: 'warn', targetUserId: targetId, reason: body.reason },
          tx,
        );
        return { record, note: await notify(targetId, 'warned', { reason: body.reason ?? '' }, tx) };
      });
      notifications.publish(note);
      return toPunishment(record);
    },
  };

  const recordChat = async (
    actor: ChatActor,
    chatId: number,
    targetId: number,
    actionType: string,
    code: number,
    body: { duration?: number; reason?: string },
    tx: Tx,
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
        action: actionType.toLowerCase(),
        targetUserId: targetId,
        reason: body.reason,
        data: { chat_id: chatId, duration: body.duration ?? null },
      },
      tx,
    );
    return record;
  };

  /** A system message in the chat, persisted so late joiners see it. */
  const announce = async (chatId: number, system: Record<string, unknown>) => {
    const message = await db.transaction((tx) => messages.appendSystem(chatId, system, tx));
    messages.publish(message);
  };

  const chat = {
    async kick(actor: ChatActor, chatId: number, body: { user_id: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id);
      let note: Awaited<ReturnType<typeof notify>> | undefined;
      const removed = await chats.expel(chatId, body.user_id, 'kick', actor.userId, body.reason ?? null, async (tx) => {
        await recordChat(actor, chatId, body.user_id, 'CHAT_KICK', AuditCodes.CHAT_KICK, body, tx);
        note = await notify(body.user_id, 'kicked', { reason: body.reason ?? '' }, tx);
      });
      if (!removed) throw appError('ERR_NOT_CHAT_MEMBER', 'That user is not in this chat.');
      if (note) notifications.publish(note);
    },

    /** Bans from the chat: removed now (if a member) and refused when joining again. */
    async ban(actor: ChatActor, chatId: number, body: { user_id: number; duration?: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id);
      await chats.expel(chatId, body.user_id, 'ban', actor.userId, body.reason ?? null, async (tx) => {
        await recordChat(actor, chatId, body.user_id, 'CHAT_BAN', AuditCodes.CHAT_BAN, body, tx);
      });
    },

    async unban(actor: ChatActor, chatId: number, body: { user_id: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id);
      const lifted = await store.lift(body.user_id, ['CHAT_BAN'], chatId, clock.now());
      await audit.record({
        actor: { kind: 'user', id: actor.userId },
        code: AuditCodes.CHAT_UNBAN,
        action: 'chat-unban',
        targetUserId: body.user_id,
        reason: body.reason,
        data: { chat_id: chatId, lifted },
      });
    },

    async mute(actor: ChatActor, chatId: number, body: { user_id: number; duration?: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id);
      await db.transaction((tx) =>
        recordChat(actor, chatId, body.user_id, 'CHAT_MUTE', AuditCodes.CHAT_MUTE, body, tx),
      );
      await announce(chatId, {
        kind: 'mute',
        user_id: body.user_id,
        actor_id: actor.userId,
        duration: body.duration ?? null,
        reason: body.reason ?? null,
      });
    },

    /** Spec 4.6 rule 3: removes this chat's mutes only, never a hard mute; user:unmuted to the chat. */
    async unmute(actor: ChatActor, chatId: number, body: { user_id: number }) {
      await chatContext(actor, chatId, body.user_id, true);
      await store.lift(body.user_id, ['CHAT_MUTE'], chatId, clock.now());
      await audit.record({
        actor: { kind: 'user', id: actor.userId },
        code: AuditCodes.CHAT_UNMUTE,
        action: 'chat-unmute',
        targetUserId: body.user_id,
        data: { chat_id: chatId },
      });
      realtime.emitTo(rooms.chat(chatId), 'user:unmuted', { chat_id: chatId, user_id: body.user_id });
    },

    async warn(actor: ChatActor, chatId: number, body: { user_id: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id);
      await platform.warn({ kind: 'user', id: actor.userId }, 'operator', body.user_id, body, chatId);
      await announce(chatId, {
        kind: 'warn',
        user_id: body.user_id,
        actor_id: actor.userId,
        reason: body.reason ?? null,
      });
    },

    /** Spec 4.6: a timeout from a chat applies platform-wide. */
    async timeout(actor: ChatActor, chatId: number, body: { user_id: number; duration: number; reason?: string }) {
      await chatContext(actor, chatId, body.user_id);
      await platform.timeout({ kind: 'user', id: actor.userId }, 'operator', body.user_id, body, chatId);
    },
  };

  return {
    platform,
    chat,

    /** Hard mute: a mute in every chat (Moderators and above); chat unmutes do not lift it. */
    async hardMute(actor: ChatActor, body: { user_id: number; duration?: number; reason?: string }) {
      const target = await users.mustGet(body.user_id);
      if (actor.level < 1 || !canTarget(actor, { userId: target.id, level: target.permissionLevel }))
        throw appError('ERR_FORBIDDEN');
      const now = clock.now();
      await db.transaction(async (tx) => {
        await store.record(
          {
            userId: target.id,
            chatId: null,
            actionType: 'CHAT_MUTE',
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
            code: AuditCodes.HARD_MUTE,
            action: 'hard-mute',
            targetUserId: target.id,
            reason: body.reason,
            data: { duration: body.duration ?? null },
          },
          tx,
        );
      });
    },

    async hardUnmute(actor: ChatActor, body: { user_id: number }) {
      const target = await users.mustGet(body.user_id);
      if (actor.level < 1 || !canTarget(actor, { userId: target.id, level: target.permissionLevel }))
        throw appError('ERR_FORBIDDEN');
      await store.lift(target.id, ['CHAT_MUTE'], null, clock.now());
      await audit.record({
        actor: { kind: 'user', id: actor.userId },
        code: AuditCodes.HARD_UNMUTE,
        action: 'hard-unmute',
        targetUserId: target.id,
      });
    },

    /** Lifts records whose time is up and restores users whose timeout or ban ended. Safe on many nodes. */
    async sweep(): Promise<{ lifted: number; restored: number }> {
      const now = clock.now();
      const lifted = await store.liftExpired(now, 500);
      const restored = await store.restoreExpiredStates(now);
      return { lifted: lifted.length, restored: restored.length };
    },
  };
}

export type ModerationService = ReturnType<typeof makeModerationService>;
