import type { KeyRing, RoomJoinPayload } from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import { rooms, type SocketData } from '../../platform/realtime.js';
import { storedCallerLevel } from '../users/users.caller.js';
import type { Tx } from '../users/users.store.js';
import type { MembershipDeps } from './chats.membership.js';
import { toChat } from './chats.presenter.js';
import { archivedAtOf, canManage, type Viewer } from './chats.rules.js';
import type { ChatRow, ChatWithCount } from './chats.store.js';

type JoinMethod = 'direct' | 'invite' | 'vanity';

/**
 * How a join's socket enters the chat's room (`enter`): `new`, the join made the membership;
 * `young`, a membership younger than RECENT_MEMBERSHIP_MS, which may follow a removal of the
 * user's previous one that this node has not read yet; `held`, an older one (the hot path).
 */
export type RoomEntry = 'new' | 'young' | 'held';

/**
 * How long after it began a membership enters as a new one does (`young`: the node first applies
 * the room changes sent before, chats.sockets.ts). The removal that ended the user's previous
 * membership committed before this one was made and sent its sockets-leave of `user:<id>` at once:
 * once the membership is older than this, that leave has been in the stream as long, and only a
 * reader lagging more could still apply it after the entry. Such a node is unhealthy (a reader
 * lags by milliseconds), and catchUpRooms waits at most STREAM_CATCH_UP_MAX_MS (2 s) anyway; a
 * minute covers that many times over, and clocks of nodes that differ by seconds (joined_at is the
 * joining node's). Older memberships, every reconnect and tab, enter with no Redis round trip.
 */
export const RECENT_MEMBERSHIP_MS = 60_000;

/**
 * Whether a join may make this viewer, not a member, a member of the chat as read under its lock:
 * strangers only join direct chats, direct chats have their two members only, and a private chat
 * is joined by its managers, or with an invite. Not by its guild's vanity: the owner or a sponsor
 * sets that, not a manager of the chat, so a guild chat an Admin made private closes to it as the
 * invites of its plain members do.
 */
function assertMayBecomeMember(
  viewer: Viewer,
  stranger: boolean,
  method: JoinMethod,
  chat: Pick<ChatRow, 'type' | 'ownerUserId'>,
): void {
  if (stranger && chat.type !== 'direct') throw appError('ERR_STRANGER_NOT_ALLOWED');
  if (chat.type === 'direct') throw appError('ERR_CANNOT_BROWSE_PRIVATE');
  if (method !== 'invite' && chat.type === 'private' && !canManage(viewer, chat.ownerUserId))
    throw appError('ERR_CANNOT_BROWSE_PRIVATE');
}

/** How a socket of a member enters under a membership that began at `joinedAt` (RECENT_MEMBERSHIP_MS). */
const entryOf = (joinedAt: Date, now: Date): RoomEntry =>
  now.getTime() - joinedAt.getTime() < RECENT_MEMBERSHIP_MS ? 'young' : 'held';

/** What a join needs of the membership's (chats.membership.ts composes it). */
export type JoinDeps = Omit<MembershipDeps, 'presence'> & {
  /** Why a join's membership is gone (chats.membership.ts `endedError`). */
  endedError: (chatId: number, userId: number) => Promise<Error>;
};

/** What room:join names, resolved: the chat, how it is joined, and the invite it spends. */
interface JoinTarget {
  chatId: number;
  method: JoinMethod;
  invite: string | null;
}

/** room:join (chats.membership.ts composes it): a socket enters a chat's room, as a member or becoming one. */
export function makeChatJoin(deps: JoinDeps) {
  const { db, store, clock, keys, messages, realtime, mustGet, assertCanSee, endedError } = deps;

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
   * Spends a join, resolves what it names and refuses early, without a write or a lock, what the
   * chat as read now does not allow.
   */
  const checkJoin = async (data: SocketData, payload: RoomJoinPayload) => {
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
    return { viewer, target, chat };
  };

  /**
   * Makes the viewer a member of the chat as read under its lock (`locked`): the checks that count,
   * the invite spent, the membership and its history entry.
   */
  const becomeMember = async (
    data: SocketData,
    viewer: Viewer,
    target: JoinTarget,
    locked: ChatRow,
    tx: Tx,
  ): Promise<void> => {
    // The joining user as stored now, held FOR SHARE until the commit (storedCallerLevel, after the
    // chat's row: chat rows before users rows, docs/api.md Moderation), not as the socket's
    // handshake read it: a demotion, ban or timeout committed since (on another node, or before the
    // socket's re-check dropped it) counts, and one that comes later waits for this join. An
    // account deleted meanwhile took its session with it: 401, never a foreign-key error; one
    // Banned or timed out (a lapsed timeout refuses nothing) is refused as its handshake would be.
    const permissionLevel = await storedCallerLevel(tx, viewer.userId, clock);
    // The time once the chat's row and the user's are held, not when the join began: an invite
    // that expired, or a timeout that ended, while it waited for them has.
    const now = clock.now();
    // The chat as it is now (made private since it was read above, say) and that level decide.
    assertMayBecomeMember({ ...viewer, permissionLevel }, data.stranger, target.method, locked);
    if (await messages.isChatBanned(locked.id, viewer.userId, tx)) throw appError('ERR_CHAT_BANNED');
    // A private chat's invites come from its owner or Admins (docs/api.md, Chats): one made by
    // a member while the chat was public, or by an Admin since demoted or deleted, no longer
    // opens it, whoever holds it (its creator after a kick too). Decided on the chat as locked
    // here and its creator's level as stored now; refused, it spends no use.
    const privateChat = locked.type === 'private' ? locked : undefined;
    if (target.invite && !(await store.useInvite(target.invite, now, tx, privateChat)))
      throw appError('ERR_INVITE_NOT_FOUND');
    await store.addMember(locked.id, viewer.userId, now, tx);
    await store.logActivity(
      {
        chatId: locked.id,
        userId: viewer.userId,
        action: 'join',
        method: target.method,
        inviteCode: target.invite,
        createdAt: now,
      },
      tx,
    );
  };

  /**
   * The join's transaction: enters the room while it holds the membership row, or makes a new
   * member (true) under the chat row's lock. `enter` acts inside it (the socket's room, presence):
   * platform/db/after-commit.ts, trackCommits, says why a rerun is harmless.
   */
  const enterUnderLock = (
    data: SocketData,
    payload: RoomJoinPayload,
    viewer: Viewer,
    target: JoinTarget,
    chat: ChatWithCount,
    now: Date,
    enter: (chatId: number, entry: RoomEntry) => unknown,
  ): Promise<boolean> =>
    db.transaction(async (tx) => {
      const held = await store.holdMembership(chat.id, viewer.userId, tx);
      if (held) {
        await enter(chat.id, entryOf(held.joinedAt, now));
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
      const heldNow = await store.holdMembership(chat.id, viewer.userId, tx);
      if (heldNow) {
        await enter(chat.id, entryOf(heldNow.joinedAt, now));
        return false;
      }
      await becomeMember(data, viewer, target, locked, tx);
      return true;
    });

  /**
   * A new member's sessions announced to the chat's key holders, and the socket entered under its
   * membership; a membership ended since the commit fails the join (`endedError`).
   */
  const welcomeMember = async (
    userId: number,
    chatId: number,
    ring: KeyRing,
    enter: (chatId: number, entry: RoomEntry) => unknown,
  ): Promise<void> => {
    // Holders of the chat key see the new member's sessions and share envelopes with them.
    for (const [sessionId, publicKey] of Object.entries(ring[String(userId)] ?? {})) {
      realtime.emitTo(rooms.chat(chatId), 'portal:key_added', {
        chat_id: chatId,
        user_id: userId,
        session_id: Number(sessionId),
        public_key: publicKey,
      });
    }
    // Enters as a member does (enterUnderLock): a kick or ban that came after the commit has ended
    // the membership by now, or waits until the socket is in the room.
    const still = await db.transaction(async (tx) => {
      if (!(await store.holdMembership(chatId, userId, tx))) return false;
      await enter(chatId, 'new');
      return true;
    });
    if (!still) throw await endedError(chatId, userId);
  };

  /**
   * Why the membership a member's join entered under ended since its hold (null: it holds). Read
   * with the key ring, the join's last read: the ring lists the sessions of the chat's members as
   * of that read, so a user listed there is a member still, and the hot path (a member with a keyed
   * session) reads nothing more. A user not listed (no live session with a key, or no member)
   * reads its membership; none: `endedError` says why (a leave or kick, a ban, a deletion).
   */
  const endedBy = async (chatId: number, userId: number, ring: KeyRing): Promise<Error | null> => {
    if (ring[String(userId)] !== undefined || (await store.isMember(chatId, userId))) return null;
    return endedError(chatId, userId);
  };

  return {
    /**
     * room:join: becomes a member if not one yet (membership history records how). `enter` puts
     * the socket into the chat's room; it runs while this join holds the membership row, with
     * `new` when the join made that membership and `young` when another join made it a moment ago
     * (RECENT_MEMBERSHIP_MS): the socket enters even if it seems to be in the room (that is the
     * ended membership's, whose leave may not have reached this node yet). `ended`:
     * why the membership it entered under ended once its socket was in the room, read with or
     * after the key ring, its last read (`endedBy`), or null; the caller takes the socket out and answers it.
     */
    async join(data: SocketData, payload: RoomJoinPayload, enter: (chatId: number, entry: RoomEntry) => unknown) {
      const { viewer, target, chat } = await checkJoin(data, payload);
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
      const joined = await enterUnderLock(data, payload, viewer, target, chat, now, enter);
      // The chat and its epoch as they are now; the key ring read after them is never older
      // (a rekey in between makes the epoch stale, which a share refuses, ERR_EPOCH_MISMATCH).
      const current = (await store.byId(chat.id)) ?? chat;
      const ring = await keys.ring(chat.id);
      // Whether the membership still holds, read after the ring: a new member's held once more
      // (welcomeMember), a member's read with the ring itself (endedBy).
      const ended = joined
        ? await welcomeMember(viewer.userId, chat.id, ring, enter).then(() => null)
        : await endedBy(chat.id, viewer.userId, ring);
      const archivedAt = archivedAtOf(current, clock.now());
      return { chat: toChat({ ...current, archivedAt }), epoch: current.epoch, key_ring: ring, ended };
    },
  };
}
