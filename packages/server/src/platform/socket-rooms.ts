import type { ClientToServerEvents, ServerToClientEvents } from '@parlor/protocol';
import type { Server, Socket } from 'socket.io';

/** Socket room names, what the server knows of a socket, and snapshots sent to one socket. */

/** Socket room names; every emit goes through these, never a hand-built string. */
export const rooms = {
  chat: (id: number) => `chat:${id}`,
  user: (id: number) => `user:${id}`,
  session: (id: number) => `session:${id}`,
  /** The chat id of a chat room's name; null for any other room. */
  chatIdOf: (room: string): number | null => {
    const id = /^chat:(\d+)$/.exec(room)?.[1];
    return id === undefined ? null : Number(id);
  },
};

/** What the server knows of a connected socket (set by the handshake, read by handlers). */
export interface SocketData {
  userId: number;
  sessionId: number;
  username: string;
  permissionLevel: number;
  stranger: boolean;
  /** When the session expires (ms since the epoch); from then the socket may not act (gateEvents). */
  expiresAt?: number;
}

export type Io = Server<ClientToServerEvents, ServerToClientEvents, Record<string, never>, SocketData>;
export type AppSocket = Socket<ClientToServerEvents, ServerToClientEvents, Record<string, never>, SocketData>;

/**
 * Sends a snapshot to one socket, on this node only: what the client is sent again on every
 * (re)connect or join (`chat:list`, `room:members`). With connection state recovery on, a plain
 * `socket.emit` is a broadcast through the adapter so that a client that comes back can be given
 * it again: in cluster mode one XADD per emit, read back and decoded by every node, with the
 * client waiting for that round trip. A snapshot needs none of that (the cluster adapter keeps a
 * local one out of its stream, so it is not replayed either; the embedded adapter may replay it,
 * and the fresh one follows).
 */
export function emitSnapshot<E extends keyof ServerToClientEvents>(
  socket: AppSocket,
  event: E,
  ...args: Parameters<ServerToClientEvents[E]>
): void {
  socket.nsp.local.to(socket.id).emit(event, ...args);
}
