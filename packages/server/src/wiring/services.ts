import { Limits } from '@parlor/protocol';
import { makeAdminService } from '../modules/admin/admin.service.js';
import type { ChatsService } from '../modules/chats/chats.service.js';
import type { KeysService } from '../modules/keys/keys.service.js';
import { makeBlocksStore } from '../modules/matchmaking/blocks.store.js';
import type { MatchmakingService } from '../modules/matchmaking/matchmaking.service.js';
import type { MessagesService } from '../modules/messages/messages.service.js';
import { makeModerationService } from '../modules/moderation/moderation.service.js';
import { makeModerationStore } from '../modules/moderation/moderation.store.js';
import { EXPIRY_SWEEP_INTERVAL_MS } from '../modules/sessions/sessions.service.js';
import { SOCKET_EXPIRY_CHECK_MS, watchSessionSockets } from '../modules/sessions/sessions.sockets.js';
import { makeStatsService, type StatsDeps } from '../modules/stats/stats.service.js';
import { makeVmService } from '../modules/vm/vm.service.js';
import { makeViewerTokens, viewerTokenKey } from '../modules/vm/vm.tokens.js';
import { type SessionResolver, stateRefusal } from '../platform/auth.js';
import type { BackgroundTasks } from '../platform/background.js';
import { rawClientIp, trustProxyOption } from '../platform/client-address.js';
import type { Clock } from '../platform/clock.js';
import type { Config } from '../platform/config.js';
import { afterCommit } from '../platform/db/after-commit.js';
import { type Db, ping } from '../platform/db/index.js';
import type { GeoLookup } from '../platform/geo.js';
import {
  createRealtime,
  type HandshakeRefusal,
  type Realtime,
  rooms,
  type SocketData,
  STREAM_BLOCK_MS,
} from '../platform/realtime.js';
import type { App } from '../platform/routing.js';
import { RedisState, type StateStore, watchConnection } from '../platform/state/index.js';
import { vmProviderFor } from '../platform/vm/from-config.js';
import { makeEnterLimit, makeWriteLimit, type UserLimit } from '../platform/write-limit.js';
import { type Accounts, wireAccounts } from './accounts.js';
import { wireChats, wireMatchmaking } from './chats.js';
import { wireRetention } from './retention.js';

/** What the services are built from (app.ts): the app (log, hooks, HTTP server), config, clock and open stores. */
export interface WiringContext {
  app: App;
  config: Readonly<Config>;
  clock: Clock;
  /** Where background tasks are started: all are stopped together at close (background.ts). */
  tasks: BackgroundTasks;
  /** The database handle that runs afterCommit work (trackCommits). */
  db: Db;
  state: StateStore;
  /** Where a client address is (sessions); GeoIP-lite when absent. */
  geo?: GeoLookup;
  /** The operator token: the room VM viewer-token key derives from it (vm.tokens.ts). */
  operatorToken: string;
  /** The server's version (stats). */
  version: string;
}

/**
 * Stores and services, wired by hand: each gets only what it uses. Also starts what they need
 * running (the user-change channel, the room VM sweep) and registers their close hooks.
 */
export async function wireServices(ctx: WiringContext) {
  const { app } = ctx;
  const accounts = await wireAccounts(ctx, () => realtime);
  const { sessions } = accounts;
  const stats = wireStats(ctx, accounts, () => vm.statistics());
  // Realtime: Socket.IO on the same HTTP server; in cluster mode through Redis streams.
  const sessionResolver = sessions.resolver();
  const realtime = wireRealtime(ctx, sessionResolver);
  // The per-user write limit: session POSTs (installWriteLimit) and membership changes spend it.
  const writes = makeWriteLimit(ctx.state);
  const { keys, messages, guilds, chats, chatsStore } = wireChats(ctx, accounts, realtime, writes);
  const { matchmaking, blocks } = wireMatchmaking(ctx, accounts, realtime, chats);
  const { admin, moderation } = wireGovernance(ctx, accounts, {
    realtime,
    chats,
    keys,
    messages,
    matchmaking,
    chatIdsOf: (userId, tx) => chatsStore.chatIdsOf(userId, tx),
    revokePrivateInvitesOf: (userId, now, tx) => chatsStore.revokePrivateOfDeleted(userId, now, tx),
    logLeavesOfDeleted: (userId, actorUserId, now, tx) => chatsStore.logLeavesOfDeleted(userId, actorUserId, now, tx),
  });
  const { vm, vmProvider } = await wireVm(ctx, chats, realtime);
  // Deletes what only grows past its window (ended sessions, old notifications, …), every 10 minutes.
  const retention = wireRetention(ctx, { ...accounts.stores, chats: chatsStore });

  // Ended sessions (logout, destroy, eviction) lose their keys in the transaction that ends them
  // (their chats move to a new epoch with it), and their sockets on every node once it commits.
  sessions.onEnding(({ userId, sessionIds }, tx) => keys.removeSessionsIn(tx, userId, sessionIds));
  sessions.onEnded(({ sessionIds }) => realtime.disconnectSessions(sessionIds));
  // A socket carries the name its handshake read (room:members, VM control requests): a rename,
  // the user's own or a bot's, drops the user's sockets on every node once it commits, as a level
  // change does (an admin's rename: admin.service), and the client reconnects with the new name.
  accounts.users.onRenamed((userId) => realtime.io.in(rooms.user(userId)).disconnectSockets(true));
  // Searches end with the user's access: once a ban or timeout commits, and once a stranger's
  // session ends (logout, destroy, expiry; it never signs in again), and then its active direct
  // chats end too, as at a leave (its peers' slots free again). Committed either way, so a
  // failure here is logged, not the answer (a pairing refuses such a user anyway: chats.store).
  const searchEnded = (userId: number) => (err: unknown) =>
    app.log.error({ err, userId }, 'match queue cleanup failed');
  const endCleanupFailed = (userId: number) => (err: unknown) =>
    app.log.error({ err, userId }, 'clean-up after the end of a session failed (match queue, stranger direct chats)');
  sessions.onEnding(({ userId }, tx) =>
    afterCommit(tx, () => matchmaking.sessionsEnded(userId).catch(endCleanupFailed(userId))),
  );
  moderation.platform.onRestricted((userId) => matchmaking.endSearch(userId).catch(searchEnded(userId)));
  // A ban of a stranger ends its session for good, without the session-ending hooks: its direct
  // chats end as at any stranger's session end (logged on failure, as there), and the address that
  // made it is barred from new strangers as a stranger block bars it (a failure is the answer).
  // The bar is tried twice before its failure is the answer (the ban or block stands either way).
  const barStrangerAddress = (address: string) =>
    accounts.auth.barStrangerAddress(address).catch(() => accounts.auth.barStrangerAddress(address));
  moderation.platform.onStrangerBanned(async ({ userId, address }) => {
    await matchmaking.sessionsEnded(userId).catch(endCleanupFailed(userId));
    if (address !== null) await barStrangerAddress(address);
  });
  // A stranger block bars the address that made the stranger from making new ones (spec v1.12:
  // the block is of the stranger session; a new stranger from the same client would lift it).
  blocks.onStrangerBlocked(({ address }) => barStrangerAddress(address));
  // Sessions end at their expiry too, the same way: the sockets of this node when it comes (and
  // no event of theirs is served after it), every session in the sweep, and on its first use after.
  // A socket whose session ended while its handshake ran is dropped once it is in its session's room.
  const sessionSockets = watchSessionSockets({ realtime, sessions, clock: ctx.clock, log: app.log });
  accounts.onUsersChanged(sessionSockets.changes);
  ctx.tasks.every(SOCKET_EXPIRY_CHECK_MS, 'session-socket-expiry', () => sessionSockets.check());
  ctx.tasks.every(EXPIRY_SWEEP_INTERVAL_MS, 'session-expiry', () => sessions.sweepExpired());
  // A socket recovered after a drop comes back only with a live session of a user who may connect,
  // and only to the chat rooms it is still allowed in, before anything missed is replayed to it.
  // Each chat room it is put back into is an entry, as a room:join is: it spends one of the
  // user's room enters, from room:join's own allowance (limiters of one name share their count),
  // and a recovery the allowance cannot pay for connects afresh, its room:joins then limited.
  const recoveryEnters = makeEnterLimit(ctx.state);
  realtime.checkRecovery(async (data, restored) => {
    if (!(await sessions.mayConnect(data.userId, data.sessionId))) return null;
    const allowed = await chats.roomsStillAllowed(data.userId, restored);
    const entries = allowed.filter((room) => rooms.chatIdOf(room) !== null).length;
    return (await spendEnters(recoveryEnters, data.userId, entries)) ? allowed : null;
  });
  // A guild chat's room VM starts with its guild's room settings (other chats: the vm defaults).
  vm.useSettings(guilds.roomSettingsOfChat);
  // The public chat of a guild has no owner row: the guild's owner runs its room, unless banned
  // from that chat (a ban ends their stream; it ends their running of the room too).
  vm.useGuildOwners(
    async (chatId, userId) =>
      (await guilds.ownsChatGuild(chatId, userId)) && !(await messages.isChatBanned(chatId, userId)),
  );
  // A deleted chat's room stops (on this node; cluster: on the node that runs it).
  chats.onRemoved((chatId) => {
    vm.chatRemoved(chatId).catch((err: unknown) => app.log.warn({ err, chatId }, 'room VM stop after delete failed'));
  });
  // An archived direct chat is read-only: its room stops too.
  chats.onArchived((chatId) => {
    vm.chatArchived(chatId).catch((err: unknown) => app.log.warn({ err, chatId }, 'room VM stop after archive failed'));
  });

  return {
    ...accounts,
    stats,
    sessionResolver,
    realtime,
    writes,
    keys,
    messages,
    guilds,
    chats,
    matchmaking,
    blocks,
    admin,
    moderation,
    vm,
    vmProvider,
    retention,
  };
}

export type Services = Awaited<ReturnType<typeof wireServices>>;

/**
 * Spends `count` of the user's room enters for the chat rooms a recovered connection is put back
 * into: true when the allowance pays for all of them. Otherwise every point taken is given back
 * (a refused spend took none: UserLimit.spend), so a recovery refused by the limit spends nothing
 * and the fresh connection's room:joins count as any others. More rooms than a whole
 * window's allowance are refused without asking the store.
 */
async function spendEnters(enters: UserLimit, userId: number, count: number): Promise<boolean> {
  if (count > Limits.ROOM_ENTERS_PER_USER) return false;
  const spent = await Promise.allSettled(Array.from({ length: count }, () => enters.spend(userId)));
  if (spent.every((s) => s.status === 'fulfilled')) return true;
  await Promise.all(spent.flatMap((s) => (s.status === 'fulfilled' ? [enters.giveBack(s.value)] : [])));
  return false;
}

/** The statistics service; `rooms` reads the room VMs, built after it. */
function wireStats(ctx: WiringContext, accounts: Accounts, rooms: StatsDeps['rooms']) {
  const { config, clock, db, state } = ctx;
  return makeStatsService({
    clock,
    usersStore: accounts.usersStore,
    bots: accounts.bots,
    version: ctx.version,
    sourceHash: config.sourceHash,
    storage: config.databaseUrl ? 'cluster' : 'embedded',
    startedAt: clock.now(),
    probes: {
      database: () => ping(db),
      [state.kind === 'redis' ? 'redis' : 'coordination']: () => state.get('health-probe'),
    },
    log: ctx.app.log,
    rooms,
  });
}

/** The socket server; a socket signs in with the session cookie, like a request. */
function wireRealtime(ctx: WiringContext, sessionResolver: SessionResolver): Realtime {
  const { app, config, state, clock } = ctx;
  const trust = trustProxyOption(config.trustProxy);
  return createRealtime(app.server, {
    allowedOrigins: config.allowedOrigins,
    // Behind TRUST_PROXY, the handshake's client as a request's is read, not the proxy.
    clientAddress: (req) => rawClientIp(req, trust),
    redis: state instanceof RedisState ? { client: adapterClient(state, app), prefix: config.redisPrefix } : null,
    log: app.log,
    authenticate: async (cookieHeader): Promise<SocketData | HandshakeRefusal | null> => {
      const token = cookieHeader ? app.parseCookie(cookieHeader).psession : undefined;
      if (!token || token.length > 256) return null;
      const found = await sessionResolver.resolve(token);
      if (!found) return null;
      // Refused as the HTTP guards refuse (platform/auth.ts): a timeout ends no session, so its
      // refusal must not read as the session's end (ERR_UNAUTHENTICATED), which clients take as
      // final; it says when the timeout ends, so they come back then. A ban ends every session;
      // one still read at that instant is refused as banned.
      const { state: userState, stateExpiresAt } = found.user;
      const refusal = stateRefusal(userState);
      if (refusal === 'ERR_BANNED') return { refused: refusal };
      if (refusal === 'ERR_TIMED_OUT') {
        const left = stateExpiresAt ? stateExpiresAt.getTime() - clock.now().getTime() : null;
        return left === null
          ? { refused: refusal }
          : { refused: refusal, retryAfter: Math.max(1, Math.ceil(left / 1000)) };
      }
      if (userState !== 0) return null;
      return {
        userId: found.user.id,
        sessionId: found.session.id,
        username: found.user.username,
        permissionLevel: found.user.permissionLevel,
        stranger: found.user.stranger,
        expiresAt: found.session.expiresAt.getTime(),
      };
    },
  });
}

/** A Redis connection of the socket adapter's own (it blocks on stream reads); errors are logged. */
function adapterClient(state: RedisState, app: App) {
  const client = state.socketAdapterConnection(STREAM_BLOCK_MS);
  watchConnection(client, 'socket adapter', app.log);
  return client;
}

/** Admin actions and moderation: they act on users, their sessions, chats and keys. */
function wireGovernance(
  ctx: WiringContext,
  accounts: Accounts,
  deps: {
    realtime: Realtime;
    chats: ChatsService;
    keys: KeysService;
    messages: MessagesService;
    matchmaking: MatchmakingService;
    chatIdsOf: Parameters<typeof makeAdminService>[0]['chatIdsOf'];
    revokePrivateInvitesOf: Parameters<typeof makeAdminService>[0]['revokePrivateInvitesOf'];
    logLeavesOfDeleted: Parameters<typeof makeAdminService>[0]['logLeavesOfDeleted'];
  },
) {
  const { app, clock, db } = ctx;
  const { usersStore, users, sessions, notifications, audit, bots } = accounts;
  const { realtime, chats, keys, messages, matchmaking, chatIdsOf, revokePrivateInvitesOf, logLeavesOfDeleted } = deps;
  const admin = makeAdminService({
    db,
    clock,
    usersStore,
    users,
    sessions,
    notifications,
    audit,
    bots,
    chats,
    keys,
    chatIdsOf,
    revokePrivateInvitesOf,
    logLeavesOfDeleted,
    matchmaking,
    realtime,
    log: app.log,
  });
  // The address that made a stranger (its first session), which a ban of it bars as a block does.
  const blocksStore = makeBlocksStore(db);
  const moderation = makeModerationService({
    db,
    clock,
    store: makeModerationStore(db, accounts.usersChanged),
    usersStore,
    users,
    chats,
    sessions,
    keys,
    messages,
    notifications,
    audit,
    realtime,
    strangerAddress: (userId, tx) => blocksStore.firstSessionAddress(userId, tx),
  });
  return { admin, moderation };
}

/** Room VMs: browsers of this node (local chromium) or of its browser hosts, viewers and control kept by the vm service. */
async function wireVm(ctx: WiringContext, chats: ChatsService, realtime: Realtime) {
  const { app, config, clock, state } = ctx;
  const vmProvider = vmProviderFor(config, (message) => app.log.warn(message));
  const vm = makeVmService({
    provider: vmProvider,
    db: ctx.db,
    chats,
    realtime,
    clock,
    tokens: makeViewerTokens(viewerTokenKey(ctx.operatorToken)),
    state,
    allowPrivateNetworks: config.vmAllowPrivateNetworks,
    idleMs: config.vmIdleTimeoutSeconds * 1000,
    log: app.log,
  });
  await vm.ready;
  ctx.tasks.every(1_000, 'room-vm-sweep', () => vm.sweep());
  // After the background tasks stopped (the sweep included) and before the socket server closes
  // (viewers hear room:stopped); kills every browser of this node.
  app.addHook('preClose', async () => vm.close());
  return { vm, vmProvider };
}
