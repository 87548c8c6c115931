import type { VmInputPayload, VmStopReason } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import type { Realtime } from '../../platform/realtime.js';
import { withinTime } from '../../platform/timeout.js';
import type { VmFrame, VmProvider } from '../../platform/vm/provider.js';
import type { ChatsService } from '../chats/chats.service.js';
import { PLACE_TTL_MS, type VmCluster } from './vm.cluster.js';
import { makeRoomControl, type RemoteActor, runningRoom } from './vm.control.js';
import { type HostedRoom, type Launch, launchRoom } from './vm.host.launch.js';
import type { Actor, RoomChat } from './vm.rules.js';
import { type AudienceAnswer, makeScreencast } from './vm.screencast.js';
import type { SettingsSource } from './vm.settings.js';

export { CONTROL_REQUEST_REPEAT_MS, type ControlAnswer, type RemoteActor } from './vm.control.js';
export type { AudienceAnswer } from './vm.screencast.js';

export interface HostDeps {
  provider: VmProvider;
  chats: Pick<ChatsService, 'assertMember'>;
  realtime: Pick<Realtime, 'socketsIn' | 'emitTo'>;
  clock: Clock;
  cluster: VmCluster;
  settingsFor: () => SettingsSource;
  roomChat: (actor: Actor, chatId: number) => Promise<RoomChat>;
  /** Whether `rule` lets the actor act on its level as stored (vm.service.ts `allowedAsStored`). */
  allowedAsStored: (actor: Actor, rule: (a: Actor) => boolean) => Promise<boolean>;
  /** Throws unless the chat, read now, may run its room (deleted: ERR_CHAT_NOT_FOUND; archived: ERR_CHAT_READ_ONLY). */
  mayRun: (chatId: number) => Promise<void>;
  /** Hands a frame to this node's own viewers of the room. */
  localFrame: (chatId: number, frame: VmFrame) => void;
  /** Announces a started room (room:started with credentials to everyone in the chat). */
  announceStarted: (chatId: number) => Promise<void>;
  allowPrivateNetworks: boolean;
  idleMs: number;
  log: { warn(obj: object, msg: string): void };
}

/** How long close waits for the starts it called off to settle. */
const CLOSE_WAIT_MS = 2_000;

/**
 * The rooms this node runs (their browsers are this node's provider's): settings, controller, who
 * watches on which node, the screencast subscription, idle and stop. Every operation here runs on
 * the owning node; other nodes reach it through `VmCluster.call` (vm.service.ts routes them).
 */
export function makeRoomHost(deps: HostDeps) {
  const { provider, realtime, clock, cluster } = deps;
  const hosted = new Map<number, HostedRoom>();
  const starting = new Map<number, Launch>();
  /**
   * Stops in progress here, in the order asked: a start asked meanwhile waits for them (the old
   * browser exits, its map entry and room:stopped go first), so nothing of the old run can end
   * the new one.
   */
  const stopping = new Map<number, Promise<void>>();
  const now = () => clock.now().getTime();
  /** When the sweep last re-checked the controllers of this node's rooms (ms). */
  let controllersCheckedAt = Number.NEGATIVE_INFINITY;

  const control = makeRoomControl({
    provider,
    chats: deps.chats,
    realtime,
    roomChat: deps.roomChat,
    allowedAsStored: deps.allowedAsStored,
    hosted,
    now,
  });
  const screencast = makeScreencast({ provider, cluster, localFrame: deps.localFrame, now, log: deps.log });

  const launch = (chatId: number, run: Launch, after: Promise<void> | undefined) =>
    launchRoom({ ...deps, hosted, now }, chatId, run, after);

  const end = async (
    chatId: number,
    reason: VmStopReason,
    before: Promise<void> | undefined,
    launching: Launch | undefined,
  ) => {
    await before?.catch(() => {});
    if (launching) {
      // The provider kills a browser still starting rather than awaiting its ready timeout: the
      // start fails (called off) and releases its map entry; one past its launch is stopped below.
      await provider.stop(String(chatId)).catch(() => {});
      await launching.done.catch(() => {});
    }
    const room = hosted.get(chatId);
    hosted.delete(chatId);
    if (room) {
      room.unsubscribe?.();
      room.audiences.clear();
      // Other nodes see the room going, not running, until its browser is gone: a start there
      // waits for this stop and launches anew (one answered "already running" would start nothing).
      // A mark that fails (a Redis blip) does not keep the browser alive.
      await cluster.hold(chatId, 'stopping').catch(() => false);
    }
    try {
      await provider.stop(String(chatId));
    } finally {
      // A stop that failed ends the room here all the same: no entry of it may outlive it here.
      await cluster.release(chatId);
    }
    // Every node tells its own sockets (the chat's, and its viewers') that the room stopped.
    if (room) await cluster.broadcast({ type: 'stopped', chatId, reason });
  };

  /** The room runs here: its browser is up and its running mark written (a launch past its browser is still starting). */
  const runs = (chatId: number): boolean => hosted.get(chatId)?.live === true;

  /** Whether nobody has watched the room for VM_IDLE_TIMEOUT_SECONDS at `at`. */
  const isIdle = (room: HostedRoom, at: number): boolean =>
    room.idleSince !== null && at - room.idleSince >= deps.idleMs;

  /**
   * Stops the room here: after the stops asked before it, and the start in progress now, called
   * off. Taken at once, so a stop never waits for a start asked after it (which waits for the stop).
   */
  const stop = (chatId: number, reason: VmStopReason): Promise<void> => {
    const launching = starting.get(chatId);
    if (launching) launching.calledOff = true;
    const ending: Promise<void> = end(chatId, reason, stopping.get(chatId), launching).finally(() => {
      if (stopping.get(chatId) === ending) stopping.delete(chatId);
    });
    stopping.set(chatId, ending);
    return ending;
  };

  provider.onStopped((roomId, reason) => {
    void stop(Number(roomId), reason).catch((err: unknown) => deps.log.warn({ err }, 'room VM clean-up failed'));
  });

  return {
    /** Whether the room is this node's: starting, running or stopping here (starts and stops come here). */
    has: (chatId: number) => hosted.has(chatId) || starting.has(chatId) || stopping.has(chatId),

    /** Whether the room runs here: its browser is up and marked running (members get credentials, viewers watch). */
    runs,

    /** Settles once the stops of the room in progress here are done. */
    stopped: (chatId: number): Promise<void> => stopping.get(chatId)?.catch(() => {}) ?? Promise.resolve(),

    /**
     * Whether `start` called now would launch a browser: not when it joins a launch in progress
     * here, nor for a room that runs here (one stopping here is launched anew after the stop).
     */
    launches(chatId: number): boolean {
      const inFlight = starting.get(chatId);
      if (inFlight && !inFlight.calledOff) return false;
      return stopping.has(chatId) || !hosted.has(chatId);
    },

    /**
     * Launches the room on this node (the caller claimed it in the room map). A room that runs
     * here already is left as it is (its controller, viewers and idle clock); one starting here is
     * awaited (docs/api.md: already running or starting, nothing else happens). A room stopping
     * here starts again once the stop is done.
     */
    start(chatId: number): Promise<void> {
      const inFlight = starting.get(chatId);
      if (inFlight && !inFlight.calledOff) return inFlight.done;
      const after = stopping.get(chatId);
      if (!after && hosted.has(chatId)) return Promise.resolve();
      const run: Launch = { done: Promise.resolve(), calledOff: false };
      run.done = launch(chatId, run, after).finally(() => {
        if (starting.get(chatId) === run) starting.delete(chatId);
      });
      starting.set(chatId, run);
      return run.done;
    },

    stop,

    /** A node reports who watches there (no users: nobody any more); `frame`: it wants the latest frame. */
    audience(chatId: number, node: string, users: number[], frame = false): AudienceAnswer {
      return screencast.audience(runningRoom(hosted, chatId), node, users, frame);
    },

    lastFrame: (chatId: number): VmFrame | null => hosted.get(chatId)?.last ?? null,

    requestControl: control.requestControl,
    grant: control.grant,
    release: control.release,
    input: control.input,
    userLeft: control.userLeft,

    /**
     * Keeps this node's rooms in the room map, forgets silent nodes' viewers, drops controllers
     * gone from every node, stops rooms idle at `at`. Every entry is refreshed first and no stop is
     * awaited: a slow one (a browser host that does not answer) would hold the next run (runs never
     * overlap) and let the other rooms' entries expire, and another node claim them (docs/api.md,
     * Cluster mode).
     */
    async sweep(at: number): Promise<void> {
      for (const chatId of [...starting.keys()]) {
        if (hosted.has(chatId)) continue;
        await cluster.hold(chatId, 'starting');
        // The launch failed while this refresh ran: it released the entry, which this wrote again.
        // An entry of no launch would make the room look starting here until it expired.
        if (!starting.has(chatId) && !hosted.has(chatId)) await cluster.release(chatId);
      }
      const idle: HostedRoom[] = [];
      for (const room of [...hosted.values()]) {
        // A launch still writing its running mark keeps the entry itself: marked here first, the
        // room would look running to other nodes before a stop could still call it off.
        if (hosted.get(room.chatId) !== room || !room.live) continue;
        const held = await cluster.hold(room.chatId, 'running');
        // Stopped meanwhile: the stop has the map entry (marked stopping, then released).
        if (hosted.get(room.chatId) !== room) continue;
        if (!held) {
          // Another node holds the room now (this one stalled past the map's lifetime and the room
          // was claimed again): close this copy quietly, the chat's sockets follow the other one.
          deps.log.warn({ chat_id: room.chatId }, 'room VM taken over by another node; closing this copy');
          hosted.delete(room.chatId);
          room.unsubscribe?.();
          void provider.stop(String(room.chatId)).catch(() => {});
          continue;
        }
        screencast.forgetSilent(room);
        control.expireRequests(room, at);
        screencast.updateWatching(room);
        if (isIdle(room, at)) idle.push(room);
      }
      // A controller whose node died (or whose leave was lost) sends no leave here: their control
      // is re-checked once per PLACE_TTL_MS, as long as a silent node's viewers are kept. Not
      // awaited: the read waits up to 2 s on the other nodes, and must not hold the map refresh.
      if (at - controllersCheckedAt >= PLACE_TTL_MS) {
        controllersCheckedAt = at;
        for (const room of hosted.values())
          if (room.controller !== null)
            void control
              .dropAbsentController(room.chatId)
              .catch((err: unknown) => deps.log.warn({ err, chat_id: room.chatId }, 'room VM control re-check failed'));
      }
      // `stop` takes the room at once (`stopping`; it leaves `hosted` before its first wait ends), so
      // a start waits for it and the next run does not stop it again. Judged again here: the loop
      // awaited the map since (a viewer may have come, the room been stopped or started anew).
      for (const room of idle) {
        const { chatId } = room;
        if (stopping.has(chatId) || hosted.get(chatId) !== room || !isIdle(room, at)) continue;
        void stop(chatId, 'idle').catch((err: unknown) =>
          deps.log.warn({ err, chat_id: chatId }, 'room VM idle stop failed'),
        );
      }
    },

    /** This node's running browsers, the distinct users watching them (any node), and controllers. */
    statistics() {
      let viewers = 0;
      let controllers = 0;
      let running = 0;
      for (const room of hosted.values()) {
        if (!room.live) continue;
        running += 1;
        viewers += new Set([...room.audiences.values()].flatMap((a) => a.users)).size;
        if (room.controller !== null) controllers += 1;
      }
      // A room counts once it runs (`runs`), as its viewers and controller do: one still starting
      // (its browser up, its running mark not yet written) or stopping here does not run.
      return { active_browsers: running, viewers, controllers };
    },

    /**
     * Closes the provider first: it kills every browser, and calls off the starts still in
     * progress rather than letting them run to their 20 s ready timeout (the shutdown cap would
     * fire before the stores close). The launches so failed settle (each releases its room map
     * entry) within CLOSE_WAIT_MS; then every room that was running is reported stopped.
     */
    async close(): Promise<void> {
      const launches = [...starting.values()].map((l) => l.done.catch(() => {}));
      await provider.close();
      await withinTime(Promise.all(launches), CLOSE_WAIT_MS);
      // Idle stops the sweep started (it waits on none) end too, before the stores close.
      const ending = [...stopping.values()].map((p) => p.catch(() => {}));
      await Promise.all([...hosted.keys()].map((id) => stop(id, 'shutdown')));
      await Promise.all(ending);
    },
  };
}

export type RoomHost = ReturnType<typeof makeRoomHost>;

/** Answers other nodes' requests (`VmCluster.call`) with this node's rooms. */
export function serveHost(cluster: VmCluster, host: RoomHost): void {
  cluster.serve(async (op, a) => {
    const args = a as { chatId: number; node: string; users: number[]; actor: RemoteActor; userId: number };
    switch (op) {
      case 'stop':
        return host.stop(args.chatId, (a as { reason: VmStopReason }).reason);
      case 'audience':
        // A node that does not say (one of an earlier version, mid-upgrade) gets the frame, as it did.
        return host.audience(args.chatId, args.node, args.users, (a as { frame?: boolean }).frame !== false);
      case 'requestControl':
        return host.requestControl(args.chatId, args.actor);
      case 'grant':
        return host.grant(args.chatId, args.actor, args.userId);
      case 'release':
        return host.release(args.chatId, args.actor);
      case 'input':
        return host.input(args.chatId, args.actor.userId, (a as { payload: VmInputPayload }).payload);
      case 'userLeft':
        return host.userLeft(args.chatId, args.userId);
      default:
        throw appError('ERR_INTERNAL');
    }
  });
}
