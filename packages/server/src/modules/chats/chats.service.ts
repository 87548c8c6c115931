import { type Chat, INT32_MAX } from '@parlor/protocol';
import { sql } from 'drizzle-orm';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { batched } from '../../platform/group-commit.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { UserLimit } from '../../platform/write-limit.js';
import { canManageOfficial } from '../admin/admin.rules.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MessagesService } from '../messages/messages.service.js';
import { hasPremium } from '../users/users.presenter.js';
import type { Tx } from '../users/users.store.js';
import { makeDirectChats } from './chats.direct.js';
import { assertChatManager, makeChatInvites } from './chats.invites.js';
import { makeChatMembership } from './chats.membership.js';
import { makeChatPresence } from './chats.presence.js';
import { toActivity, toChat } from './chats.presenter.js';
import { archivedAtOf, canManage, canReadActivity, chatSlots, type Viewer } from './chats.rules.js';
import type { ChatRow, ChatsStore, ChatWithCount } from './chats.store.js';

export interface ChatsDeps {
  db: Db;
  store: ChatsStore;
  clock: Clock;
  keys: KeysService;
  messages: MessagesService;
  realtime: Pick<Realtime, 'emitTo' | 'leaveChat' | 'io' | 'socketsIn'>;
  /** The chat a guild vanity opens (the guilds module), or null; without it no vanity resolves. */
  vanityChat?: (vanity: string) => Promise<number | null>;
  /** The per-user write limit (room:join as a new member and room:leave spend it). */
  writes: UserLimit;
  /** The per-user room:join limit (every join spends it). */
  enters: UserLimit;
}

export function makeChatsService(deps: ChatsDeps) {
  const { db, store, clock, keys, messages, realtime } = deps;
  /** Chat lists asked for in one event-loop turn (the chat:list of a burst of connects) share a statement. */
  const listOf = batched((userIds: number[]) => store.listFor(userIds));

  /** The chat as of now: a direct chat past its expiry reads as archived, sweep or not (chats.rules `archivedAtOf`). */
  const current = (chat: ChatWithCount): ChatWithCount => ({ ...chat, archivedAt: archivedAtOf(chat, clock.now()) });

  /**
   * A chat as the transaction `tx` just wrote it, with its members counted there: what a write
   * answers, so that a deletion committed right after it cannot turn it into a 404 (docs/api.md, Chats).
   */
  const written = async (row: ChatRow, tx: Tx): Promise<ChatWithCount> =>
    current({ ...row, memberCount: await store.memberCount(row.id, tx) });

  const mustGet = async (chatId: number): Promise<ChatWithCount> => {
    const chat = await store.byId(chatId);
    if (!chat) throw appError('ERR_CHAT_NOT_FOUND');
    return current(chat);
  };

  /** Private and direct chats are for their members (and owner, and Admins for private ones). */
  const assertCanSee = async (viewer: Viewer, chat: ChatWithCount) => {
    if (chat.type === 'public' || chat.type === 'official') return;
    if (await store.isMember(chat.id, viewer.userId)) return;
    if (chat.type === 'private' && canManage(viewer, chat.ownerUserId)) return;
    throw appError('ERR_CANNOT_BROWSE_PRIVATE');
  };

  /**
   * The chat a stranger session names, if it is within its reach: one of its own direct chats
   * (docs/api.md, Strangers). Anything else answers 401, decided before anything tells whether
   * the id names a chat at all: a 404 for an id that names none, beside the 401 of one that does,
   * would let a stranger list which chat ids exist. `chatId` may be a path parameter not yet
   * validated (a route's onRequest hook, `assertStrangerReach`): anything but an id in range
   * names no chat of its own, so it answers the same 401 (credentials before validation).
   */
  const strangerChat = async (userId: number, chatId: unknown): Promise<ChatWithCount> => {
    const id = typeof chatId === 'number' || typeof chatId === 'string' ? Number(chatId) : Number.NaN;
    const chat = Number.isInteger(id) && id >= 1 && id <= INT32_MAX ? await store.ownDirect(id, userId) : undefined;
    if (chat) return current(chat);
    throw appError('ERR_UNAUTHENTICATED', 'An anonymous session reads only its own direct chats.');
  };

  /**
   * The chat as `viewer` may name it: for a stranger, one of its own direct chats (else 401, never
   * 404: `strangerChat`); for anyone else, any live chat (else 404 ERR_CHAT_NOT_FOUND).
   */
  const reachable = (viewer: Viewer, chatId: number): Promise<ChatWithCount> =>
    viewer.stranger ? strangerChat(viewer.userId, chatId) : mustGet(chatId);

  /** Official chats are the platform's own: only Owners (and the operator) change or delete them. */
  const assertSettingsManager = (viewer: Viewer, chat: ChatWithCount) => {
    assertChatManager(viewer, chat);
    if (chat.type === 'official' && !canManageOfficial(viewer.permissionLevel))
      throw appError('ERR_FORBIDDEN', 'Only Owners and the operator manage official chats.');
  };

  /** Told the ids of chats just deleted (the room VM stops theirs). */
  const removedListeners = new Set<(chatId: number) => void>();
  const removedChats = (chatIds: number[]) => {
    for (const id of chatIds) for (const l of removedListeners) l(id);
  };

  // Presence (chats.presence.ts), joining and leaving (chats.membership.ts), direct chats (chats.direct.ts).
  const chatPresence = makeChatPresence(realtime);
  const membership = makeChatMembership({
    db,
    store,
    clock,
    keys,
    messages,
    realtime,
    presence: chatPresence,
    mustGet,
    assertCanSee,
    vanityChat: deps.vanityChat,
    writes: deps.writes,
    enters: deps.enters,
  });
  /** Told the ids of direct chats just archived (the room VM stops theirs). */
  const archivedListeners = new Set<(chatId: number) => void>();
  const archivedChats = (chatIds: number[]) => {
    for (const id of chatIds) for (const l of archivedListeners) l(id);
  };
  const direct = makeDirectChats({ db, store, clock, messages, realtime, mustGet, removedChats, archivedChats });
  const invites = makeChatInvites({ db, store, clock, mustGet });

  return {
    /** Listens for chat deletions (owner, admin, direct-chat sweep); returns the unsubscribe. */
    onRemoved(listener: (chatId: number) => void): () => void {
      removedListeners.add(listener);
      return () => removedListeners.delete(listener);
    },
    /** Listens for direct chats archived (leave, expiry sweep); returns the unsubscribe. */
    onArchived(listener: (chatId: number) => void): () => void {
      archivedListeners.add(listener);
      return () => archivedListeners.delete(listener);
    },
    presence: chatPresence.presence,
    announcePresence: chatPresence.announcePresence,
    sessionStillIn: chatPresence.sessionStillIn,

    /**
     * Of the rooms a recovered connection had, those it keeps: its chat rooms where it is still a
     * member and not banned (kicks, bans, leaves and deletions while it was away), and every
     * other room (its own, its user's and session's).
     */
    async roomsStillAllowed(userId: number, restored: string[]): Promise<string[]> {
      const chatIds = restored.map(rooms.chatIdOf).filter((id): id is number => id !== null);
      const still = new Set(await store.stillIn(userId, chatIds, clock.now()));
      return restored.filter((room) => {
        const id = rooms.chatIdOf(room);
        return id === null || still.has(id);
      });
    },
    /** The chat row as of now (deleted chats: ERR_CHAT_NOT_FOUND; an expired direct chat archived). */
    find: mustGet,

    /**
     * Creates a public or private chat within the creator's slots; the creator is its first member.
     * The slots (spec 2.11) follow the creator's row as locked here, never the session's view of it:
     * a revoke or demotion committed before the creation holds that row is seen, and a later one
     * waits for the creation. A creator whose account is deleted while this runs answers 401
     * ERR_UNAUTHENTICATED (its session ended with it), never a foreign-key error. The answer is the
     * chat as this transaction wrote it (`written`), never read again after the commit.
     */
    async create(viewer: Viewer, body: { name: string; type: 'public' | 'private' }): Promise<Chat> {
      const now = clock.now();
      const chat = await db.transaction(async (tx) => {
        // Serialise concurrent creations by the same user so the slot count holds.
        await tx.execute(sql`select pg_advisory_xact_lock(7243, ${viewer.userId})`);
        // The creator's row, held until the commit: a deletion either committed before (gone) or waits.
        const creator = await store.lockCreator(viewer.userId, tx);
        if (!creator) throw appError('ERR_UNAUTHENTICATED');
        const slots = chatSlots(creator.permissionLevel, hasPremium(creator, now));
        if (slots === 0) throw appError('ERR_CHAT_CREATE_FORBIDDEN');
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
        return written(chat, tx);
      });
      return toChat(chat);
    },

    /**
     * An official chat (POST /v1/admin/chats/create): the platform's own, so it has no owner and
     * no members until people join; it uses nobody's slots. The caller checks who may create it.
     */
    async createOfficial(name: string, extra?: (tx: Tx, chatId: number) => Promise<void>): Promise<Chat> {
      const now = clock.now();
      const chat = await db.transaction(async (tx) => {
        const chat = await store.insert(
          { type: 'official', name: name.trim(), ownerUserId: null, createdAt: now, updatedAt: now },
          tx,
        );
        if (extra) await extra(tx, chat.id);
        return written(chat, tx);
      });
      return toChat(chat);
    },

    async get(viewer: Viewer, chatId: number): Promise<Chat> {
      const chat = await reachable(viewer, chatId);
      await assertCanSee(viewer, chat);
      return toChat(chat);
    },

    async list(userId: number): Promise<Chat[]> {
      return (await listOf(userId)).map((chat) => toChat(current(chat)));
    },

    ...membership,

    /**
     * Name and type; `extra` runs in the same transaction (the admin routes' audit entry). Making a
     * chat private revokes, in that transaction, the live invites it no longer honours (those of
     * creators who are neither its owner nor Admin or above: a member's, made while it was public),
     * so they are gone for good, and do not come back if it is made public again. The answer and
     * `chat:updated` are the chat as this transaction wrote it: a deletion committed right after
     * the update cannot turn a change that committed (and its audit entry) into a 404.
     */
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
      const now = clock.now();
      const updated = await db.transaction(async (tx) => {
        const row = await store.update(
          chatId,
          {
            ...(body.name ? { name: body.name.trim() } : {}),
            ...(body.type ? { type: body.type } : {}),
            updatedAt: now,
          },
          tx,
        );
        // Deleted since it was read: nothing changed, so nothing is recorded (`extra`) either.
        if (!row) throw appError('ERR_CHAT_NOT_FOUND');
        // The chat's row is held from here (the UPDATE): an invite being created or spent waits
        // for it, and reads the chat as private (chats.invites.store `creatorMayInvite`).
        if (body.type === 'private') await store.revokeUnissuable(chatId, row, now, tx);
        if (extra) await extra(tx, chat);
        return written(row, tx);
      });
      const answer = toChat(updated);
      realtime.emitTo(rooms.chat(chatId), 'chat:updated', { chat: answer });
      return answer;
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
      // Every socket of every member hears it, in the room or not (another tab), once: one emit to
      // all those rooms reaches each socket once. The chat's room is named too, so the list of
      // rooms is never empty (an official chat without members): an emit to none reaches everyone.
      realtime.emitTo([rooms.chat(chatId), ...members.map(rooms.user)], 'room:left', {
        chat_id: chatId,
        reason: 'deleted',
      });
      removedChats([chatId]);
      for (const userId of members) realtime.leaveChat(userId, chatId);
    },

    ...invites,

    async activity(viewer: Viewer, chatId: number, offset: number, limit: number) {
      const chat = await mustGet(chatId);
      if (!canReadActivity(viewer, chat)) {
        if (chat.type === 'private' || chat.type === 'direct') throw appError('ERR_CANNOT_BROWSE_PRIVATE');
        throw appError('ERR_FORBIDDEN');
      }
      return (await store.activity(chatId, offset, limit)).map(toActivity);
    },

    /**
     * Whether the user may read this chat's messages (members; Admins for any chat). A stranger
     * outside its own direct chats gets 401.
     */
    async assertReader(viewer: Viewer, chatId: number): Promise<ChatWithCount> {
      const chat = await reachable(viewer, chatId);
      if (viewer.permissionLevel >= 2) return chat;
      // Moderators look after public and official chats without joining them.
      if (viewer.permissionLevel >= 1 && (chat.type === 'public' || chat.type === 'official')) return chat;
      if (!(await store.isMember(chatId, viewer.userId))) {
        if (chat.type === 'private' || chat.type === 'direct') throw appError('ERR_CANNOT_BROWSE_PRIVATE');
        throw appError('ERR_NOT_CHAT_MEMBER');
      }
      return chat;
    },

    ...direct,

    /** A member of the chat now, or one whose membership ended at or after `since` (moderation's reach). */
    memberSince: (chatId: number, userId: number, since: Date) => store.memberSince(chatId, userId, since),

    /**
     * A member of the chat now; a stranger (`stranger` set) outside its own direct chats gets 401,
     * whether the chat exists or not (`strangerChat`).
     */
    async assertMember(userId: number, chatId: number, stranger = false): Promise<void> {
      if (stranger) {
        await strangerChat(userId, chatId);
        return;
      }
      await mustGet(chatId);
      if (!(await store.isMember(chatId, userId))) throw appError('ERR_NOT_CHAT_MEMBER');
    },

    /**
     * For a route's onRequest hook, after its session guard: a stranger's request naming a chat
     * outside its reach answers 401 there, before its body is read or validated and before the
     * write limit (platform/write-limit.ts, a preHandler) spends anything: docs/api.md, General,
     * "A request refused by its credentials or by validation spends nothing". `chatId` is the
     * path parameter as it arrived (text). Registered viewers pass; their routes decide.
     */
    async assertStrangerReach(viewer: Viewer, chatId: unknown): Promise<void> {
      if (viewer.stranger) await strangerChat(viewer.userId, chatId);
    },
  };
}

export type ChatsService = ReturnType<typeof makeChatsService>;
