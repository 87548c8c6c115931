import { type Chat, INT32_MAX } from '@parlor/protocol';
import type { TaskLog } from '../../platform/background.js';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { batched } from '../../platform/group-commit.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { UserLimit } from '../../platform/write-limit.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MessagesService } from '../messages/messages.service.js';
import type { Tx } from '../users/users.store.js';
import { makeDirectChats } from './chats.direct.js';
import { makeChatInvites } from './chats.invites.js';
import { makeChatLifecycle } from './chats.lifecycle.js';
import { makeChatMembership } from './chats.membership.js';
import { makeChatPresence } from './chats.presence.js';
import { toActivity, toChat } from './chats.presenter.js';
import { archivedAtOf, canManage, canReadActivity, type Viewer } from './chats.rules.js';
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
  /** Where the direct-chat sweep logs a step that failed (the others still run). */
  log: TaskLog;
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

  /** Told the ids of chats just deleted (the room VM stops theirs). */
  const removedListeners = new Set<(chatId: number) => void>();
  const removedChats = (chatIds: number[]) => {
    for (const id of chatIds) for (const l of removedListeners) l(id);
  };

  // Presence (chats.presence.ts), joining and leaving (chats.membership.ts), direct chats (chats.direct.ts),
  // creation, settings and deletion of the others (chats.lifecycle.ts).
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
  const lifecycle = makeChatLifecycle({ db, store, clock, realtime, mustGet, written, removedChats });
  /** Told the ids of direct chats just archived (the room VM stops theirs). */
  const archivedListeners = new Set<(chatId: number) => void>();
  const archivedChats = (chatIds: number[]) => {
    for (const id of chatIds) for (const l of archivedListeners) l(id);
  };
  const direct = makeDirectChats({
    db,
    store,
    clock,
    messages,
    realtime,
    mustGet,
    removedChats,
    archivedChats,
    log: deps.log,
  });
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

    ...lifecycle,

    async get(viewer: Viewer, chatId: number): Promise<Chat> {
      const chat = await reachable(viewer, chatId);
      await assertCanSee(viewer, chat);
      return toChat(chat);
    },

    async list(userId: number): Promise<Chat[]> {
      return (await listOf(userId)).map((chat) => toChat(current(chat)));
    },

    ...membership,
    ...invites,

    async activity(viewer: Viewer, chatId: number, offset: number, limit: number) {
      const chat = await mustGet(chatId);
      if (!canReadActivity(viewer, chat)) {
        if (chat.type === 'private' || chat.type === 'direct') throw appError('ERR_CANNOT_BROWSE_PRIVATE');
        throw appError('ERR_FORBIDDEN');
      }
      return (await store.activity(chatId, offset, limit, clock.now())).map(toActivity);
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
