import { Limits, VM_TOKEN_TTL_MS, type VmCredentials, type VmInputPayload } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { StateStore } from '../../platform/state/index.js';
import type { VmProvider } from '../../platform/vm/provider.js';
import { makeUserLimit } from '../../platform/write-limit.js';
import type { ChatsService } from '../chats/chats.service.js';
import { storedCallerLevel } from '../users/users.caller.js';
import type { Tx } from '../users/users.store.js';
import { makeAudiences } from './vm.audience.js';
import { makeVmCluster, type RoomPlace } from './vm.cluster.js';
import { strangerRefused } from './vm.control.js';
import { type ControlAnswer, makeRoomHost, type RemoteActor, serveHost } from './vm.host.js';
import { type Actor, canRunRoom, canStart, canStop, levelDecides, type RoomChat } from './vm.rules.js';
import { defaultSettingsSource, type SettingsSource } from './vm.settings.js';
import type { ViewerTokens } from './vm.tokens.js';
import { makeVmViewing } from './vm.viewing.js';

export { ACK_TIMEOUT_MS } from './vm.audience.js';

/** True when `userId` owns chat `chatId` through something other than the chat row (its guild). */
export type GuildOwnerSource = (chatId: number, userId: number) => Promise<boolean>;

/** A socket acting on a room: who it is and whether it is in the chat's socket room (room:join). */
export interface Caller extends Actor {
  socketId: string;
  username: string;
  /** An anonymous stranger session (docs/api.md, Strangers): its reach is its own direct chats. */
  stranger?: boolean;
  joined(chatId: number): boolean;
}

export interface VmDeps {
  provider: VmProvider;
  /** Where the callers' levels as stored are read (start, stop, control hand-over). */
  db: Tx;
  chats: Pick<ChatsService, 'find' | 'assertMember' | 'roomsStillAllowed'>;
  realtime: Pick<Realtime, 'io' | 'emitTo' | 'socketsIn'>;
  clock: Clock;
  tokens: ViewerTokens;
  /** The coordination store: the room → node map and the messages between nodes go through it. */
  state: StateStore;
  settingsFor?: SettingsSource;
  /** Whether a user owns an ownerless chat by another title (the guild owner of a guild chat). */
  guildOwner?: GuildOwnerSource;
  /** VM_ALLOW_PRIVATE_NETWORKS: room browsers may reach loopback and private addresses. */
  allowPrivateNetworks: boolean;
  /** A room nobody watched for this long is stopped. */
  idleMs: number;
  log: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };
}

/** How long a start waits for another node that is starting the same room. */
const START_WAIT_MS = 30_000;

/**
 * Room VMs of chats (spec 4.6 rule 4, DESIGN.md 6), usable from any node: a room runs on the node
 * that started it (vm.host.ts; the room map says which), every node keeps its own sockets'
 * viewing (per-viewer frame flow control, fed by the local browser or by the owner's frame
 * channel), and control, input and stop go to the owning node (vm.cluster.ts).
 */
export function makeVmService(deps: VmDeps) {
  const { chats, realtime, clock, tokens } = deps;
  const cluster = makeVmCluster(deps.state, { log: deps.log });
  const launches = makeUserLimit(deps.state, {
    name: 'vm-start',
    points: Limits.ROOM_STARTS_PER_USER,
    windowMs: Limits.ROOM_START_WINDOW_MS,
    message: 'Too many room starts; try again later.',
  });
  const self = cluster.nodeId;
  let settingsFor = deps.settingsFor ?? defaultSettingsSource;
  let guildOwner: GuildOwnerSource = deps.guildOwner ?? (async () => false);
  const now = () => clock.now().getTime();
  const audiences = makeAudiences({ realtime, cluster, now });

  const credentialsFor = (chatId: number, userId: number): VmCredentials => {
    const expiresAt = new Date(now() + VM_TOKEN_TTL_MS);
    return { token: tokens.issue({ chatId, userId, expiresAt }), expires_at: expiresAt.toISOString() };
  };
  const isMember = (userId: number, chatId: number) =>
    chats.assertMember(userId, chatId).then(
      () => true,
      () => false,
    );
  /** The chat as the rules see it: the guild owner owns an ownerless guild chat's room (spec 4.4). */
  const roomChat = async (actor: Actor, chatId: number): Promise<RoomChat> => {
    const chat = await chats.find(chatId);
    const archived = chat.archivedAt !== null;
    if (chat.ownerUserId === null && chat.type !== 'direct' && (await guildOwner(chatId, actor.userId)))
      return { type: chat.type, ownerUserId: actor.userId, archived };
    return { type: chat.type, ownerUserId: chat.ownerUserId, archived };
  };
  const readOnly = () => appError('ERR_CHAT_READ_ONLY', 'This chat is archived: its room VM does not start.');
  /** The chat as it is now may run its room: ERR_CHAT_NOT_FOUND once deleted, ERR_CHAT_READ_ONLY once archived. */
  const mayRun = async (chatId: number): Promise<void> => {
    const chat = await chats.find(chatId);
    if (!canRunRoom({ type: chat.type, ownerUserId: chat.ownerUserId, archived: chat.archivedAt !== null }))
      throw readOnly();
  };
  /**
   * Whether `rule` lets the actor act, decided on its level as stored (docs/api.md, "Levels as
   * they are at the commit"): the session, or the socket's handshake, read it when it began, and a
   * demotion committed on another node may not have reached this node's session cache. That level
   * still refuses at once; a rule that lets the actor act at any level (the chat's owner) reads
   * nothing; otherwise the users row is read now, without a lock: a room's start, stop or control
   * writes nothing in SQL to hold it under. A caller banned, timed out or gone meanwhile is
   * refused as its session would be (storedCallerLevel).
   */
  const allowedAsStored = async (actor: Actor, rule: (a: Actor) => boolean): Promise<boolean> => {
    if (!rule(actor)) return false;
    if (!levelDecides(rule, actor)) return true;
    const level = await storedCallerLevel(deps.db, actor.userId, clock, 'read');
    return rule({ ...actor, permissionLevel: level });
  };
  const mustBeIn = (caller: Caller, chatId: number) => {
    if (!caller.joined(chatId)) throw appError('ERR_NOT_CHAT_MEMBER', 'Join this chat (room:join) first.');
  };

  const host = makeRoomHost({
    provider: deps.provider,
    chats,
    realtime,
    clock,
    cluster,
    settingsFor: () => settingsFor,
    roomChat,
    allowedAsStored,
    mayRun,
    localFrame: (chatId, f) => audiences.get(chatId)?.viewers.frame(f),
    // The room runs by then: a node that does not answer leaves its sockets to `vm:credentials`
    // (the others are told) rather than fail the start (Realtime.socketsIn).
    announceStarted: async (chatId) => {
      const { sockets } = await realtime.socketsIn(rooms.chat(chatId));
      for (const s of sockets)
        realtime.emitTo(s.id, 'room:started', { chat_id: chatId, credentials: credentialsFor(chatId, s.data.userId) });
    },
    allowPrivateNetworks: deps.allowPrivateNetworks,
    idleMs: deps.idleMs,
    log: deps.log,
  });

  // Requests from other nodes to the rooms this node runs.
  serveHost(cluster, host);

  /**
   * Where the chat's room runs; ERR_ROOM_NOT_RUNNING when nowhere, still starting, or stopping
   * (its owner marks the map entry stopping until the browser is gone).
   */
  const runningAt = async (chatId: number): Promise<string> => {
    if (host.runs(chatId)) return self;
    const place = await cluster.placeOf(chatId);
    if (place?.state !== 'running' || place.node === self) throw appError('ERR_ROOM_NOT_RUNNING');
    return place.node;
  };
  const onOwner = async <T>(chatId: number, op: string, args: object): Promise<T> =>
    cluster.call<T>(await runningAt(chatId), op, { chatId, ...args });
  const remoteActor = (c: Actor & { username?: string }): RemoteActor => ({
    userId: c.userId,
    permissionLevel: c.permissionLevel,
    username: c.username ?? '',
  });

  cluster.onEvent((e) => {
    if (e.type === 'stopped') audiences.end(e.chatId, e.reason);
  });

  /**
   * Waits while another node starts or stops the room: true once it runs, false once it runs
   * nowhere (the caller claims it again). A room that stays starting or stopping fails the start.
   */
  const waitForPlace = async (chatId: number, seen: RoomPlace): Promise<boolean> => {
    const until = now() + START_WAIT_MS;
    let place: RoomPlace | null = seen;
    while (place && place.state !== 'running' && now() < until) {
      await new Promise((r) => setTimeout(r, 200));
      place = await cluster.placeOf(chatId);
    }
    if (place?.state === 'running') return true;
    if (place) throw appError('ERR_ROOM_START_FAILED', `Another node is still ${place.state} this room; try again.`);
    return false;
  };

  return {
    /** Replaces where room settings come from (the guilds module, tests). */
    useSettings(source: SettingsSource) {
      settingsFor = source;
    },
    /** Replaces who owns ownerless chats for their room (the guilds module, tests). */
    useGuildOwners(source: GuildOwnerSource) {
      guildOwner = source;
    },
    nodeId: self,
    ready: cluster.ready,

    /**
     * Starts the chat's VM on this node; running anywhere: returns at once (spec 4.6 rule 4).
     * Starting or stopping on another node: waits for it (then running: done; stopped: starts here).
     */
    async start(actor: Actor, chatId: number): Promise<void> {
      const chat = await roomChat(actor, chatId);
      const member = await isMember(actor.userId, chatId);
      if (!(await allowedAsStored(actor, (a) => canStart(a, chat, member))))
        throw appError('ERR_FORBIDDEN', 'Only the chat owner or a platform Owner starts its room VM.');
      if (!canRunRoom(chat)) throw readOnly();
      // A stop still finishing here goes first: the room then runs nowhere, and this start launches anew.
      await host.stopped(chatId);
      if (host.has(chatId)) return host.start(chatId);
      // A start that would launch a browser spends one of the user's starts (shared by every node);
      // so does one that follows a stop on another node, and one that finds an entry of this node
      // that no launch here holds any more (a failed start's, written again by a refresh).
      const seen = await cluster.placeOf(chatId);
      const spent =
        !seen || seen.state === 'stopping' || seen.node === self ? await launches.spend(actor.userId) : null;
      let launched = false;
      /** Starts the room here: a launch, or a launch in progress here joined (`launched` says which). */
      const startHere = () => {
        launched = host.launches(chatId);
        return host.start(chatId);
      };
      try {
        for (let attempt = 0; attempt < 3; attempt++) {
          const held = await cluster.claim(chatId);
          if (held === null || held.node === self) return await startHere();
          if (held.state === 'running' || (await waitForPlace(chatId, held))) return;
        }
        throw appError('ERR_ROOM_START_FAILED', 'This room could not be placed on a node; try again.');
      } finally {
        // Another start of the room (anyone's, on any node) launched it between this one's look at
        // the room map and its claim: this one launched no browser, and gives its start back. The
        // answer is this start's whatever happens here; a store that cannot take it back costs one.
        if (spent && !launched)
          await launches.giveBack(spent).catch((err: unknown) => deps.log.warn({ err }, 'room start not given back'));
      }
    },

    /** Stops the chat's VM wherever it runs (stopped already: nothing to do). Viewers get room:stopped. */
    async stop(actor: Actor, chatId: number): Promise<void> {
      const chat = await roomChat(actor, chatId);
      const member = await isMember(actor.userId, chatId);
      if (!(await allowedAsStored(actor, (a) => canStop(a, chat, member))))
        throw appError('ERR_FORBIDDEN', 'Only the chat owner or an Admin stops its room VM.');
      const place = host.has(chatId) ? { node: self } : await cluster.placeOf(chatId);
      if (place) await cluster.call(place.node, 'stop', { chatId, reason: 'stopped' });
    },

    /** The chat was deleted (by its owner, an admin, or the direct-chat sweep): its room stops. */
    async chatRemoved(chatId: number): Promise<void> {
      // At once, before the chat's sockets leave it: this node's viewers still hear room:stopped.
      const watchers = audiences.get(chatId)?.viewers.sockets() ?? [];
      audiences.end(chatId, null);
      if (watchers.length > 0)
        realtime.io.local.to(watchers).emit('room:stopped', { chat_id: chatId, reason: 'deleted' });
      const place = host.has(chatId) ? { node: self } : await cluster.placeOf(chatId);
      if (place) await cluster.call(place.node, 'stop', { chatId, reason: 'deleted' });
    },

    /**
     * A direct chat was archived (left, or expired: read-only, spec 3): its room stops wherever it
     * runs, and its viewers get room:stopped with reason stopped.
     */
    async chatArchived(chatId: number): Promise<void> {
      const place = host.has(chatId) ? { node: self } : await cluster.placeOf(chatId);
      if (place) await cluster.call(place.node, 'stop', { chatId, reason: 'stopped' });
    },

    ...makeVmViewing({
      chats,
      realtime,
      clock,
      tokens,
      audiences,
      host,
      self,
      runningAt,
      onOwner,
      credentialsFor,
      mustBeIn,
    }),

    /**
     * Takes control when nobody holds it; otherwise the request goes to the chat (owner,
     * moderators), once while it is pending (the room's node keeps it: vm.control.ts).
     */
    async requestControl(caller: Caller, chatId: number) {
      mustBeIn(caller, chatId);
      if (caller.stranger) throw strangerRefused();
      return onOwner<ControlAnswer>(chatId, 'requestControl', {
        actor: remoteActor(caller),
      });
    },

    async grant(caller: Caller, chatId: number, userId: number): Promise<void> {
      mustBeIn(caller, chatId);
      await onOwner(chatId, 'grant', { actor: remoteActor(caller), userId });
    },

    /** The controller gives control back; the chat owner or a moderator takes it from anyone. */
    async release(caller: Caller, chatId: number): Promise<void> {
      mustBeIn(caller, chatId);
      await onOwner(chatId, 'release', { actor: remoteActor(caller) });
    },

    async input(caller: Caller, payload: VmInputPayload): Promise<void> {
      mustBeIn(caller, payload.chat_id);
      if (caller.stranger) throw strangerRefused();
      await onOwner(payload.chat_id, 'input', { actor: remoteActor(caller), payload });
    },

    /**
     * Background: this node's viewing of rooms elsewhere (reports not awaited: an owner that does
     * not answer holds up nothing here), and the rooms this node runs (map, idle).
     */
    async sweep(at: Date = clock.now()): Promise<void> {
      audiences.sweep(at);
      await host.sweep(at.getTime());
    },

    /** GET /statistics/chats: the rooms this node runs, the users watching them on any node, controllers. */
    statistics: () => host.statistics(),

    /** Whether this node runs the chat's room (its browser is up). */
    isRunning: (chatId: number) => host.runs(chatId),

    /**
     * Stops this node's rooms (server shutdown): viewers get room:stopped with reason shutdown.
     * Then the owners of rooms elsewhere hear that nobody watches here (bounded: they may be gone).
     */
    async close(): Promise<void> {
      await host.close();
      await audiences.close();
      await cluster.close();
    },
  };
}

export type VmService = ReturnType<typeof makeVmService>;
