import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { AppSocket, Io, SocketData } from './realtime.js';

/**
 * How long a read of the sockets on every node (`socketsIn`) waits for the other nodes. A node that
 * is alive for Redis but does not answer (a stopped or stalled process) would hold the read for
 * good; past this the read answers without that node's sockets.
 */
export const CROSS_NODE_READ_TIMEOUT_MS = 2_000;

/** What a read of the sockets across nodes gives of each: a local socket or another node's copy. */
export interface SocketView {
  readonly id: string;
  readonly data: SocketData;
  readonly rooms: ReadonlySet<string>;
}

/** The server-side events of the read: a node's question to the others, and each one's answer. */
export const SOCKET_READ_EVENTS = { ask: 'parlor:sockets-in', answer: 'parlor:sockets-in:answer' } as const;
const { ask: ASK, answer: ANSWER } = SOCKET_READ_EVENTS;

export interface Ask {
  id: string;
  room: string | null;
}
export interface Answer {
  id: string;
  sockets: { id: string; data: SocketData; rooms: string[] }[];
}

/** The namespace's server-side events, which the app's socket types (InterServerEvents) leave out. */
interface Peers {
  on(event: string, listener: (message: never) => void): unknown;
  serverSideEmit(event: string, message: Ask | Answer): unknown;
  adapter: { serverCount(): Promise<number> };
}

/** What a read has heard so far: how many other nodes there are, how many answered, their sockets. */
interface Heard {
  others: number | null;
  answered: number;
  sockets: SocketView[];
  /** The read has answered (in time or not): nothing more is asked or kept for it. */
  over: boolean;
}

/** This node's sockets in a room, or all of them (never waits on Redis or another node). */
export function localSocketsIn(io: Io, room: string | null): AppSocket[] {
  const nsp = io.of('/');
  if (room === null) return [...nsp.sockets.values()];
  return [...(nsp.adapter.rooms.get(room) ?? [])].flatMap((id) => {
    const socket = nsp.sockets.get(id);
    return socket ? [socket] : [];
  });
}

/** Reads of the sockets on every node that degrade to the nodes that answered instead of failing. */
export function crossNodeReads(io: Io, log: FastifyBaseLogger) {
  const peers = () => io.of('/') as unknown as Peers;
  /** The reads of this node waiting for answers, by id. */
  const waiting = new Map<string, (answer: Answer) => void>();

  // Not the adapter's fetchSockets: when one node does not answer in time it fails as a whole, and
  // what the others answered is lost. Here every answer counts as it arrives. Every node hears the
  // answers (pub/sub, as the requests); only the asking node waits for the id.
  peers().on(ASK, (ask: Ask) => {
    const sockets = localSocketsIn(io, ask.room).map((s) => ({ id: s.id, data: s.data, rooms: [...s.rooms] }));
    peers().serverSideEmit(ANSWER, { id: ask.id, sockets });
  });
  peers().on(ANSWER, (answer: Answer) => waiting.get(answer.id)?.(answer));

  /**
   * Asks the other nodes, adding each answer to `heard`; resolves once all of them answered. A
   * read that gave up while the count of nodes was on its way (a slow Redis) asks nobody: its
   * waiter would never be removed.
   */
  const askOthers = async (id: string, room: string | null, heard: Heard): Promise<void> => {
    const others = (await peers().adapter.serverCount()) - 1;
    heard.others = others;
    if (others <= 0 || heard.over) return;
    await new Promise<void>((resolve) => {
      waiting.set(id, (answer) => {
        for (const s of answer.sockets) heard.sockets.push({ id: s.id, data: s.data, rooms: new Set(s.rooms) });
        if (++heard.answered >= others) resolve();
      });
      peers().serverSideEmit(ASK, { id, room });
    });
  };

  return {
    /**
     * The sockets in a room (null: every socket) on every node, for reads that follow a committed
     * change (presence, who is still in a chat): such a read must not turn the change into a
     * failure. When another node does not answer within CROSS_NODE_READ_TIMEOUT_MS, it answers
     * this node's sockets and those of the nodes that did, with `complete: false`; when Redis
     * fails, this node's. Either logs a warning.
     */
    async socketsIn(room: string | null): Promise<{ sockets: SocketView[]; complete: boolean }> {
      const id = randomUUID();
      const heard: Heard = { others: null, answered: 0, sockets: [], over: false };
      let timer: NodeJS.Timeout | undefined;
      // Bounds the count of the nodes (a Redis command) and their answers alike.
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no answer within ${CROSS_NODE_READ_TIMEOUT_MS} ms`)),
          CROSS_NODE_READ_TIMEOUT_MS,
        );
      });
      let complete = true;
      try {
        await Promise.race([askOthers(id, room, heard), late]);
      } catch (err) {
        complete = false;
        const { others, answered } = heard;
        log.warn({ err, room, others, answered }, 'sockets of some nodes could not be read; using those that answered');
      } finally {
        clearTimeout(timer);
        heard.over = true;
        waiting.delete(id);
      }
      return { sockets: [...localSocketsIn(io, room), ...heard.sockets], complete };
    },
  };
}
