import { type AppSocket, type Realtime, rooms, type SocketData } from '../../platform/realtime.js';
import { localSocketsIn } from '../../platform/socket-reads.js';

type Who = Pick<SocketData, 'userId' | 'sessionId'>;

/** One `portal:presence` delta of a session in a chat, to the chat (docs/api.md, Presence). */
function announce(realtime: Pick<Realtime, 'emitTo'>, chatId: number, who: Who, online: boolean): void {
  realtime.emitTo(rooms.chat(chatId), 'portal:presence', {
    chat_id: chatId,
    user_id: who.userId,
    session_id: who.sessionId,
    online,
  });
}

/**
 * The chats each socket's presence is known in: it was said online there as it entered the room,
 * or entered while another socket of its session on this node was in the room (the session was
 * present already). A socket entering a room it is in again says nothing only when it is known
 * there; one that a match put into a direct chat's room on another node than the match was made
 * on is not, and its own room:join says it online (enterOnline). Keyed by the socket object: gone
 * with it; a chat is forgotten when the socket leaves its room (forgetLeftRooms).
 */
const known = new WeakMap<AppSocket, Set<number>>();

/**
 * The other sockets of this socket's session on this node (tabs sharing its cookie), read from
 * the session's room, which holds a few, rather than from a chat's, which may hold thousands.
 */
export function sessionSiblings(io: Realtime['io'], socket: AppSocket): AppSocket[] {
  return localSocketsIn(io, rooms.session(socket.data.sessionId)).filter((s) => s !== socket);
}

/** Whether the socket's presence in the chat is known to the chat (see `known`). */
export function knownIn(socket: AppSocket, chatId: number): boolean {
  return known.get(socket)?.has(chatId) ?? false;
}

/**
 * A socket of this node out of a chat's room (a leave, kick, ban or disconnect, by whichever call
 * or node) is no longer known there: entering it again says it online again. Registered once per
 * node, on its adapter.
 */
export function forgetLeftRooms(realtime: Pick<Realtime, 'io'>): void {
  const nsp = realtime.io.of('/');
  nsp.adapter.on('leave-room', (room: string, socketId: string) => {
    const chatId = rooms.chatIdOf(room);
    const socket = chatId === null ? undefined : nsp.sockets.get(socketId);
    if (chatId !== null && socket) known.get(socket)?.delete(chatId);
  });
}

/**
 * A socket of this node now in the chat's room: its session is said online there, once per
 * session. When another socket of the same session on this node is in the room already, the
 * session was present and nothing is said (a second tab sharing the cookie). Run in the same turn
 * as the socket entered, so a disconnect of it (or of that other socket) said afterwards comes
 * after. A session with sockets on two nodes is said online by each (a repeated `true` changes no
 * list).
 */
export function enterOnline(realtime: Pick<Realtime, 'emitTo' | 'io'>, socket: AppSocket, chatId: number): void {
  // Said there already, and not out of the room since (forgetLeftRooms): a recovered socket's
  // re-check and its own room:join, or two joins of one socket at once, say it once.
  if (knownIn(socket, chatId)) return;
  const others = sessionSiblings(realtime.io, socket).some(
    (s) => s.rooms.has(rooms.chat(chatId)) && knownIn(s, chatId),
  );
  const chats = known.get(socket) ?? new Set<number>();
  known.set(socket, chats);
  chats.add(chatId);
  if (!others) announce(realtime, chatId, socket.data, true);
}

/**
 * A new direct chat's users enter its room: every socket of theirs, on every node (one call), so
 * the opening message and keys reach them. The sessions of this node's sockets are said online
 * once they are in (in cluster mode the adapter sends the call to the others first, so they apply
 * it before they read the deltas), in the same turn, so a disconnect said afterwards comes after:
 * the peer sees the other as present as a join would show it. Sockets on other nodes enter the
 * room as their node applies the call; their sessions are said online by their own room:join
 * (`knownIn`), not from here: this node cannot order a delta of its own after their node's view
 * of them.
 */
export async function enterMatched(
  realtime: Pick<Realtime, 'emitTo' | 'io'>,
  chatId: number,
  userIds: number[],
): Promise<void> {
  const room = rooms.chat(chatId);
  const users = new Set(userIds.map((id) => rooms.user(id)));
  await realtime.io.of('/').adapter.addSockets({ rooms: users, except: new Set(), flags: {} }, [room]);
  for (const socket of localSocketsIn(realtime.io, room)) if (socket.connected) enterOnline(realtime, socket, chatId);
}

/**
 * Who is in a chat's room, read from the sockets on every node, and the deltas the chat hears.
 * Every read here is part of a change (a join, a leave, a disconnect): when another node does not
 * answer in time, it uses what this node and the others hold (`Realtime.socketsIn`) rather than fail
 * the change.
 */
export function makeChatPresence(realtime: Pick<Realtime, 'emitTo' | 'socketsIn'>) {
  /**
   * One entry per connected session in the chat room, across nodes; without the sessions of a node
   * that does not answer within `CROSS_NODE_READ_TIMEOUT_MS`.
   */
  const presence = async (chatId: number) => {
    const { sockets } = await realtime.socketsIn(rooms.chat(chatId));
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
  const announcePresence = (chatId: number, who: Who, online: boolean) => announce(realtime, chatId, who, online);

  /**
   * Of some chats, those whose room still has a socket of this session, on any node: the session
   * is still present there (as `presence` counts it) and is not to be announced offline. When some
   * nodes cannot be read, the sockets of this node and of those that answered decide: a session
   * announced online whose last socket here went must not stay online in the others' lists.
   */
  const sessionStillIn = async (sessionId: number, chatIds: number[]): Promise<Set<number>> => {
    const { sockets } = await realtime.socketsIn(rooms.session(sessionId));
    const wanted = new Set(chatIds);
    const still = new Set<number>();
    for (const s of sockets) {
      for (const room of s.rooms) {
        const id = rooms.chatIdOf(room);
        if (id !== null && wanted.has(id)) still.add(id);
      }
    }
    return still;
  };

  return { presence, announcePresence, sessionStillIn };
}

export type ChatPresence = ReturnType<typeof makeChatPresence>;
