import { randomBytes } from 'node:crypto';
import { type Chat, Limits, type RoomJoinPayload } from '@parlor/protocol';
import { sql } from 'drizzle-orm';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms, type SocketData } from '../../platform/realtime.js';
import { canManageOfficial } from '../admin/admin.rules.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MessagesService } from '../messages/messages.service.js';
import type { UsersService } from '../users/users.service.js';
import type { Tx } from '../users/users.store.js';
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
  /** The chat a guild vanity opens (the guilds module), or null; without it no vanity resolves. */
  vanityChat?: (vanity: string) => Promise<number | null>;
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

  /** Official chats are the platform's own: only Owners (and the operator) change or delete them. */
  const assertSettingsManager = (viewer: Viewer, chat: ChatWithCount) => {
    assertManager(viewer, chat);
    if (chat.type === 'official' && !canManageOfficial(viewer.permissionLevel))
      throw appError('ERR_FORBIDDEN', 'Only Owners and the operator manage official chats.');
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

  /**
   * Presence changes reach the chat as deltas, one `portal:presence` per session; only a joiner
   * gets the whole list (its ack and `room:members`). A full list to every member on every change
   * cost O(members²) bytes per join (docs/api.md, Presence).
   */
  const announcePresence = (chatId: number, who: Pick<SocketData, 'userId' | 'sessionId'>, online: boolean) => {
    realtime.emitTo(rooms.chat(chatId), 'portal:presence', {
      chat_id: chatId,
      user_id: who.userId,
      session_id: who.sessionId,
      online,
    });
  };

  /** The sessions of a user whose sockets are in a chat's room, on any node. */
  const sessionsInChat = async (userId: number, chatId: number): Promise<number[]> => {
    const sockets = await realtime.io.in(rooms.user(userId)).fetchSockets();
    return [...new Set(sockets.filter((s) => s.rooms.has(rooms.chat(chatId))).map((s) => s.data.sessionId))];
  };

  /** Resolves what room:join names: a chat id, an invite code (spent on joining) or a vanity. */
  const resolveJoin = async (
    payload: RoomJoinPayload,
  ): Promise<{ chatId: number; method: JoinMethod; invite: string | null }> => {
    if ('chat_id' in payload) return { chatId: payload.chat_id, method: 'direct', invite: null };
    if ('token' in payload) {
      const chat = await store.byToken(payload.token);
      if (!chat) throw appError('ERR_CHAT_NOT_FOUND');
      return { chatId: chat.id, method: 'direct', invite: null };
    }
    if ('invite' in payload) {
      const live = (await store.invitesOfCode(payload.invite, clock.now()))[0];
      if (!live) throw appError('ERR_INVITE_NOT_FOUND');
      return { chatId: live.chatId, method: 'invite', invite: payload.invite };
    }
    const chatId = deps.vanityChat ? await deps.vanityChat(payload.vanity) : null;
    if (chatId === null) throw appError('ERR_INVITE_NOT_FOUND', 'No chat uses this vanity.');
    return { chatId, method: 'vanity', invite: null };
  };

  /** Ends a membership with its history entry, system message and rekey; announces after commit. */
  const removeFromChat = async (
    chatId: number,
    userId: number,
    opts: {
      action: 'leave' | 'kick' | 'ban';
      actorId: number | null;
      system: Record<string, unknown>;
      extra?: (tx: Tx) => Promise<void>;
      tolerateNonMember?: boolean;
    },
  ): Promise<boolean> => {
    const now = clock.now();
    const result = await db.transaction(async (tx) => {
      const removed = await store.removeMember(chatId, userId, now, tx);
      if (!removed && !opts.tolerateNonMember) throw appError('ERR_NOT_CHAT_MEMBER');
      if (opts.extra) await opts.extra(tx);
      if (!removed) return null;
      await store.logActivity({ chatId, userId, action: opts.action, actorUserId: opts.actorId, createdAt: now }, tx);
      const system = await messages.appendSystem(chatId, opts.system, tx);
      const bumped = await keys.bumpEpochs([chatId], tx);
      return { system, bumped };
    });
    if (!result) return false;
    const present = await sessionsInChat(userId, chatId).catch(() => []);
    realtime.leaveChat(userId, chatId);
    messages.publish(result.system);
    realtime.emitTo(rooms.chat(chatId), 'portal:key_removed', { chat_id: chatId, user_id: userId, session_id: null });
    keys.announceRekey(result.bumped);
    const reason = opts.action === 'leave' ? 'left' : opts.action === 'kick' ? 'kicked' : 'banned';
    realtime.emitTo(rooms.user(userId), 'room:left', { chat_id: chatId, reason });
    for (const sessionId of present) announcePresence(chatId, { userId, sessionId }, false);
    return true;
  };

  /** Told the ids of chats just deleted (the room VM stops theirs). */
  const removedListeners = new Set<(chatId: number) => void>();
  const removedChats = (chatIds: number[]) => {
    for (const id of chatIds) for (const l of removedListeners) l(id);
  };

  return {
    /** Listens for chat deletions (owner, admin, direct-chat sweep); returns the unsubscribe. */
    onRemoved(listener: (chatId: number) => void): () => void {
      removedListeners.add(listener);
      return () => removedListeners.delete(listener);
    },
    presence,
    announcePresence,
    /** The chat row (deleted chats: ERR_CHAT_NOT_FOUND). */
    find: mustGet,

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

    /**
     * An official chat (POST /v1/admin/chats/create): the platform's own, so it has no owner and
     * no members until people join; it uses nobody's slots. The caller checks who may create it.
     */
    async createOfficial(name: string, extra?: (tx: Tx, chatId: number) => Promise<void>): Promise<Chat> {
      const now = clock.now();
      const chatId = await db.transaction(async (tx) => {
        const chat = await store.insert(
          { type: 'official', name: name.trim(), ownerUserId: null, createdAt: now, updatedAt: now },
          tx,
        );
        if (extra) await extra(tx, chat.id);
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
      if (data.stranger && chat.type !== 'direct') throw appError('ERR_STRANGER_NOT_ALLOWED');
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
      await removeFromChat(chatId, userId, {
        action: 'leave',
        actorId: null,
        system: { kind: 'leave', user_id: userId },
      });
    },

    /**
     * Kick or ban: the member leaves the chat at once (sockets leave its room), the chat moves to a
     * new epoch, and a system message says so. `extra` runs inside the same transaction (records).
     */
    async expel(
      chatId: number,
      userId: number,
      action: 'kick' | 'ban',
      actorId: number,
      reason: string | null,
      extra?: (tx: Tx) => Promise<void>,
    ): Promise<boolean> {
      await mustGet(chatId);
      return removeFromChat(chatId, userId, {
        action,
        actorId,
        system: { kind: action, user_id: userId, actor_id: actorId, reason },
        extra,
        tolerateNonMember: action === 'ban',
      });
    },

    /** Name and type; `extra` runs in the same transaction (the admin routes' audit entry). */
    async updateConfig(
      viewer: Viewer,
      chatId: number,
      body: { name?: string; type?: 'public' | 'private' },
      extra?: (tx: Tx, before: ChatWithCount) => Promise<void>,
    ): Promise<Chat> {
      const chat = await mustGet(chatId);
      assertSettingsManager(viewer, chat);
      if (chat.type !== 'public' && chat.type !== 'private' && body.type)
        throw appError('ERR_FORBIDDEN', 'Only public and private chats change type.');
      await db.transaction(async (tx) => {
        await store.update(
          chatId,
          {
            ...(body.name ? { name: body.name.trim() } : {}),
            ...(body.type ? { type: body.type } : {}),
            updatedAt: clock.now(),
          },
          tx,
        );
        if (extra) await extra(tx, chat);
      });
      const updated = toChat(await mustGet(chatId));
      realtime.emitTo(rooms.chat(chatId), 'chat:updated', { chat: updated });
      return updated;
    },

    /** Deletes a chat; `extra` runs in the same transaction (the admin routes' audit entry). */
    async remove(
      viewer: Viewer,
      chatId: number,
      extra?: (tx: Tx, chat: ChatWithCount) => Promise<void>,
    ): Promise<void> {
      const chat = await mustGet(chatId);
      assertSettingsManager(viewer, chat);
      const now = clock.now();
      const members = await db.transaction(async (tx) => {
        if (!(await store.update(chatId, { deletedAt: now, updatedAt: now }, tx))) throw appError('ERR_CHAT_NOT_FOUND');
        if (extra) await extra(tx, chat);
        return store.endAllMemberships(chatId, now, tx);
      });
      realtime.emitTo(rooms.chat(chatId), 'room:left', { chat_id: chatId, reason: 'deleted' });
      removedChats([chatId]);
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
      // Moderators look after public and official chats without joining them.
      if (viewer.permissionLevel >= 1 && (chat.type === 'public' || chat.type === 'official')) return chat;
      if (!(await store.isMember(chatId, viewer.userId))) {
        if (chat.type === 'private' || chat.type === 'direct') throw appError('ERR_CANNOT_BROWSE_PRIVATE');
        throw appError('ERR_NOT_CHAT_MEMBER');
      }
      return chat;
    },

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
      const { created, system } = await db.transaction(async (tx) => {
        const created = await store.insertDirect({ userIds, matchToken: token, expiresAt, at: now }, tx);
        if (created.users.length !== userIds.length) throw appError('ERR_USER_NOT_FOUND');
        const system = await messages.appendSystem(created.id, { kind: 'match', tags, user_ids: userIds }, tx);
        return { created, system };
      });
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

    async assertMember(userId: number, chatId: number): Promise<void> {
      await mustGet(chatId);
      if (!(await store.isMember(chatId, userId))) throw appError('ERR_NOT_CHAT_MEMBER');
    },
  };
}

export type ChatsService = ReturnType<typeof makeChatsService>;
