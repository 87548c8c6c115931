import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { UserLimit } from '../../platform/write-limit.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MessagesService } from '../messages/messages.service.js';
import type { Tx } from '../users/users.store.js';
import { makeChatJoin } from './chats.join.js';
import type { ChatPresence } from './chats.presence.js';
import { archivedAtOf, type Viewer } from './chats.rules.js';
import type { ChatRow, ChatsStore, ChatWithCount } from './chats.store.js';

/**
 * How long after its end a session is still said offline by a removal of its user's membership:
 * its sockets go within a second of its end (sessions.sockets.ts) or as soon as its node hears of
 * it; a minute covers a slow node with room to spare.
 */
const RECENT_SESSION_MS = 60_000;

export interface MembershipDeps {
  db: Db;
  store: ChatsStore;
  clock: Clock;
  keys: KeysService;
  messages: MessagesService;
  realtime: Pick<Realtime, 'emitTo' | 'leaveChat'>;
  presence: Pick<ChatPresence, 'announcePresence'>;
  /** The chat row (deleted chats: ERR_CHAT_NOT_FOUND). */
  mustGet: (chatId: number) => Promise<ChatWithCount>;
  /** Private and direct chats are for their members (and owner, and Admins for private ones). */
  assertCanSee: (viewer: Viewer, chat: ChatWithCount) => Promise<void>;
  /** The chat a guild vanity opens (the guilds module), or null; without it no vanity resolves. */
  vanityChat?: (vanity: string) => Promise<number | null>;
  /** The user's write allowance: a join that makes a member and a leave spend one. */
  writes: UserLimit;
  /** The user's room:join allowance: every join spends one. */
  enters: UserLimit;
}

/** What the caller of a removal decides and writes in its transaction (a kick's, a ban's). */
export interface RemovalHooks {
  /** Runs first, on the chat row as locked, before anything is written; throws to refuse. */
  decide?: (chat: ChatRow, tx: Tx) => Promise<void>;
  /**
   * Runs once the membership is ended (the moderation records), told whether there was one to end
   * and the removal's time, before the system message and the new epoch are written.
   */
  extra?: (tx: Tx, done: { removed: boolean; at: Date }) => Promise<void>;
}

/** Joining and leaving chats (room:join, room:leave, kicks and bans): membership history, rekeys, presence. */
export function makeChatMembership(deps: MembershipDeps) {
  const { db, store, clock, keys, messages, realtime, presence, mustGet } = deps;

  /**
   * Ends a membership with its history entry, system message and rekey; announces after commit.
   * Answers whether there was a membership to end (a ban of a non-member persists only its system
   * message, and none when the user is banned from the chat already). An archived chat answers
   * ERR_CHAT_READ_ONLY, after the caller's `decide`.
   */
  const removeFromChat = async (
    chatId: number,
    userId: number,
    opts: {
      action: 'leave' | 'kick' | 'ban';
      actorId: number | null;
      system: Record<string, unknown>;
      tolerateNonMember?: boolean;
    } & RemovalHooks,
  ): Promise<boolean> => {
    const now = clock.now();
    const result = await db.transaction(async (tx) => {
      // First the chat row's lock: a join that would make this user a member waits for it, so it
      // sees the ban this transaction records, or comes before and its membership is removed here.
      const chat = await store.lockById(chatId, tx);
      if (!chat) throw appError('ERR_CHAT_NOT_FOUND');
      if (opts.decide) await opts.decide(chat, tx);
      // An archived chat is read-only (spec 3), as for sends and deletes: its members stay (the
      // archive stays in their lists) and no system message lands in it.
      if (archivedAtOf(chat, now) !== null) throw appError('ERR_CHAT_READ_ONLY');
      const removed = await store.removeMember(chatId, userId, now, tx);
      if (!removed && !opts.tolerateNonMember) throw appError('ERR_NOT_CHAT_MEMBER');
      // A ban of a non-member who is banned from the chat already (read before `extra` records the
      // new one; bans of one chat wait for each other on its row, held above) is no news to the
      // chat: the new record and its audit entry are written, but no second `ban` notice.
      const repeated = !removed && opts.action === 'ban' && (await messages.isChatBanned(chatId, userId, tx));
      if (opts.extra) await opts.extra(tx, { removed, at: now });
      // A ban of a non-member (one who left already) is still recorded (by `extra`): its system
      // message is persisted with it (spec 2.9), with no membership, history entry or rekey to end.
      if (!removed)
        return { system: repeated ? null : await messages.appendSystem(chatId, opts.system, tx), removed: null };
      // Every live session of the user (and one over in the last minute, whose socket its node may
      // not have dropped yet) goes offline in the chat once its sockets have left the room (a
      // session that was not present there changes no list). Read from the database in this
      // transaction, not from the sockets: a node whose stream reader lags would still show the
      // sockets in the room after the leave, and a read across the nodes here would hold the chat
      // row (every send and join of the chat) for as long as a slow node takes to answer.
      const present = await store.recentSessionIds(userId, now, RECENT_SESSION_MS, tx);
      await store.logActivity({ chatId, userId, action: opts.action, actorUserId: opts.actorId, createdAt: now }, tx);
      const system = await messages.appendSystem(chatId, opts.system, tx);
      const bumped = await keys.bumpEpochs([chatId], tx);
      return { system, removed: { bumped, present } };
    });
    if (!result.removed) {
      if (result.system) messages.publish(result.system);
      return false;
    }
    // Out of the room at once, before anything awaits: a join that makes the user a member again
    // commits after this one, and enters after this leave (see join), so it is never undone by it.
    realtime.leaveChat(userId, chatId);
    messages.publish(result.system);
    realtime.emitTo(rooms.chat(chatId), 'portal:key_removed', { chat_id: chatId, user_id: userId, session_id: null });
    keys.announceRekey(result.removed.bumped);
    const reason = opts.action === 'leave' ? 'left' : opts.action === 'kick' ? 'kicked' : 'banned';
    realtime.emitTo(rooms.user(userId), 'room:left', { chat_id: chatId, reason });
    // After the leave, in the same turn: a join that makes the user a member again announces its
    // session online after it has entered (later), so its delta follows this one.
    for (const sessionId of result.removed.present) presence.announcePresence(chatId, { userId, sessionId }, false);
    return true;
  };

  /**
   * Why a join's membership is gone (it ended while the join ran): the chat deleted, a ban, or
   * else a leave or kick.
   */
  const endedError = async (chatId: number, userId: number) => {
    if (!(await store.byId(chatId))) return appError('ERR_CHAT_NOT_FOUND');
    if (await messages.isChatBanned(chatId, userId)) return appError('ERR_CHAT_BANNED');
    return appError('ERR_NOT_CHAT_MEMBER', 'The membership ended while the join ran (a leave, a kick).');
  };

  // room:join (chats.join.ts).
  const { join } = makeChatJoin({ ...deps, endedError });

  return {
    /** Why a join's membership is gone: the socket route asks it of a join whose socket a removal took out. */
    endedError,

    join,

    /**
     * Runs `under` in a transaction that holds the current memberships among these chats and
     * users (FOR SHARE), told which pairs are held: the presence it says online (a recovered
     * socket's, a node's back from a sweep) is handed to the node's stream before a kick, ban,
     * leave or deletion of those memberships can commit, and so comes before that removal's
     * offline, sent after its commit (docs/api.md, Presence). Synchronous, so nothing else runs
     * between what it checks and what it sends. It acts inside the transaction (presence,
     * room:left): platform/db/after-commit.ts, trackCommits, says why a rerun is harmless.
     */
    async underMemberships(
      chatIds: number[],
      userIds: number[],
      under: (held: (chatId: number, userId: number) => boolean) => void,
    ): Promise<void> {
      await db.transaction(async (tx) => {
        const rows = await store.holdMemberships(chatIds, userIds, tx);
        const held = new Set(rows.map((r) => `${r.chatId}:${r.userId}`));
        under((chatId, userId) => held.has(`${chatId}:${userId}`));
      });
    },

    /**
     * room:leave: ends the membership; the chat moves to a new epoch without this user. The chat's
     * owner is refused (ERR_FORBIDDEN, nothing written): it deletes the chat instead. A stranger
     * (`stranger` set) is a member of direct chats only, which this never leaves: it is told so of
     * its own (ERR_FORBIDDEN, as anyone is) and ERR_STRANGER_NOT_ALLOWED of any other id, whether
     * it names a chat or not (see `strangerTarget`), and spends no write on either refusal.
     */
    async leave(userId: number, chatId: number, stranger = false): Promise<void> {
      if (stranger) {
        if (await store.ownDirect(chatId, userId))
          throw appError('ERR_FORBIDDEN', 'Leave a direct chat with POST /v1/portal/match/leave.');
        throw appError('ERR_STRANGER_NOT_ALLOWED');
      }
      await deps.writes.spend(userId);
      const chat = await mustGet(chatId);
      if (chat.type === 'direct')
        throw appError('ERR_FORBIDDEN', 'Leave a direct chat with POST /v1/portal/match/leave.');
      await removeFromChat(chatId, userId, {
        action: 'leave',
        actorId: null,
        system: { kind: 'leave', user_id: userId },
        // Its owner does not leave a chat, it deletes it: left, the chat would drop out of its
        // lists and still take its creation slot (spec 2.11). Decided on the row as locked: an
        // owner change or deletion committed before is read here, a later one waits for the leave.
        decide: async (locked) => {
          if (locked.ownerUserId === userId)
            throw appError('ERR_FORBIDDEN', 'You own this chat: delete it to leave it.');
        },
      });
    },

    /**
     * Kick or ban: the member leaves the chat at once (sockets leave its room), the chat moves to a
     * new epoch, and a system message says so, in one transaction with the `hooks` (the
     * moderator's right to act in the chat, decided on its locked row; the records; in a direct
     * chat, its end: direct.endExpelledIn, before the epoch would rise). An archived chat answers
     * ERR_CHAT_READ_ONLY.
     */
    async expel(
      chatId: number,
      userId: number,
      action: 'kick' | 'ban',
      actorId: number,
      reason: string | null,
      hooks: RemovalHooks = {},
    ): Promise<boolean> {
      await mustGet(chatId);
      return removeFromChat(chatId, userId, {
        action,
        actorId,
        system: { kind: action, user_id: userId, actor_id: actorId, reason },
        ...hooks,
        tolerateNonMember: action === 'ban',
      });
    },
  };
}
