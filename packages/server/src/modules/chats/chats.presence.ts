import { type Realtime, rooms, type SocketData } from '../../platform/realtime.js';

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
  const announcePresence = (chatId: number, who: Pick<SocketData, 'userId' | 'sessionId'>, online: boolean) => {
    realtime.emitTo(rooms.chat(chatId), 'portal:presence', {
      chat_id: chatId,
      user_id: who.userId,
      session_id: who.sessionId,
      online,
    });
  };

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
