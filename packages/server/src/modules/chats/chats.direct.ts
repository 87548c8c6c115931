import { randomBytes } from 'node:crypto';
import { type Chat, Limits } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { MessagesService } from '../messages/messages.service.js';
import { toChat } from './chats.presenter.js';
import type { ChatsStore, ChatWithCount } from './chats.store.js';

export interface DirectChatsDeps {
  db: Db;
  store: ChatsStore;
  clock: Clock;
  messages: MessagesService;
  realtime: Pick<Realtime, 'emitTo' | 'io'>;
  /** The chat row (deleted chats: ERR_CHAT_NOT_FOUND). */
  mustGet: (chatId: number) => Promise<ChatWithCount>;
  /** Tells the chat-deletion listeners (the room VM stops theirs). */
  removedChats: (chatIds: number[]) => void;
}

/** Matched direct chats: creation, leaving (archive) and the expiry sweep. */
export function makeDirectChats(deps: DirectChatsDeps) {
  const { db, store, clock, messages, realtime, mustGet, removedChats } = deps;

  return {
    /**
     * A matched direct chat for two users: 24 h expiry, both members, the opening system message.
     * Answers the users as stored too (name and kind, read in the same statement).
     */
    async createDirect(
      userIds: number[],
      tags: string[],
    ): Promise<{ chat: Chat; token: string; users: { id: number; username: string; stranger: boolean }[] }> {
      const now = clock.now();
      const token = randomBytes(18).toString('base64url');
      const expiresAt = new Date(now.getTime() + Limits.DIRECT_CHAT_TTL_MS);
      const opening = { kind: 'match', tags, user_ids: userIds };
      const created = await store.insertDirect({ userIds, matchToken: token, expiresAt, at: now, opening });
      if (!created) throw appError('ERR_USER_NOT_FOUND');
      const system = messages.opening(created.id, opening, now);
      // Both users' sockets enter the room (one call) so the opening message and keys reach them.
      realtime.io.in(userIds.map((id) => rooms.user(id))).socketsJoin(rooms.chat(created.id));
      messages.publish(system);
      const chat = toChat({
        id: created.id,
        type: 'direct',
        name: created.users.map((u) => u.username).join(' & '),
        ownerUserId: null,
        epoch: created.epoch,
        msgMs: 0,
        msgSeq: 0,
        expiresAt,
        matchToken: token,
        archivedAt: null,
        createdAt: now,
        updatedAt: now,
        deletedAt: null,
        memberCount: userIds.length,
      });
      return { chat, token, users: created.users };
    },

    async activeDirect(userId: number) {
      return store.activeDirectOf(userId);
    },

    /** Leaves (archives) a direct chat: read-only for 24 hours; the peer sees a system message. */
    async leaveDirect(userId: number, chatId: number | undefined): Promise<number> {
      const active = await store.activeDirectOf(userId);
      const chat = chatId === undefined ? active[0] : active.find((c) => c.id === chatId);
      if (!chat) throw appError('ERR_NO_DIRECT_CHAT');
      const now = clock.now();
      const system = await db.transaction(async (tx) => {
        await store.update(chat.id, { archivedAt: now, updatedAt: now }, tx);
        await store.logActivity({ chatId: chat.id, userId, action: 'leave', createdAt: now }, tx);
        return messages.appendSystem(chat.id, { kind: 'leave', user_id: userId }, tx);
      });
      messages.publish(system);
      realtime.emitTo(rooms.chat(chat.id), 'chat:updated', { chat: toChat(await mustGet(chat.id)) });
      return chat.id;
    },

    /** The direct-chat lifecycle sweep: expired → archived, archived 24 h → removed. Safe on many nodes. */
    async sweepDirect(limit = 200): Promise<{ archived: number; removed: number }> {
      const now = clock.now();
      const archived = await store.sweepDirect('archive', now, now, limit);
      for (const c of archived)
        realtime.emitTo(rooms.chat(c.id), 'chat:updated', { chat: toChat({ ...c, memberCount: 2 }) });
      const removed = await store.sweepDirect(
        'remove',
        new Date(now.getTime() - Limits.DIRECT_ARCHIVE_TTL_MS),
        now,
        limit,
      );
      for (const c of removed) realtime.emitTo(rooms.chat(c.id), 'room:left', { chat_id: c.id, reason: 'deleted' });
      removedChats(removed.map((c) => c.id));
      return { archived: archived.length, removed: removed.length };
    },
  };
}
