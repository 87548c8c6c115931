import type { RoomJoinPayload } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms, type SocketData } from '../../platform/realtime.js';
import type { UserLimit } from '../../platform/write-limit.js';
import type { KeysService } from '../keys/keys.service.js';
import type { MessagesService } from '../messages/messages.service.js';
import type { Tx } from '../users/users.store.js';
import type { ChatPresence } from './chats.presence.js';
import { toChat } from './chats.presenter.js';
import { archivedAtOf, canManage, type Viewer } from './chats.rules.js';
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

type JoinMethod = 'direct' | 'invite' | 'vanity';

/** What the caller of a removal decides and writes in its transaction (a kick's, a ban's). */
export interface RemovalHooks {
  /** Runs first, on the chat row as locked, before anything is written; throws to refuse. */
  decide?: (chat: ChatRow, tx: Tx) => Promise<void>;
  /** Runs once the membership is ended (the moderation records). */
  extra?: (tx: Tx) => Promise<void>;
}

/**
 * Whether a join may make this viewer, not a member, a member of the chat as read under its lock:
 * strangers only join direct chats, direct chats have their two members only, and a private chat
 * is joined by id only by its managers (others need an invite or its guild's vanity).
 */
function assertMayBecomeMember(
  viewer: Viewer,
  stranger: boolean,
  method: JoinMethod,
  chat: Pick<ChatRow, 'type' | 'ownerUserId'>,
): void {
  if (stranger && chat.type !== 'direct') throw appError('ERR_STRANGER_NOT_ALLOWED');
  if (chat.type === 'direct') throw appError('ERR_CANNOT_BROWSE_PRIVATE');
  if (method === 'direct' && chat.type === 'private' && !canManage(viewer, chat.ownerUserId))
    throw appError('ERR_CANNOT_BROWSE_PRIVATE');
}

/** Joining and leaving chats (room:join, room:leave, kicks and bans): membership history, rekeys, presence. */
export function makeChatMembership(deps: MembershipDeps) {
  const { db, store, clock, keys, messages, realtime, presence, mustGet, assertCanSee } = deps;

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

  /**
   * What a stranger's room:join names, if it is within its reach: one of its own direct chats, by
   * id or match token (a stranger is made a member when it is matched, and joins nothing else).
   * Anything else (an id or token of no chat, another's direct chat, a public or private chat, any
   * invite or vanity, which open only those) answers ERR_STRANGER_NOT_ALLOWED alike, decided
   * before anything tells whether it names a chat: a stranger cannot probe which ids, invites or
   * vanities exist (docs/api.md, Strangers), as its HTTP routes answer 401 alike.
   */
  const strangerTarget = async (
    userId: number,
    payload: RoomJoinPayload,
  ): Promise<{ chatId: number; method: JoinMethod; invite: null }> => {
    let named: number | undefined;
    if ('chat_id' in payload) named = payload.chat_id;
    else if ('token' in payload) named = (await store.byToken(payload.token))?.id;
    const chat = named === undefined ? undefined : await store.ownDirect(named, userId);
    if (chat) return { chatId: chat.id, method: 'direct', invite: null };
    throw appError('ERR_STRANGER_NOT_ALLOWED');
  };

  /**
   * Ends a membership with its history entry, system message and rekey; announces after commit.
   * Answers whether there was a membership to end (a ban of a non-member persists only its system
   * message). An archived chat answers ERR_CHAT_READ_ONLY, after the caller's `decide`.
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
      if (opts.extra) await opts.extra(tx);
      // A ban of a non-member (one who left already) is still recorded (by `extra`): its system
      // message is persisted with it (spec 2.9), with no membership, history entry or rekey to end.
      if (!removed) return { system: await messages.appendSystem(chatId, opts.system, tx), removed: null };
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
      messages.publish(result.system);
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

  return {
    endedError,

    /**
     * room:join: becomes a member if not one yet (membership history records how). `enter` puts
     * the socket into the chat's room; it runs while this join holds the membership row, `fresh`
     * when the join made that membership (the socket enters even if it seems to be in the room:
     * that is the ended membership's, whose leave may not have reached this node yet).
     */
    async join(data: SocketData, payload: RoomJoinPayload, enter: (chatId: number, fresh: boolean) => unknown) {
      await deps.enters.spend(data.userId);
      const viewer: Viewer = { userId: data.userId, permissionLevel: data.permissionLevel };
      const target = data.stranger ? await strangerTarget(data.userId, payload) : await resolveJoin(payload);
      const chat = await mustGet(target.chatId);
      // Refused early without a write or a lock; for a new member the checks that count are made
      // again on the row read under the chat's lock.
      if (data.stranger && chat.type !== 'direct') throw appError('ERR_STRANGER_NOT_ALLOWED');
      if (target.method === 'direct') await assertCanSee(viewer, chat);
      if (chat.type === 'direct' && !(await store.isMember(chat.id, viewer.userId)))
        throw appError('ERR_CANNOT_BROWSE_PRIVATE');
      if (await messages.isChatBanned(chat.id, viewer.userId)) throw appError('ERR_CHAT_BANNED');
      const now = clock.now();
      // The socket enters the chat's room only in a transaction that holds the membership row
      // (holdMembership, FOR SHARE). A kick, ban, leave or deletion ends that row with an UPDATE
      // and calls leaveChat after its commit: it commits either before (no membership is found,
      // the socket stays out) or after the socket is in (leaveChat takes it out). So the room
      // follows the committed membership, and no non-member ever gets the room's events. Entering
      // first and leaving when the join fails would show them to anyone who asks to join a chat,
      // until the refusal; entering and checking again would show them to a just-removed user
      // until the check answers, for one query more. A member's join, the hot path (every
      // reconnect and tab), reads its membership anyway: the lock costs it no query.
      const joined = await db.transaction(async (tx) => {
        if (await store.holdMembership(chat.id, viewer.userId, tx)) {
          await enter(chat.id, false);
          return false;
        }
        if ('rejoin' in payload && payload.rejoin === true)
          throw appError('ERR_NOT_CHAT_MEMBER', 'Not a member of this chat: a rejoin only enters chats one is in.');
        // Entering the room of a chat one is already in is free (every reconnect does it).
        await deps.writes.spend(viewer.userId);
        // A new member: the chat row's lock orders this join with a kick or ban, which take it
        // first (removeFromChat). A ban committed before this lock is granted is read below and
        // refuses; one that waits for it comes after this membership and ends it.
        const locked = await store.lockById(chat.id, tx);
        if (!locked) throw appError('ERR_CHAT_NOT_FOUND');
        if (await store.holdMembership(chat.id, viewer.userId, tx)) {
          await enter(chat.id, false);
          return false;
        }
        // The chat as it is now (made private since it was read above, say) decides.
        assertMayBecomeMember(viewer, data.stranger, target.method, locked);
        if (await messages.isChatBanned(chat.id, viewer.userId, tx)) throw appError('ERR_CHAT_BANNED');
        // A private chat's invites come from its owner or Admins (docs/api.md, Chats): one made by
        // a member while the chat was public, or by an Admin since demoted or deleted, no longer
        // opens it, whoever holds it (its creator after a kick too). Decided on the chat as locked
        // here and its creator's level as stored now; refused, it spends no use.
        const privateChat = locked.type === 'private' ? locked : undefined;
        if (target.invite && !(await store.useInvite(target.invite, now, tx, privateChat)))
          throw appError('ERR_INVITE_NOT_FOUND');
        // An account deleted while this ran took its session with it: 401, never a foreign-key error.
        if (!(await store.lockUser(viewer.userId, tx))) throw appError('ERR_UNAUTHENTICATED');
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
      // The chat and its epoch as they are now; the key ring read after them is never older
      // (a rekey in between makes the epoch stale, which a share refuses, ERR_EPOCH_MISMATCH).
      const current = (await store.byId(chat.id)) ?? chat;
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
        // Enters as a member does (above): a kick or ban that came after the commit has ended
        // the membership by now, or waits until the socket is in the room.
        const still = await db.transaction(async (tx) => {
          if (!(await store.holdMembership(chat.id, viewer.userId, tx))) return false;
          await enter(chat.id, true);
          return true;
        });
        if (!still) throw await endedError(chat.id, viewer.userId);
      }
      const archivedAt = archivedAtOf(current, clock.now());
      return { chat: toChat({ ...current, archivedAt }), epoch: current.epoch, key_ring: ring };
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
     * moderator's right to act in the chat, decided on its locked row; the records). An archived
     * chat answers ERR_CHAT_READ_ONLY.
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
