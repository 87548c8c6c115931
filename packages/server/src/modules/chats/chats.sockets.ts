import { RoomJoinPayload, RoomLeavePayload } from '@parlor/protocol';
import { type AppSocket, emitSnapshot, type Realtime, rooms } from '../../platform/realtime.js';
import type { App } from '../../platform/routing.js';
import type { RoomEntry } from './chats.join.js';
import { enterOnline, forgetLeftRooms, knownIn, sessionSiblings } from './chats.presence.js';
import type { ChatsService } from './chats.service.js';

type JoinPayload = Parameters<ChatsService['join']>[1];
type Enter = Parameters<ChatsService['join']>[2];

/**
 * Takes a socket out of the room its failed join entered and said it online in: the session goes
 * offline there unless another of its sockets is still in the room (as on a disconnect). A socket
 * that disconnected meanwhile was said offline as it went.
 */
async function leaveFailedJoin(
  chats: Pick<ChatsService, 'sessionStillIn' | 'announcePresence'>,
  socket: AppSocket,
  room: string,
): Promise<void> {
  const chatId = rooms.chatIdOf(room);
  if (!socket.connected || chatId === null) return;
  await socket.leave(room);
  const still = await chats.sessionStillIn(socket.data.sessionId, [chatId]).catch(() => new Set<number>());
  if (!still.has(chatId)) chats.announcePresence(chatId, socket.data, false);
}

/**
 * The `enter` of a socket's room:join. The join runs it while it holds the membership (see join),
 * inside that transaction (platform/db/after-commit.ts, trackCommits: why a rerun is harmless):
 * the socket enters the chat's room and the session is said online there before that hold ends,
 * so a kick, ban, leave or deletion commits after it and sends its offline later, on any node,
 * however late this node's stream reader is (the delta's XADD is on this node's Redis connection
 * before the commit is sent). Entering a room this socket is already in, its presence there
 * known (chats.presence.ts `knownIn`), changes nobody's presence: no delta; nor does a socket
 * whose session has another socket in the room on this node (enterOnline). A socket a match put
 * into the room on another node is in it unannounced: its join says it online. The room entered
 * is kept in `entered`.
 */
function enterOf(realtime: Realtime, socket: AppSocket, entered: { room: string | null }): Enter {
  return async (chatId: number, entry: RoomEntry) => {
    const room = rooms.chat(chatId);
    const known = () => socket.rooms.has(room) && knownIn(socket, chatId);
    // A socket that disconnected while its join ran enters nothing (a closed socket's join is a
    // no-op): it is in no room to be announced in, nor taken out of later.
    if (!socket.connected || (entry === 'held' && known())) return;
    if (entry === 'held') await socket.join(room);
    else {
      // A new or young membership (chats.join.ts, RECENT_MEMBERSHIP_MS) enters once this node has
      // applied the room changes sent before it (a kick's leave of `user:<id>` sent by another
      // node, which this node's stream reader may not have read yet: applied after the entry, it
      // would take the member's socket out). At once when the reader is not behind, and in
      // embedded mode (Realtime.catchUpRooms).
      await realtime.catchUpRooms();
      if (!socket.connected) return;
      // A young membership's socket still in the room now, known there, is there under this
      // membership (another join of it entered): no delta, as for an older one.
      const already = entry === 'young' && known();
      // Through the adapter, as a leave takes sockets out (`leaveChat`): in the cluster both go
      // through this node's Redis connection in order, so a leave of the ended membership sent
      // from here before is applied first and cannot evict this one.
      await socket.nsp.adapter.addSockets({ rooms: new Set([socket.id]), except: new Set(), flags: {} }, [room]);
      // Gone meanwhile: its disconnect found it in no room, and said nothing to follow an online.
      if (!socket.connected || already) return;
    }
    entered.room = room;
    enterOnline(realtime, socket, chatId);
  };
}

/**
 * Why the membership a join entered under has ended (null: it holds). A leave, kick, ban or
 * deletion that committed after the join's hold ended, before its read of the chat and key ring
 * ended (`ended`, read from the database: a node reading the stream late has not taken the socket
 * out of the room yet), or one whose sockets-leave this node has applied since (the socket is no
 * longer in the room; why is read then). A socket that disconnected meanwhile was said offline as
 * it went; its ack reaches nobody.
 */
async function endedSince(
  chats: Pick<ChatsService, 'endedError'>,
  socket: AppSocket,
  chatId: number,
  ended: Error | null,
): Promise<Error | null> {
  if (!socket.connected) return null;
  if (ended) return ended;
  return socket.rooms.has(rooms.chat(chatId)) ? null : chats.endedError(chatId, socket.data.userId);
}

/** room:join: the join, its socket in the chat's room, and the members' list to the joiner. */
async function roomJoin(realtime: Realtime, chats: ChatsService, socket: AppSocket, payload: JoinPayload) {
  const entered: { room: string | null } = { room: null };
  const enter = enterOf(realtime, socket, entered);
  let answer: Omit<Awaited<ReturnType<ChatsService['join']>>, 'ended'>;
  let ended: Error | null;
  try {
    const { ended: endedInJoin, ...joined } = await chats.join(socket.data, payload, enter);
    answer = joined;
    ended = await endedSince(chats, socket, joined.chat.id, endedInJoin);
  } catch (err) {
    // A join that fails after entering (its commit, a read after it) leaves the room it entered.
    if (entered.room) await leaveFailedJoin(chats, socket, entered.room);
    throw err;
  }
  if (ended) {
    // Out of the room now (the removal's sockets-leave may not have reached this node). A leave,
    // kick or ban said the session offline; a deletion removed the chat (room:left `deleted`).
    await socket.leave(rooms.chat(answer.chat.id));
    throw ended;
  }
  // The whole list goes to the joiner only; the others had the delta. The join has committed: a
  // node that does not answer gives this node's sessions, never a failed ack.
  const members = await chats.presence(answer.chat.id);
  emitSnapshot(socket, 'room:members', { chat_id: answer.chat.id, members });
  return { ...answer, members };
}

/**
 * A recovered connection is back in the chat rooms it may still be in (the others were taken
 * from it before it was restored, platform/recovery.ts). A kick, ban or leave that committed
 * after that check's read did not reach it (it was no socket of the namespace yet): now that it
 * is one, its memberships are read again and held (FOR SHARE) while it leaves the rooms it may
 * no longer be in (`room:left`, reason `removed`) and the chats of the others hear it is
 * present again, so a removal committing meanwhile says it offline after that, however late
 * this node reads the stream. The callback runs inside that transaction (platform/db/after-commit.ts,
 * trackCommits: why a rerun is harmless). A failed read closes its connection: the client comes
 * back through the recovery check, or afresh.
 */
function recheckRecovered(realtime: Realtime, chats: ChatsService, socket: AppSocket, log: App['log']): void {
  const restored = [...socket.rooms].map(rooms.chatIdOf).filter((id): id is number => id !== null);
  if (!socket.recovered || restored.length === 0) return;
  const { userId } = socket.data;
  chats
    .underMemberships(restored, [userId], (held) => {
      if (socket.disconnected) return;
      for (const chatId of restored) {
        const room = rooms.chat(chatId);
        if (!socket.rooms.has(room)) continue;
        if (held(chatId, userId)) {
          enterOnline(realtime, socket, chatId);
          continue;
        }
        void socket.leave(room);
        socket.emit('room:left', { chat_id: chatId, reason: 'removed' });
      }
    })
    .catch((err: unknown) => {
      log.warn({ err, session_id: socket.data.sessionId }, 'recovered socket room check failed');
      socket.conn.close();
    });
}

/**
 * A session is present in a chat while any of its sockets is in the room, on any node (one
 * entry per session, as `room:members` counts): it goes offline there only with its last one.
 * Checked once this socket has left its rooms (afterDisconnect; a node shutting down waits for
 * it, so the chats hear of the sockets it drops). A chat where another socket of the session on
 * this node is still connected in the room is that socket's to say, as it goes: sockets dropped
 * together (a logout, two tabs) leave one at a time, so only the last finds none and says the
 * session offline, where each one's check, run after all had left, said it.
 */
function offlineOnDisconnect(realtime: Realtime, chats: ChatsService, socket: AppSocket): void {
  socket.on('disconnecting', () => {
    const siblings = sessionSiblings(realtime.io, socket).filter((s) => s.connected);
    const chatIds = [...socket.rooms]
      .map(rooms.chatIdOf)
      .filter((x): x is number => x !== null && !siblings.some((s) => s.rooms.has(rooms.chat(x))));
    if (chatIds.length === 0) return;
    realtime.afterDisconnect(async () => {
      const still = await chats
        .sessionStillIn(socket.data.sessionId, chatIds)
        // The other sockets cannot be read at all: say offline, as a session announced online
        // whose last socket went must not stay online in the others' lists.
        .catch(() => new Set<number>());
      for (const id of chatIds) if (!still.has(id)) chats.announcePresence(id, socket.data, false);
    });
  });
}

/** Socket handlers: room:join, room:leave, the chat list on (re)connect, presence on disconnect. */
export function registerChatSockets(realtime: Realtime, chats: ChatsService, log: App['log']) {
  forgetLeftRooms(realtime);
  realtime.on('room:join', RoomJoinPayload, (socket, payload: JoinPayload) =>
    roomJoin(realtime, chats, socket, payload),
  );

  realtime.on('room:leave', RoomLeavePayload, async (socket, payload: { chat_id: number }) => {
    await chats.leave(socket.data.userId, payload.chat_id, socket.data.stranger);
    return {};
  });

  realtime.io.on('connection', (socket: AppSocket) => {
    // Every (re)connection gets its chat:list. One whose list cannot be read is closed, as a
    // transport that dropped (recoverable): the client comes back, and the list is read again.
    chats
      .list(socket.data.userId)
      .then((list) => emitSnapshot(socket, 'chat:list', { chats: list, session_id: socket.data.sessionId }))
      .catch((err: unknown) => {
        log.warn({ err, session_id: socket.data.sessionId }, 'chat list on connect failed');
        socket.conn.close();
      });
    recheckRecovered(realtime, chats, socket, log);
    offlineOnDisconnect(realtime, chats, socket);
  });
}
