import {
  VM_TOKEN_TTL_MS,
  VM_VIEWPORT,
  type VmCredentials,
  type VmInputPayload,
  type VmStopReason,
} from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { VmFrame, VmProvider } from '../../platform/vm/provider.js';
import type { ChatsService } from '../chats/chats.service.js';
import { type Actor, canGrant, canStart, canStop } from './vm.rules.js';
import { defaultSettingsSource, type RoomVmSettings, resolveSettings, type SettingsSource } from './vm.settings.js';
import type { ViewerTokens } from './vm.tokens.js';
import { RoomViewers } from './vm.viewers.js';

/** A socket acting on a room: who it is and whether it is in the chat's socket room (room:join). */
export interface Caller extends Actor {
  socketId: string;
  username: string;
  joined(chatId: number): boolean;
}

export interface VmDeps {
  provider: VmProvider;
  chats: Pick<ChatsService, 'find' | 'assertMember'>;
  realtime: Pick<Realtime, 'io' | 'emitTo'>;
  clock: Clock;
  tokens: ViewerTokens;
  settingsFor?: SettingsSource;
  /** VM_ALLOW_PRIVATE_NETWORKS: room browsers may reach loopback and private addresses. */
  allowPrivateNetworks: boolean;
  /** A room nobody watched for this long is stopped. */
  idleMs: number;
  log: { warn(obj: object, msg: string): void };
}

interface Room {
  chatId: number;
  settings: RoomVmSettings;
  width: number;
  height: number;
  viewers: RoomViewers;
  controller: number | null;
  /** Since when nobody watches (ms), or null while someone does. */
  idleSince: number | null;
  unsubscribe: (() => void) | null;
  /** Input events sent to the browser and not yet answered (a flood is refused, not queued). */
  inputsInFlight: number;
}

/** An unacknowledged frame is sent again after this long (it may have been dropped). */
const ACK_TIMEOUT_MS = 3000;
/** A controller may have this many input events waiting for the browser; more are refused. */
const MAX_INPUTS_IN_FLIGHT = 64;

/**
 * Room VMs of chats (spec 4.6 rule 4, DESIGN.md 6): start/stop, viewer credentials, watching with
 * per-viewer frame flow control, control hand-over and the controller's input. The browsers
 * themselves are the provider's; this node keeps who watches and who controls.
 */
export function makeVmService(deps: VmDeps) {
  const { provider, chats, realtime, clock, tokens } = deps;
  const live = new Map<number, Room>();
  const starting = new Map<number, Promise<void>>();
  let settingsFor = deps.settingsFor ?? defaultSettingsSource;
  const now = () => clock.now().getTime();

  const credentialsFor = (chatId: number, userId: number): VmCredentials => {
    const expiresAt = new Date(now() + VM_TOKEN_TTL_MS);
    return { token: tokens.issue({ chatId, userId, expiresAt }), expires_at: expiresAt.toISOString() };
  };

  const isMember = (userId: number, chatId: number) =>
    chats.assertMember(userId, chatId).then(
      () => true,
      () => false,
    );

  const mustRun = (chatId: number): Room => {
    const room = live.get(chatId);
    if (!room) throw appError('ERR_ROOM_NOT_RUNNING');
    return room;
  };

  const mustBeIn = (caller: Caller, chatId: number) => {
    if (!caller.joined(chatId)) throw appError('ERR_NOT_CHAT_MEMBER', 'Join this chat (room:join) first.');
  };

  const sendFrame = (chatId: number) => (socketId: string, f: VmFrame) => {
    // Volatile and node-local: frames are never kept for reconnecting clients nor sent through Redis.
    realtime.io.local
      .to(socketId)
      .volatile.emit('vm:frame', { chat_id: chatId, seq: f.seq, mime: f.mime, data: f.data });
  };

  const setController = (room: Room, userId: number | null) => {
    room.controller = userId;
    realtime.emitTo(rooms.chat(room.chatId), 'vm:control', { chat_id: room.chatId, controller_user_id: userId });
  };

  /** Every socket in the chat gets room:started with credentials of its own user. */
  const announceStarted = async (chatId: number) => {
    const sockets = await realtime.io.in(rooms.chat(chatId)).fetchSockets();
    for (const s of sockets) {
      realtime.emitTo(s.id, 'room:started', { chat_id: chatId, credentials: credentialsFor(chatId, s.data.userId) });
    }
  };

  const launch = async (chatId: number) => {
    const settings = resolveSettings(await settingsFor(chatId));
    const info = await provider.start(String(chatId), {
      browser: settings.browser,
      proxy: settings.proxy,
      startUrl: settings.start_url,
      allowPrivateNetworks: deps.allowPrivateNetworks,
      width: VM_VIEWPORT.width,
      height: VM_VIEWPORT.height,
    });
    live.set(chatId, {
      chatId,
      settings,
      width: info.width,
      height: info.height,
      viewers: new RoomViewers(sendFrame(chatId), now),
      controller: null,
      idleSince: now(),
      unsubscribe: null,
      inputsInFlight: 0,
    });
    await announceStarted(chatId);
  };

  const stopRoom = async (chatId: number, reason: VmStopReason) => {
    const room = live.get(chatId);
    live.delete(chatId);
    if (room) {
      room.unsubscribe?.();
      room.viewers.clear();
    }
    await provider.stop(String(chatId));
    if (room) realtime.emitTo(rooms.chat(chatId), 'room:stopped', { chat_id: chatId, reason });
  };

  provider.onStopped((roomId, reason) => {
    void stopRoom(Number(roomId), reason).catch((err: unknown) => deps.log.warn({ err }, 'room VM clean-up failed'));
  });

  const unwatch = (room: Room, socketId: string) => {
    if (!room.viewers.remove(socketId)) return;
    if (room.viewers.size === 0) {
      room.unsubscribe?.();
      room.unsubscribe = null;
      room.idleSince = now();
    }
  };

  return {
    /** Replaces where room settings come from (the guilds module, tests). */
    useSettings(source: SettingsSource) {
      settingsFor = source;
    },

    /** Starts the chat's VM; already running: returns at once (spec 4.6 rule 4). */
    async start(actor: Actor, chatId: number): Promise<void> {
      const chat = await chats.find(chatId);
      if (!canStart(actor, chat, await isMember(actor.userId, chatId)))
        throw appError('ERR_FORBIDDEN', 'Only the chat owner or a platform Owner starts its room VM.');
      if (live.has(chatId)) return;
      let pending = starting.get(chatId);
      if (!pending) {
        pending = launch(chatId).finally(() => starting.delete(chatId));
        starting.set(chatId, pending);
      }
      await pending;
    },

    /** Stops the chat's VM (stopped already: nothing to do). Viewers get room:stopped. */
    async stop(actor: Actor, chatId: number): Promise<void> {
      const chat = await chats.find(chatId);
      if (!canStop(actor, chat, await isMember(actor.userId, chatId)))
        throw appError('ERR_FORBIDDEN', 'Only the chat owner or an Admin stops its room VM.');
      await starting.get(chatId)?.catch(() => {});
      await stopRoom(chatId, 'stopped');
    },

    /** Fresh viewer credentials for a member while the VM runs (vm:credentials). */
    async credentials(caller: Caller, chatId: number): Promise<VmCredentials> {
      await chats.assertMember(caller.userId, chatId);
      mustRun(chatId);
      return credentialsFor(chatId, caller.userId);
    },

    /** A socket that entered a chat's socket room while its VM runs gets credentials at once. */
    joinedChat(socketId: string, userId: number, chatId: number): void {
      if (live.has(chatId))
        realtime.emitTo(socketId, 'room:started', { chat_id: chatId, credentials: credentialsFor(chatId, userId) });
    },

    /** A socket left a chat's room (leave, kick, ban, disconnect): its stream ends at once. */
    leftChat(socketId: string, userId: number, chatId: number, userStillIn: boolean): void {
      const room = live.get(chatId);
      if (!room) return;
      unwatch(room, socketId);
      if (room.controller === userId && !userStillIn) setController(room, null);
    },

    async watch(caller: Caller, chatId: number, token: string) {
      mustBeIn(caller, chatId);
      const claims = tokens.verify(token, clock.now());
      if (!claims || claims.chatId !== chatId || claims.userId !== caller.userId)
        throw appError('ERR_VM_TOKEN_INVALID');
      await chats.assertMember(caller.userId, chatId);
      const room = mustRun(chatId);
      room.idleSince = null;
      room.viewers.add(caller.socketId, caller.userId);
      if (!room.unsubscribe) room.unsubscribe = provider.subscribe(String(chatId), (f) => room.viewers.frame(f));
      return { width: room.width, height: room.height, controller_user_id: room.controller };
    },

    unwatch(caller: Caller, chatId: number): void {
      const room = live.get(chatId);
      if (room) unwatch(room, caller.socketId);
    },

    ack(caller: Caller, chatId: number, seq: number): void {
      const room = mustRun(chatId);
      if (!room.viewers.ack(caller.socketId, seq)) throw appError('ERR_FORBIDDEN', 'Watch this room first (vm:watch).');
    },

    /** Takes control when nobody holds it; otherwise the request goes to the chat (owner, moderators). */
    requestControl(caller: Caller, chatId: number): { granted: boolean; controller_user_id: number | null } {
      mustBeIn(caller, chatId);
      const room = mustRun(chatId);
      if (!room.settings.allow_control_requests)
        throw appError(
          'ERR_FORBIDDEN',
          'Control requests are off in this room; the chat owner or a moderator grants control.',
        );
      if (room.controller === null) setController(room, caller.userId);
      if (room.controller === caller.userId) return { granted: true, controller_user_id: caller.userId };
      realtime.emitTo(rooms.chat(chatId), 'vm:control:request', {
        chat_id: chatId,
        user_id: caller.userId,
        username: caller.username,
      });
      return { granted: false, controller_user_id: room.controller };
    },

    async grant(caller: Caller, chatId: number, userId: number): Promise<void> {
      mustBeIn(caller, chatId);
      const room = mustRun(chatId);
      if (!canGrant(caller, await chats.find(chatId)))
        throw appError('ERR_FORBIDDEN', 'Only the chat owner or a moderator hands control over.');
      await chats.assertMember(userId, chatId);
      setController(room, userId);
    },

    /** The controller gives control back; the chat owner or a moderator takes it from anyone. */
    async release(caller: Caller, chatId: number): Promise<void> {
      const room = mustRun(chatId);
      if (room.controller === null) return;
      if (room.controller !== caller.userId && !canGrant(caller, await chats.find(chatId)))
        throw appError('ERR_FORBIDDEN', 'Only the member in control, the chat owner or a moderator releases control.');
      setController(room, null);
    },

    async input(caller: Caller, payload: VmInputPayload): Promise<void> {
      const chatId = payload.chat_id;
      mustBeIn(caller, chatId);
      const room = mustRun(chatId);
      if (room.controller !== caller.userId)
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

    /** Background: stops rooms nobody watched for `idleMs`, resends frames whose ack never came. */
    async sweep(at: Date = clock.now()): Promise<void> {
      for (const room of [...live.values()]) {
        room.viewers.resendStale(ACK_TIMEOUT_MS);
        if (room.idleSince !== null && at.getTime() - room.idleSince >= deps.idleMs)
          await stopRoom(room.chatId, 'idle');
      }
    },

    /** GET /statistics/chats: this node's running browsers, watching users and controllers. */
    statistics() {
      let viewers = 0;
      let controllers = 0;
      for (const room of live.values()) {
        viewers += room.viewers.users().size;
        if (room.controller !== null) controllers += 1;
      }
      const activeBrowsers = provider.list().filter((i) => i.state !== 'stopped').length;
      return { active_browsers: activeBrowsers, viewers, controllers };
    },

    isRunning: (chatId: number) => live.has(chatId),

    /** Stops every room (server shutdown): viewers get room:stopped with reason shutdown. */
    async close(): Promise<void> {
      await Promise.all([...starting.values()].map((p) => p.catch(() => {})));
      await Promise.all([...live.keys()].map((id) => stopRoom(id, 'shutdown')));
      await provider.close();
    },
  };
}

export type VmService = ReturnType<typeof makeVmService>;
