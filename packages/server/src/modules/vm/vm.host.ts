import { VM_VIEWPORT, type VmInputPayload, type VmStopReason } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import { withinTime } from '../../platform/timeout.js';
import { calledOff } from '../../platform/vm/chromium-process.js';
import type { VmFrame, VmProvider } from '../../platform/vm/provider.js';
import type { ChatsService } from '../chats/chats.service.js';
import { encodeFrame, PLACE_TTL_MS, type VmCluster } from './vm.cluster.js';
import { type Actor, canGrant, type RoomChat } from './vm.rules.js';
import { type RoomVmSettings, resolveSettings, type SettingsSource } from './vm.settings.js';

/** Who acts on a room, as it travels to the node that runs it. */
export interface RemoteActor extends Actor {
  username: string;
}

export interface HostDeps {
  provider: VmProvider;
  chats: Pick<ChatsService, 'assertMember'>;
  realtime: Pick<Realtime, 'socketsIn' | 'emitTo'>;
  clock: Clock;
  cluster: VmCluster;
  settingsFor: () => SettingsSource;
  roomChat: (actor: Actor, chatId: number) => Promise<RoomChat>;
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

/** What a node watching a room learns when it reports its viewers: the size, the controller, the latest frame. */
export interface AudienceAnswer {
  width: number;
  height: number;
  controller_user_id: number | null;
  last: string | null;
}

interface HostedRoom {
  chatId: number;
  settings: RoomVmSettings;
  width: number;
  height: number;
  controller: number | null;
  /** Users watching, per node (this node included), and when that node last reported. */
  audiences: Map<string, { users: number[]; seenAt: number }>;
  /** Since when nobody watches (ms), or null while someone does. */
  idleSince: number | null;
  unsubscribe: (() => void) | null;
  last: VmFrame | null;
  /** Input events sent to the browser and not yet answered (a flood is refused, not queued). */
  inputsInFlight: number;
  /**
   * The control requests announced to the chat, by requester: when, and the answer the requester
   * got. Dropped when control changes hands (the request was answered, or is asked anew of the
   * new controller) and once CONTROL_REQUEST_REPEAT_MS have passed.
   */
  requests: Map<number, { at: number; answer: Promise<ControlAnswer> }>;
}

/** What a control request answers: whether the caller got control, and who holds it. */
export interface ControlAnswer {
  granted: boolean;
  controller_user_id: number | null;
}

/** A start in progress on this node; a stop asked meanwhile calls it off. */
interface Launch {
  done: Promise<void>;
  calledOff: boolean;
}

/** How long close waits for the starts it called off to settle. */
const CLOSE_WAIT_MS = 2_000;

/** A controller may have this many input events waiting for the browser; more are refused. */
const MAX_INPUTS_IN_FLIGHT = 64;

/**
 * A member's control request reaches the chat once per this long, as a raised hand does: repeats
 * (any socket of theirs, on any node: the room's node decides) answer as the first did and reach
 * nobody, so one member cannot make every socket of the chat receive a flood of requests.
 */
export const CONTROL_REQUEST_REPEAT_MS = 10_000;

/**
 * The rooms this node runs (their browsers are this node's provider's): settings, controller, who
 * watches on which node, the screencast subscription, idle and stop. Every operation here runs on
 * the owning node; other nodes reach it through `VmCluster.call` (vm.service.ts routes them).
 */
export function makeRoomHost(deps: HostDeps) {
  const { provider, realtime, clock, cluster } = deps;
  const self = cluster.nodeId;
  const hosted = new Map<number, HostedRoom>();
  const starting = new Map<number, Launch>();
  /**
   * Stops in progress here, in the order asked: a start asked meanwhile waits for them (the old
   * browser exits, its map entry and room:stopped go first), so nothing of the old run can end
   * the new one.
   */
  const stopping = new Map<number, Promise<void>>();
  const now = () => clock.now().getTime();

  const mustHost = (chatId: number): HostedRoom => {
    const room = hosted.get(chatId);
    if (!room) throw appError('ERR_ROOM_NOT_RUNNING');
    return room;
  };

  /**
   * Control requests being checked (the membership, the requester's sockets): a leave of the
   * requester reported meanwhile marks them, so the request looks again before it grants.
   */
  const asking = new Set<{ chatId: number; userId: number; left: boolean }>();

  /**
   * Whether the user has a socket in the chat's socket room, on any node; when another node does
   * not answer in time, on this one (`Realtime.socketsIn`): control is still decided, not failed.
   */
  const inChat = async (chatId: number, userId: number): Promise<boolean> => {
    const { sockets } = await realtime.socketsIn(rooms.chat(chatId));
    return sockets.some((s) => s.data.userId === userId);
  };

  /**
   * Runs `act` (control handed to `userId`) only if the user is a member with a socket in the
   * chat's room now; ERR_NOT_CHAT_MEMBER (`why`) otherwise. A kick or ban committed since the
   * caller's socket was checked must not hand them control; nor may a disconnect: their leave has
   * been handled already (userLeft), so control granted now would stay with nobody there. A leave
   * reported while the sockets were looked up may postdate the answer: look again.
   */
  const whileInChat = async <T>(chatId: number, userId: number, why: string, act: () => T): Promise<T> => {
    const ask = { chatId, userId, left: false };
    asking.add(ask);
    try {
      await deps.chats.assertMember(userId, chatId);
      let present = await inChat(chatId, userId);
      while (present && ask.left) {
        ask.left = false;
        present = await inChat(chatId, userId);
      }
      if (!present) throw appError('ERR_NOT_CHAT_MEMBER', why);
      return act();
    } finally {
      asking.delete(ask);
    }
  };

  const setController = (room: HostedRoom, userId: number | null) => {
    room.controller = userId;
    room.requests.clear();
    realtime.emitTo(rooms.chat(room.chatId), 'vm:control', { chat_id: room.chatId, controller_user_id: userId });
  };

  const onFrame = (room: HostedRoom) => (f: VmFrame) => {
    room.last = f;
    if (room.audiences.has(self)) deps.localFrame(room.chatId, f);
    if ([...room.audiences.keys()].some((n) => n !== self))
      cluster
        .publishFrame(room.chatId, f)
        .catch((err: unknown) => deps.log.warn({ err }, 'room VM frame relay failed'));
  };

  /** The screencast runs while anyone, on any node, watches; the idle clock while nobody does. */
  const updateWatching = (room: HostedRoom) => {
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

  const launch = async (chatId: number, run: Launch, after: Promise<void> | undefined) => {
    if (after) {
      // The stop this start follows released the room map entry: claim the room again for this run.
      await after.catch(() => {});
      if (!(await cluster.hold(chatId, 'starting')))
        throw appError('ERR_ROOM_START_FAILED', 'Another node took this room over while it stopped here; try again.');
    }
    try {
      // The start read the chat before this node held the room: a deletion or archiving that
      // committed since found no room to stop (chatRemoved, chatArchived look for it after their
      // commit). Read now, with the room held (in the room map and here), the chat is seen gone,
      // or the removal, committed after this read, finds the room on whichever node it runs and
      // stops it (calling off a launch still under way).
      await deps.mayRun(chatId);
      const settings = resolveSettings(await deps.settingsFor()(chatId));
      // A stop asked since leaves no browser to launch.
      if (run.calledOff) throw calledOff();
      const info = await provider.start(String(chatId), {
        browser: settings.browser,
        proxy: settings.proxy,
        startUrl: settings.start_url,
        allowPrivateNetworks: deps.allowPrivateNetworks,
        width: VM_VIEWPORT.width,
        height: VM_VIEWPORT.height,
      });
      hosted.set(chatId, {
        chatId,
        settings,
        width: info.width,
        height: info.height,
        controller: null,
        audiences: new Map(),
        idleSince: now(),
        unsubscribe: null,
        last: null,
        inputsInFlight: 0,
        requests: new Map(),
      });
      if (!(await cluster.hold(chatId, 'running'))) {
        // The claim lapsed while the browser started (this node stalled) and another node took the
        // room: this copy goes, the other one serves the chat.
        hosted.delete(chatId);
        await provider.stop(String(chatId)).catch(() => {});
        throw appError('ERR_ROOM_START_FAILED', 'Another node took this room over while it was starting.');
      }
    } catch (err) {
      await cluster.release(chatId).catch(() => {});
      throw err;
    }
    await deps.announceStarted(chatId);
  };

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

    /** Whether the room runs here: its browser is up (members get credentials, viewers watch). */
    runs: (chatId: number) => hosted.has(chatId),

    /** Settles once the stops of the room in progress here are done. */
    stopped: (chatId: number): Promise<void> => stopping.get(chatId)?.catch(() => {}) ?? Promise.resolve(),

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

    /** A node reports who watches there (no users: nobody any more). */
    audience(chatId: number, node: string, users: number[]): AudienceAnswer {
      const room = mustHost(chatId);
      if (users.length > 0) room.audiences.set(node, { users, seenAt: now() });
      else room.audiences.delete(node);
      updateWatching(room);
      return {
        width: room.width,
        height: room.height,
        controller_user_id: room.controller,
        last: room.last && node !== self ? encodeFrame(room.last) : null,
      };
    },

    lastFrame: (chatId: number): VmFrame | null => hosted.get(chatId)?.last ?? null,

    /**
     * Takes control when nobody holds it, or announces the request to the chat. A repeat while the
     * user's request is pending (CONTROL_REQUEST_REPEAT_MS, control unchanged) gets the first
     * one's answer, even while that one is still being checked: no second announcement, and no
     * second read of the chat's sockets on every node.
     */
    async requestControl(chatId: number, who: RemoteActor): Promise<ControlAnswer> {
      const room = mustHost(chatId);
      if (!room.settings.allow_control_requests)
        throw appError(
          'ERR_FORBIDDEN',
          'Control requests are off in this room; the chat owner or a moderator grants control.',
        );
      const pending = room.requests.get(who.userId);
      if (pending && now() - pending.at < CONTROL_REQUEST_REPEAT_MS) return pending.answer;
      // The sender's socket was in the chat's room on its node; a kick, ban or disconnect since
      // then neither hands it control nor reaches the chat with its request.
      const answer = whileInChat(chatId, who.userId, 'Join this chat (room:join) first.', (): ControlAnswer => {
        const current = mustHost(chatId);
        if (current.controller === null) setController(current, who.userId);
        if (current.controller === who.userId) return { granted: true, controller_user_id: who.userId };
        realtime.emitTo(rooms.chat(chatId), 'vm:control:request', {
          chat_id: chatId,
          user_id: who.userId,
          username: who.username,
        });
        return { granted: false, controller_user_id: current.controller };
      });
      const asked = { at: now(), answer };
      room.requests.set(who.userId, asked);
      // A refused request announced nothing: the next one is checked afresh.
      answer.catch(() => {
        if (room.requests.get(who.userId) === asked) room.requests.delete(who.userId);
      });
      return answer;
    },

    /** Control goes to a member in the chat's room only: one with no socket there could not use it, nor lose it by leaving. */
    async grant(chatId: number, actor: RemoteActor, userId: number): Promise<void> {
      mustHost(chatId);
      if (!canGrant(actor, await deps.roomChat(actor, chatId)))
        throw appError('ERR_FORBIDDEN', 'Only the chat owner or a moderator hands control over.');
      await whileInChat(
        chatId,
        userId,
        'This member is not in the chat (room:join): control goes to members who are.',
        () => setController(mustHost(chatId), userId),
      );
    },

    /** The controller gives control back; the chat owner or a moderator takes it from anyone. */
    async release(chatId: number, actor: RemoteActor): Promise<void> {
      const room = mustHost(chatId);
      if (room.controller === null) return;
      if (room.controller !== actor.userId && !canGrant(actor, await deps.roomChat(actor, chatId)))
        throw appError('ERR_FORBIDDEN', 'Only the member in control, the chat owner or a moderator releases control.');
      setController(room, null);
    },

    async input(chatId: number, userId: number, payload: VmInputPayload): Promise<void> {
      const room = mustHost(chatId);
      if (room.controller !== userId)
        throw appError('ERR_FORBIDDEN', 'Only the member in control sends input (vm:control:request).');
      if (payload.kind === 'navigate' && room.settings.kiosk)
        throw appError('ERR_FORBIDDEN', 'This room is in kiosk mode: it does not navigate.');
      if (room.inputsInFlight >= MAX_INPUTS_IN_FLIGHT)
        throw appError('ERR_RATE_LIMITED', 'Too many input events at once; wait for their acks.', { retry_after: 1 });
      room.inputsInFlight += 1;
      try {
        if (payload.kind === 'navigate')
          await provider.navigate(String(chatId), 'url' in payload ? { url: payload.url } : { action: payload.action });
        else {
          const { chat_id: _, ...input } = payload;
          await provider.input(String(chatId), input);
        }
      } finally {
        room.inputsInFlight -= 1;
      }
    },

    /** A user's last socket left the chat somewhere: they lose control unless still in it on some node. */
    async userLeft(chatId: number, userId: number): Promise<void> {
      for (const ask of asking) if (ask.chatId === chatId && ask.userId === userId) ask.left = true;
      const room = hosted.get(chatId);
      if (room?.controller !== userId) return;
      const present = await inChat(chatId, userId);
      if (room.controller === userId && !present && hosted.get(chatId) === room) setController(room, null);
    },

    /** Keeps this node's rooms in the room map, forgets silent nodes' viewers, stops rooms idle at `at`. */
    async sweep(at: number): Promise<void> {
      for (const chatId of [...starting.keys()]) {
        if (hosted.has(chatId)) continue;
        await cluster.hold(chatId, 'starting');
        // The launch failed while this refresh ran: it released the entry, which this wrote again.
        // An entry of no launch would make the room look starting here until it expired.
        if (!starting.has(chatId) && !hosted.has(chatId)) await cluster.release(chatId);
      }
      for (const room of [...hosted.values()]) {
        if (hosted.get(room.chatId) !== room) continue;
        const held = await cluster.hold(room.chatId, 'running');
        // Stopped meanwhile: the stop has the map entry (marked stopping, then released).
        if (hosted.get(room.chatId) !== room) continue;
        if (!held) {
          // Another node holds the room now (this one stalled past the map's lifetime and the room
          // was claimed again): close this copy quietly, the chat's sockets follow the other one.
          deps.log.warn({ chat_id: room.chatId }, 'room VM taken over by another node; closing this copy');
          hosted.delete(room.chatId);
          room.unsubscribe?.();
          await provider.stop(String(room.chatId)).catch(() => {});
          continue;
        }
        // Nodes report their viewers every few seconds; one silent for the map's TTL is gone.
        for (const [node, a] of room.audiences)
          if (node !== self && now() - a.seenAt > PLACE_TTL_MS) room.audiences.delete(node);
        for (const [userId, r] of room.requests)
          if (at - r.at >= CONTROL_REQUEST_REPEAT_MS) room.requests.delete(userId);
        updateWatching(room);
        if (room.idleSince !== null && at - room.idleSince >= deps.idleMs) await stop(room.chatId, 'idle');
      }
    },

    /** This node's running browsers, the distinct users watching them (any node), and controllers. */
    statistics() {
      let viewers = 0;
      let controllers = 0;
      for (const room of hosted.values()) {
        viewers += new Set([...room.audiences.values()].flatMap((a) => a.users)).size;
        if (room.controller !== null) controllers += 1;
      }
      // A room counts once its browser is up (`runs`), as its viewers and controller do: one still
      // starting or stopping here has a browser process but does not run.
      return { active_browsers: hosted.size, viewers, controllers };
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
      await Promise.all([...hosted.keys()].map((id) => stop(id, 'shutdown')));
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
        return host.audience(args.chatId, args.node, args.users);
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
