import type { FastifyBaseLogger } from 'fastify';
import type { Io, SocketData } from './realtime.js';

/**
 * How long a read of the sockets on every node (`socketsIn`) waits for the other nodes. A node that
 * is alive for Redis but does not answer (a stopped or stalled process) would hold the read for the
 * adapter's 5 s and fail it; past this the read falls back to this node's sockets instead.
 */
export const CROSS_NODE_READ_TIMEOUT_MS = 2_000;

/** What a read of the sockets across nodes gives of each: a local socket or another node's copy. */
export interface SocketView {
  readonly id: string;
  readonly data: SocketData;
  readonly rooms: ReadonlySet<string>;
}

/** Reads of the sockets on every node that degrade to this node's instead of failing. */
export function crossNodeReads(io: Io, log: FastifyBaseLogger) {
  /** This node's sockets in a room, or all of them (never waits on Redis or another node). */
  const localSocketsIn = (room: string | null): SocketView[] => {
    const nsp = io.of('/');
    if (room === null) return [...nsp.sockets.values()];
    return [...(nsp.adapter.rooms.get(room) ?? [])].flatMap((id) => {
      const socket = nsp.sockets.get(id);
      return socket ? [socket] : [];
    });
  };

  return {
    /**
     * The sockets in a room (null: every socket) on every node, for reads that follow a committed
     * change (presence, who is still in a chat): such a read must not turn the change into a
     * failure. When another node does not answer within CROSS_NODE_READ_TIMEOUT_MS, or Redis
     * fails, it answers this node's sockets with `complete: false`, and logs a warning.
     */
    async socketsIn(room: string | null): Promise<{ sockets: SocketView[]; complete: boolean }> {
      const across = (room === null ? io : io.in(room)).timeout(CROSS_NODE_READ_TIMEOUT_MS).fetchSockets();
      let timer: NodeJS.Timeout | undefined;
      // The adapter's own timeout covers the other nodes' answers only, not its count of them (a
      // Redis command): this one bounds both.
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no answer within ${CROSS_NODE_READ_TIMEOUT_MS} ms`)),
          CROSS_NODE_READ_TIMEOUT_MS,
        );
      });
      try {
        return { sockets: await Promise.race([across, late]), complete: true };
      } catch (err) {
        log.warn({ err, room }, "sockets of other nodes could not be read; using this node's");
        return { sockets: localSocketsIn(room), complete: false };
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
