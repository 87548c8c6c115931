import { randomBytes } from 'node:crypto';
import type { Chat, RoomJoinPayload } from '@parlor/protocol';
import { sql } from 'drizzle-orm';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms, type SocketData } from '../../platform/realtime.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MessagesService } from '../messages/messages.service.js';
import type { UsersService } from '../users/users.service.js';
import { toActivity, toChat, toInvite } from './chats.presenter.js';
import { canManage, canReadActivity, chatSlots, type Viewer } from './chats.rules.js';
import type { ChatsStore, ChatWithCount } from './chats.store.js';

export interface ChatsDeps {
  db: Db;
  store: ChatsStore;
  clock: Clock;
  keys: KeysService;
  messages: MessagesService;
  users: Pick<UsersService, 'hasPremium'>;
  realtime: Pick<Realtime, 'emitTo' | 'leaveChat' | 'io'>;
}

type JoinMethod = 'direct' | 'invite' | 'vanity';

export function makeChatsService(deps: ChatsDeps) {
  const { db, store, clock, keys, messages, realtime } = deps;

  const mustGet = async (chatId: number): Promise<ChatWithCount> => {
    const chat = await store.byId(chatId);
    if (!chat) throw appError('ERR_CHAT_NOT_FOUND');
    return chat;
  };

  /** Private and direct chats are for their members (and owner, and Admins for private ones). */
  const assertCanSee = async (viewer: Viewer, chat: ChatWithCount) => {
    if (chat.type === 'public' || chat.type === 'official') return;
    if (await store.isMember(chat.id, viewer.userId)) return;
    if (chat.type === 'private' && canManage(viewer, chat.ownerUserId)) return;
    throw appError('ERR_CANNOT_BROWSE_PRIVATE');
  };

  const assertManager = (viewer: Viewer, chat: ChatWithCount) => {
    if (!canManage(viewer, chat.ownerUserId)) throw appError('ERR_FORBIDDEN');
  };

  /** One entry per connected session in the chat room, across nodes. */
  const presence = async (chatId: number) => {
    const sockets = await realtime.io.in(rooms.chat(chatId)).fetchSockets();
    const seen = new Map<number, { user_id: number; session_id: number; username: string }>();
    for (const s of sockets) {
      seen.set(s.data.sessionId, { user_id: s.data.userId, session_id: s.data.sessionId, username: s.data.username });
    }
    return [...seen.values()].sort((a, b) => a.session_id - b.session_id);
  };

  const broadcastMembers = async (chatId: number) => {
    realtime.emitTo(rooms.chat(chatId), 'room:members', { chat_id: chatId, members: await presence(chatId) });
  };

  /** Resolves what room:join names: a chat id, an invite code (spent on joining) or a vanity. */
  const resolveJoin = async (
    payload: RoomJoinPayload,
  ): Promise<{ chatId: number; method: JoinMethod; invite: string | null }> => {
    if ('chat_id' in payload) return { chatId: payload.chat_id, method: 'direct', invite: null };
    if ('invite' in payload) {
      const live = (await store.invitesOfCode(payload.invite, clock.now()))[0];
      if (!live) throw appError('ERR_INVITE_NOT_FOUND');
      return { chatId: live.chatId, method: 'invite', invite: payload.invite };
    }
    // Guild vanities arrive with the guilds work; until then no chat has one.
    throw appError('ERR_INVITE_NOT_FOUND', 'No chat uses this vanity.');
  };

  return {
    presence,
    broadcastMembers,

    /** Creates a public or private chat within the creator's slots; the creator is its first member. */
    async create(viewer: Viewer, body: { name: string; type: 'public' | 'private' }): Promise<Chat> {
      const slots = chatSlots(viewer.permissionLevel, await deps.users.hasPremium(viewer.userId));
      if (slots === 0) throw appError('ERR_CHAT_CREATE_FORBIDDEN');
      const now = clock.now();
      const chatId = await db.transaction(async (tx) => {
        // Serialise concurrent creations by the same user so the slot count holds.
        await tx.execute(sql`select pg_advisory_xact_lock(7243, ${viewer.userId})`);
        if ((await store.countOwned(viewer.userId, tx)) >= slots) throw appError('ERR_CHAT_SLOT_LIMIT');
        const chat = await store.insert(
          { type: body.type, name: body.name.trim(), ownerUserId: viewer.userId, createdAt: now, updatedAt: now },
          tx,
        );
        await store.addMember(chat.id, viewer.userId, now, tx);
        await store.logActivity(
          { chatId: chat.id, userId: viewer.userId, action: 'join', method: 'direct', createdAt: now },
          tx,
        );
        return chat.id;
      });
      return toChat(await mustGet(chatId));
    },

    async get(viewer: Viewer, chatId: number): Promise<Chat> {
      const chat = await mustGet(chatId);
      await assertCanSee(viewer, chat);
      return toChat(chat);
    },

    async list(userId: number): Promise<Chat[]> {
      return (await store.listFor(userId)).map(toChat);
    },

    /** room:join: becomes a member if not one yet (membership history records how). */
    async join(data: SocketData, payload: RoomJoinPayload) {
      const viewer: Viewer = { userId: data.userId, permissionLevel: data.permissionLevel };
      const target = await resolveJoin(payload);
      const chat = await mustGet(target.chatId);
      if (target.method === 'direct') await assertCanSee(viewer, chat);
      if (chat.type === 'direct' && !(await store.isMember(chat.id, viewer.userId)))
        throw appError('ERR_CANNOT_BROWSE_PRIVATE');
      if (await messages.isChatBanned(chat.id, viewer.userId)) throw appError('ERR_CHAT_BANNED');
      const now = clock.now();
      const joined = await db.transaction(async (tx) => {
        if (await store.isMember(chat.id, viewer.userId, tx)) return false;
        if (target.invite && !(await store.useInvite(target.invite, now, tx))) throw appError('ERR_INVITE_NOT_FOUND');
        await store.addMember(chat.id, viewer.userId, now, tx);
        await store.logActivity(
          {
            chatId: chat.id,
            userId: viewer.userId,
            action: 'join',
            method: target.method,
            inviteCode: target.invite,
            createdAt: now,
          },
          tx,
        );
        return true;
      });
      const ring = await keys.ring(chat.id);
      if (joined) {
        // Holders of the chat key see the new member's sessions and share envelopes with them.
        for (const [sessionId, publicKey] of Object.entries(ring[String(viewer.userId)] ?? {})) {
          realtime.emitTo(rooms.chat(chat.id), 'portal:key_added', {
            chat_id: chat.id,
            user_id: viewer.userId,
            session_id: Number(sessionId),
            public_key: publicKey,
          });
        }
      }
      return { chat: toChat((await store.byId(chat.id)) ?? chat), epoch: chat.epoch, key_ring: ring };
    },

    /** room:leave: ends the membership; the chat moves to a new epoch without this user. */
    async leave(userId: number, chatId: number): Promise<void> {
      const chat = await mustGet(chatId);
      if (chat.type === 'direct')
        throw appError('ERR_FORBIDDEN', 'Leave a direct chat with POST /v1/portal/match/leave.');
      const now = clock.now();
      const result = await db.transaction(async (tx) => {
        if (!(await store.removeMember(chatId, userId, now, tx))) throw appError('ERR_NOT_CHAT_MEMBER');
        await store.logActivity({ chatId, userId, action: 'leave', createdAt: now }, tx);
        const system = await messages.appendSystem(chatId, { kind: 'leave', user_id: userId }, tx);
        const bumped = await keys.bumpEpochs([chatId], tx);
        return { system, bumped };
      });
      realtime.leaveChat(userId, chatId);
      messages.publish(result.system);
      realtime.emitTo(rooms.chat(chatId), 'portal:key_removed', { chat_id: chatId, user_id: userId, session_id: null });
      keys.announceRekey(result.bumped);
      realtime.emitTo(rooms.user(userId), 'room:left', { chat_id: chatId, reason: 'left' });
      await broadcastMembers(chatId);
    },

    async updateConfig(
      viewer: Viewer,
      chatId: number,
      body: { name?: string; type?: 'public' | 'private' },
    ): Promise<Chat> {
      const chat = await mustGet(chatId);
      assertManager(viewer, chat);
      if (chat.type !== 'public' && chat.type !== 'private' && body.type)
        throw appError('ERR_FORBIDDEN', 'Only public and private chats change type.');
      await store.update(chatId, {
        ...(body.name ? { name: body.name.trim() } : {}),
        ...(body.type ? { type: body.type } : {}),
        updatedAt: clock.now(),
      });
      const updated = toChat(await mustGet(chatId));
      realtime.emitTo(rooms.chat(chatId), 'chat:updated', { chat: updated });
      return updated;
    },

    async remove(viewer: Viewer, chatId: number): Promise<void> {
      const chat = await mustGet(chatId);
      assertManager(viewer, chat);
      const now = clock.now();
      const members = await db.transaction(async (tx) => {
        await store.update(chatId, { deletedAt: now, updatedAt: now }, tx);
        return store.endAllMemberships(chatId, now, tx);
      });
      realtime.emitTo(rooms.chat(chatId), 'room:left', { chat_id: chatId, reason: 'deleted' });
      for (const userId of members) realtime.leaveChat(userId, chatId);
    },

    async createInvite(viewer: Viewer, chatId: number, body: { max_uses?: number; expires_in_seconds?: number }) {
      const chat = await mustGet(chatId);
      const member = await store.isMember(chatId, viewer.userId);
      // Public chats: any member may invite; private chats: their managers.
      if (!(chat.type === 'public' && member) && !canManage(viewer, chat.ownerUserId)) throw appError('ERR_FORBIDDEN');
      if (chat.type === 'direct') throw appError('ERR_FORBIDDEN', 'Direct chats take no invites.');
      const now = clock.now();
      const invite = await store.insertInvite({
        code: randomBytes(9).toString('base64url'),
        chatId,
        createdBy: viewer.userId,
        maxUses: body.max_uses ?? null,
        expiresAt: body.expires_in_seconds ? new Date(now.getTime() + body.expires_in_seconds * 1000) : null,
        createdAt: now,
      });
      return toInvite(invite);
    },

    async invites(viewer: Viewer, chatId: number) {
      const chat = await mustGet(chatId);
      assertManager(viewer, chat);
      return (await store.invitesOf(chatId, clock.now())).map(toInvite);
    },

    async deleteInvite(viewer: Viewer, chatId: number, code: string): Promise<void> {
      const chat = await mustGet(chatId);
      const invite = (await store.invitesOfCode(code, clock.now())).find((i) => i.chatId === chatId);
      if (!invite) throw appError('ERR_INVITE_NOT_FOUND');
      if (invite.createdBy !== viewer.userId && !canManage(viewer, chat.ownerUserId)) throw appError('ERR_FORBIDDEN');
      await store.revokeInvite(chatId, code, clock.now());
    },

    async activity(viewer: Viewer, chatId: number, offset: number, limit: number) {
      const chat = await mustGet(chatId);
      if (!canReadActivity(viewer, chat.ownerUserId)) throw appError('ERR_FORBIDDEN');
      return (await store.activity(chatId, offset, limit)).map(toActivity);
    },

    /** Whether the user may read this chat's messages (members; Admins for any chat). */
    async assertReader(viewer: Viewer, chatId: number): Promise<ChatWithCount> {
      const chat = await mustGet(chatId);
      if (viewer.permissionLevel >= 2) return chat;
      if (!(await store.isMember(chatId, viewer.userId))) {
        if (chat.type === 'private' || chat.type === 'direct') throw appError('ERR_CANNOT_BROWSE_PRIVATE');
        throw appError('ERR_NOT_CHAT_MEMBER');
      }
      return chat;
    },

    async assertMember(userId: number, chatId: number): Promise<void> {
      await mustGet(chatId);
      if (!(await store.isMember(chatId, userId))) throw appError('ERR_NOT_CHAT_MEMBER');
    },
  };
}

export type ChatsService = ReturnType<typeof makeChatsService>;
