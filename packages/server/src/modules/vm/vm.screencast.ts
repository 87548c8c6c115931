import type { VmFrame, VmProvider } from '../../platform/vm/provider.js';
import { encodeFrame, PLACE_TTL_MS, type VmCluster } from './vm.cluster.js';

/** What a node watching a room learns when it reports its viewers: the size, the controller, the latest frame. */
export interface AudienceAnswer {
  width: number;
  height: number;
  controller_user_id: number | null;
  last: string | null;
}

/** What the screencast keeps of a room this node runs (part of vm.host.ts's hosted room). */
export interface WatchedRoom {
  chatId: number;
  width: number;
  height: number;
  controller: number | null;
  /** Users watching, per node (this node included), and when that node last reported. */
  audiences: Map<string, { users: number[]; seenAt: number }>;
  /** Since when nobody watches (ms), or null while someone does. */
  idleSince: number | null;
  unsubscribe: (() => void) | null;
  last: VmFrame | null;
}

export interface ScreencastDeps {
  provider: Pick<VmProvider, 'subscribe'>;
  cluster: Pick<VmCluster, 'nodeId' | 'publishFrame'>;
  /** Hands a frame to this node's own viewers of the room. */
  localFrame: (chatId: number, frame: VmFrame) => void;
  now: () => number;
  log: { warn(obj: object, msg: string): void };
}

/**
 * The screencast of the rooms this node runs (vm.host.ts composes it): who watches on which node,
 * the browser's frames while anyone does (to this node's viewers, and over the frame channel to
 * other nodes'), and the idle clock while nobody does.
 */
export function makeScreencast(deps: ScreencastDeps) {
  const { provider, cluster, now } = deps;
  const self = cluster.nodeId;

  const onFrame = (room: WatchedRoom) => (f: VmFrame) => {
    room.last = f;
    if (room.audiences.has(self)) deps.localFrame(room.chatId, f);
    if ([...room.audiences.keys()].some((n) => n !== self))
      cluster
        .publishFrame(room.chatId, f)
        .catch((err: unknown) => deps.log.warn({ err }, 'room VM frame relay failed'));
  };

  /** The screencast runs while anyone, on any node, watches; the idle clock while nobody does. */
  const updateWatching = (room: WatchedRoom) => {
    const watched = [...room.audiences.values()].some((a) => a.users.length > 0);
    if (watched && !room.unsubscribe) {
      room.idleSince = null;
      room.unsubscribe = provider.subscribe(String(room.chatId), onFrame(room));
    } else if (!watched) {
      room.unsubscribe?.();
      room.unsubscribe = null;
      room.idleSince ??= now();
    }
  };

  return {
    updateWatching,

    /**
     * Records who watches on `node` (no users: nobody any more) and answers what that node learns;
     * the latest frame only when asked (`frame`: a new viewer there), as its other viewers have it.
     */
    audience(room: WatchedRoom, node: string, users: number[], frame: boolean): AudienceAnswer {
      if (users.length > 0) room.audiences.set(node, { users, seenAt: now() });
      else room.audiences.delete(node);
      updateWatching(room);
      return {
        width: room.width,
        height: room.height,
        controller_user_id: room.controller,
        last: frame && room.last && node !== self ? encodeFrame(room.last) : null,
      };
    },

    /** Forgets the viewers of other nodes that stopped reporting (the sweep). */
    forgetSilent(room: WatchedRoom): void {
      // Nodes report their viewers every few seconds; one silent for the map's TTL is gone.
      for (const [node, a] of room.audiences)
        if (node !== self && now() - a.seenAt > PLACE_TTL_MS) room.audiences.delete(node);
    },
  };
}

export type Screencast = ReturnType<typeof makeScreencast>;
