import type { VmStopReason } from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import { withinTime } from '../../platform/timeout.js';
import type { VmFrame } from '../../platform/vm/provider.js';
import type { VmCluster } from './vm.cluster.js';
import type { AudienceAnswer } from './vm.host.js';
import { RoomViewers } from './vm.viewers.js';

/** This node's viewers of one room, wherever the room runs. */
export interface Audience {
  chatId: number;
  node: string;
  viewers: RoomViewers;
  /** Remote rooms: ends the frame subscription. */
  unsubscribe: (() => Promise<void>) | null;
  reportedAt: number;
}

export interface AudienceDeps {
  realtime: Pick<Realtime, 'io'>;
  cluster: VmCluster;
  now: () => number;
}

/** An unacknowledged frame is sent again after this long (it may have been dropped). */
export const ACK_TIMEOUT_MS = 3000;
/** A node watching a room on another node reports its viewers this often (the owner forgets silent nodes). */
const REPORT_EVERY_MS = 5000;
/** How long a closing node waits for the owners of the rooms it watches to hear it has no viewers. */
const CLOSE_NOTICE_MS = 1000;
/** How many times `open` makes an audience again that was ended while its subscription was made. */
const OPEN_ATTEMPTS = 3;

/**
 * This node's audiences of rooms (one per room its sockets watch, whether the room runs here or on
 * another node): the viewers and their frames, the frame subscription of remote rooms, and the
 * reports that tell the owning node who watches here.
 */
export function makeAudiences(deps: AudienceDeps) {
  const { realtime, cluster, now } = deps;
  const self = cluster.nodeId;
  const audiences = new Map<number, Audience>();
  /** Audiences whose periodic report is on its way (the owner has not answered yet). */
  const reporting = new Set<Audience>();

  const sendFrame = (chatId: number) => (socketIds: string[], f: VmFrame) => {
    // A volatile packet is dropped when the connection is still writing (a frame before it, say):
    // such viewers are answered back and keep the frame pending (RoomViewers) rather than lose it.
    const busy: string[] = [];
    const ready: string[] = [];
    for (const id of socketIds) {
      const socket = realtime.io.sockets.sockets.get(id);
      (socket && !socket.conn.transport.writable ? busy : ready).push(id);
    }
    // Volatile and node-local: frames are never kept for reconnecting clients nor sent through the adapter.
    // One emit to all the ready viewers: the frame is encoded once.
    if (ready.length > 0)
      realtime.io.local
        .to(ready)
        .volatile.emit('vm:frame', { chat_id: chatId, seq: f.seq, mime: f.mime, data: f.data });
    return busy;
  };

  /** Ends this node's viewing of a room; its viewers (and the chat's sockets here) hear room:stopped. */
  const endAudience = (chatId: number, reason: string | null) => {
    const a = audiences.get(chatId);
    audiences.delete(chatId);
    const watchers = a ? a.viewers.sockets() : [];
    a?.viewers.clear();
    void a?.unsubscribe?.().catch(() => {});
    if (reason !== null)
      realtime.io.local
        .to([rooms.chat(chatId), ...watchers])
        .emit('room:stopped', { chat_id: chatId, reason: reason as VmStopReason });
  };

  /**
   * Tells the owner who watches here now (nobody: the audience ends). Only a watch asks for the
   * room's latest frame (`frame`), for its new viewer: the others here get every frame as it comes,
   * and a frame with each periodic report would cross the store every REPORT_EVERY_MS for nothing.
   */
  const report = async (a: Audience, opts: { frame?: boolean } = {}): Promise<AudienceAnswer> => {
    a.reportedAt = now();
    const users = [...a.viewers.users()];
    if (users.length === 0 && audiences.get(a.chatId) === a) endAudience(a.chatId, null);
    const frame = opts.frame === true;
    return cluster.call<AudienceAnswer>(a.node, 'audience', { chatId: a.chatId, node: self, users, frame });
  };
  const reportQuietly = (a: Audience) => void report(a).catch(() => {});

  /** Frame subscriptions of audiences of rooms elsewhere still being made. */
  const subscribing = new Map<Audience, Promise<void>>();
  /**
   * Subscribes the audience to its room's frames. One ended meanwhile (endAudience found no
   * subscription to end) has its subscription ended here; one that fails goes from the map.
   */
  const subscribe = async (a: Audience): Promise<void> => {
    try {
      const unsubscribe = await cluster.subscribeFrames(a.chatId, (f) => a.viewers.frame(f));
      if (audiences.get(a.chatId) === a) a.unsubscribe = unsubscribe;
      else await unsubscribe().catch(() => {});
    } catch (err) {
      if (audiences.get(a.chatId) === a) endAudience(a.chatId, null);
      throw err;
    }
  };

  return {
    get: (chatId: number) => audiences.get(chatId),
    end: endAudience,
    report,
    reportQuietly,

    /**
     * This node's audience of the room running on `node` (one of another node is ended first),
     * once its frame subscription is made. An audience ended while it was made (another watcher
     * found it empty, the room stopped) is not handed out: a viewer added to it would be out of
     * every leave's and kick's reach, its acks refused, and the room's node would not count it.
     */
    async open(chatId: number, node: string): Promise<Audience> {
      for (let attempt = 0; attempt < OPEN_ATTEMPTS; attempt++) {
        const found = audiences.get(chatId);
        if (found && found.node !== node) endAudience(chatId, null);
        let a = audiences.get(chatId);
        if (!a) {
          a = { chatId, node, viewers: new RoomViewers(sendFrame(chatId), now), unsubscribe: null, reportedAt: 0 };
          audiences.set(chatId, a);
          if (node !== self) subscribing.set(a, subscribe(a));
        }
        const pending = subscribing.get(a);
        if (pending) {
          try {
            await pending;
          } finally {
            if (subscribing.get(a) === pending) subscribing.delete(a);
          }
        }
        if (audiences.get(chatId) === a) return a;
      }
      throw appError('ERR_ROOM_NOT_RUNNING');
    },

    /**
     * Background: stale frames go again, and viewing of rooms elsewhere is reported (or ends). The
     * reports go out side by side and are not awaited: an owner that does not answer (dead, stuck)
     * holds up its own audience's next report (one in flight each), never this node's sweep.
     */
    sweep(at: Date): void {
      for (const a of [...audiences.values()]) {
        a.viewers.resendStale(ACK_TIMEOUT_MS);
        if (a.node === self || reporting.has(a) || at.getTime() - a.reportedAt < REPORT_EVERY_MS) continue;
        reporting.add(a);
        // The owner forgets nodes that stop reporting; a room gone from its node ends here too.
        report(a)
          .catch((err: unknown) => {
            if ((err as { code?: string }).code === 'ERR_ROOM_NOT_RUNNING' && audiences.get(a.chatId) === a)
              endAudience(a.chatId, 'crashed');
          })
          .finally(() => reporting.delete(a));
      }
    },

    /**
     * Rooms elsewhere stop counting this node's viewers (their sockets are about to close): told
     * all at once, and not waited for past CLOSE_NOTICE_MS. An owner not told forgets this node
     * once it stops reporting (PLACE_TTL_MS); one that does not answer must not hold up shutdown.
     */
    async close(): Promise<void> {
      const notices = [...audiences.values()]
        .filter((a) => a.node !== self)
        .map((a) =>
          cluster.call(a.node, 'audience', { chatId: a.chatId, node: self, users: [], frame: false }).catch(() => {}),
        );
      await withinTime(Promise.all(notices), CLOSE_NOTICE_MS);
    },
  };
}

export type Audiences = ReturnType<typeof makeAudiences>;
