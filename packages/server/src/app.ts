import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import cookie from '@fastify/cookie';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ErrorBodySchema, Limits } from '@parlor/protocol';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import { registerAdminRoutes } from './modules/admin/admin.routes.js';
import { makeAdminService } from './modules/admin/admin.service.js';
import { makeAuditStore } from './modules/audit/audit.store.js';
import { makeCodeStore } from './modules/auth/auth.codes.js';
import { registerAuthRoutes } from './modules/auth/auth.routes.js';
import { makeAuthService } from './modules/auth/auth.service.js';
import { registerBotRoutes, registerPublicBotRoutes } from './modules/bots/bots.routes.js';
import { makeBotsService } from './modules/bots/bots.service.js';
import { makeBotsStore } from './modules/bots/bots.store.js';
import { registerChatSockets, registerChatsRoutes } from './modules/chats/chats.routes.js';
import { type ChatsService, makeChatsService } from './modules/chats/chats.service.js';
import { makeChatsStore } from './modules/chats/chats.store.js';
import { registerGuildsRoutes } from './modules/guilds/guilds.routes.js';
import { makeGuildsService } from './modules/guilds/guilds.service.js';
import { makeGuildsStore } from './modules/guilds/guilds.store.js';
import { registerKeysRoutes } from './modules/keys/keys.routes.js';
import { makeKeysService } from './modules/keys/keys.service.js';
import { makeKeysStore } from './modules/keys/keys.store.js';
import { makeBlocksService } from './modules/matchmaking/blocks.service.js';
import { makeBlocksStore } from './modules/matchmaking/blocks.store.js';
import {
  localUserIds,
  registerMatchmakingRoutes,
  registerMatchmakingSockets,
} from './modules/matchmaking/matchmaking.routes.js';
import { type MatchmakingService, makeMatchmakingService } from './modules/matchmaking/matchmaking.service.js';
import { makeMatchmakingStore } from './modules/matchmaking/matchmaking.store.js';
import { registerMessagesRoutes } from './modules/messages/messages.routes.js';
import { makeMessagesService } from './modules/messages/messages.service.js';
import { makeMessagesStore } from './modules/messages/messages.store.js';
import { registerModerationRoutes } from './modules/moderation/moderation.routes.js';
import { type ModerationService, makeModerationService } from './modules/moderation/moderation.service.js';
import { makeModerationStore } from './modules/moderation/moderation.store.js';
import { realtimeNotificationEvents } from './modules/notifications/notifications.events.js';
import {
  registerAdminNotificationsRoutes,
  registerNotificationsRoutes,
} from './modules/notifications/notifications.routes.js';
import { makeNotificationsService } from './modules/notifications/notifications.service.js';
import { makeNotificationsStore } from './modules/notifications/notifications.store.js';
import { makeAuthCache } from './modules/sessions/sessions.cache.js';
import { registerSessionsRoutes } from './modules/sessions/sessions.routes.js';
import { makeSessionsService } from './modules/sessions/sessions.service.js';
import { makeSessionsStore } from './modules/sessions/sessions.store.js';
import { registerStatsRoutes } from './modules/stats/stats.routes.js';
import { makeStatsService } from './modules/stats/stats.service.js';
import { registerSubscriptionsRoutes } from './modules/subscriptions/subscriptions.routes.js';
import { makeSubscriptionsService } from './modules/subscriptions/subscriptions.service.js';
import { makeSubscriptionsStore } from './modules/subscriptions/subscriptions.store.js';
import {
  makeSubscriptionSweep,
  type SubscriptionSweep,
  SWEEP_INTERVAL_MS,
} from './modules/subscriptions/subscriptions.sweep.js';
import { registerAvatarRoutes } from './modules/users/avatars.routes.js';
import { makeProfileCache } from './modules/users/users.cache.js';
import { makeUserChanges } from './modules/users/users.changes.js';
import { registerUsersRoutes } from './modules/users/users.routes.js';
import { makeUsersService } from './modules/users/users.service.js';
import { makeUsersStore } from './modules/users/users.store.js';
import { registerVmRoutes, registerVmSockets } from './modules/vm/vm.routes.js';
import { makeVmService, type VmService } from './modules/vm/vm.service.js';
import { makeViewerTokens, viewerTokenKey } from './modules/vm/vm.tokens.js';
import { emptyPrincipal, makeGuards } from './platform/auth.js';
import { every } from './platform/background.js';
import { type Clock, systemClock } from './platform/clock.js';
import type { Config } from './platform/config.js';
import { trackCommits } from './platform/db/after-commit.js';
import { type Database, openDatabase, ping } from './platform/db/index.js';
import { installErrorHandler, toErrorBody } from './platform/errors.js';
import { GeoipLiteLookup, type GeoLookup } from './platform/geo.js';
import { installMethodNotAllowed } from './platform/method-not-allowed.js';
import { createRealtime, type SocketData } from './platform/realtime.js';
import type { App } from './platform/routing.js';
import { loadOrCreateSecret } from './platform/secret-files.js';
import { API_SECURITY_HEADERS, computeSecurityHeaders, isApiPath } from './platform/security-headers.js';
import { openState, RedisState, type StateStore } from './platform/state/index.js';
import { type MatchQueue, MemoryMatchQueue } from './platform/state/match-queue.js';
import { RedisMatchQueue } from './platform/state/match-queue.redis.js';
import { validatorCompiler } from './platform/validation.js';
import { LocalChromiumProvider } from './platform/vm/local-provider.js';

export type { Config } from './platform/config.js';
export { ConfigError, loadConfig } from './platform/config.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const VERSION = (JSON.parse(readFileSync(path.join(here, '../package.json'), 'utf8')) as { version: string }).version;

export interface AppOptions {
  config: Readonly<Config>;
  clock?: Clock;
  geo?: GeoLookup;
  /** An already open database (tests share one setup); otherwise opened from config. */
  database?: Database;
  /** An already open coordination store; otherwise opened from config. */
  state?: StateStore;
  /** Keep the database/state open on close (the caller owns them). */
  ownsStores?: boolean;
  logger?: boolean;
}

export interface BuiltApp {
  app: FastifyInstance;
  publicApiKey: string;
  operatorToken: string;
  operatorTokenFile: string | null;
  publicApiKeyFile: string | null;
  database: Database;
  state: StateStore;
  /** The subscription downgrade sweep, for tests to run directly with a fake clock. */
  subscriptionSweep: SubscriptionSweep;
  /** Services that tests drive directly (sweeps with a fake clock). */
  services: { matchmaking: MatchmakingService; chats: ChatsService; moderation: ModerationService; vm: VmService };
  /** The room VM provider of this node (tests reach its browsers: pid, page state, memory). */
  vmProvider: LocalChromiumProvider;
}

/** Builds the whole service from configuration: stores, services, routes. Nothing listens yet. */
export async function buildApp(opts: AppOptions): Promise<BuiltApp> {
  const { config } = opts;
  const clock = opts.clock ?? systemClock;
  const database = opts.database ?? (await openDatabase({ url: config.databaseUrl, dataDir: config.dataDir }));
  const state = opts.state ?? (await openState({ url: config.redisUrl, prefix: config.redisPrefix, clock }));
  const apiKey = loadOrCreateSecret(config.publicApiKey, config.dataDir, 'public-api-key', 'ppk_');
  const operator = loadOrCreateSecret(config.operatorToken, config.dataDir, 'operator-token', 'pop_');
  // Transactions run work queued with afterCommit once committed (the user-change channel's publishes).
  const db = trackCommits(database.db);

  const app = Fastify({
    logger:
      opts.logger === false
        ? false
        : {
            level: config.logLevel,
            redact: {
              paths: [
                'req.headers.cookie',
                'req.headers["x-api-key"]',
                'req.headers.authorization',
                'res.headers["set-cookie"]',
              ],
              censor: '[redacted]',
            },
          },
    trustProxy: config.trustProxy,
    bodyLimit: Limits.BODY_LIMIT_BYTES,
    return503OnClosing: true,
    forceCloseConnections: true,
    // Failures before routing (a malformed %-escape, an over-long path parameter) get the error body too.
    frameworkErrors: (err, _request, reply) => {
      const { status, body } = toErrorBody(err);
      void (reply as FastifyReply).status(status).send(body);
    },
  }).withTypeProvider<TypeBoxTypeProvider>() as unknown as App;
  // The API speaks JSON only: Fastify's built-in text/plain parser would let a text body reach validation.
  app.removeContentTypeParser('text/plain');
  app.setValidatorCompiler(validatorCompiler);
  installErrorHandler(app);
  installMethodNotAllowed(app);
  app.addSchema(ErrorBodySchema);
  app.decorateRequest('principal', null as never);
  // Security headers are computed once and copied onto each answer: the API's lean set on `/v1/…`,
  // helmet's full set with Parlor's policy on pages (security-headers.ts).
  const pageHeaders = computeSecurityHeaders();
  app.addHook('onRequest', (req, reply, done) => {
    req.principal = emptyPrincipal();
    reply.headers(isApiPath(req.url) ? API_SECURITY_HEADERS : pageHeaders);
    done();
  });

  await app.register(cookie);
  await app.register(swagger, {
    openapi: {
      info: {
        title: 'Parlor API',
        version: VERSION,
        description: 'Community browser and chat service. See docs/api.md.',
      },
      components: {
        securitySchemes: {
          publicKey: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'the public API key (K)' },
          botKey: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: "a bot's own key (B)" },
          session: { type: 'apiKey', in: 'cookie', name: 'psession' },
          operatorToken: { type: 'http', scheme: 'bearer', description: 'the operator token (CLI)' },
        },
      },
    },
    refResolver: {
      buildLocalReference: (json, _base, _frag, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: true });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  // Stores and services, wired by hand: each gets only what it uses.
  const publicUrl = config.publicUrl;
  // Per-node read caches of sessions and own profiles. Every write to a user, their sessions or
  // linked platforms drops their entries on every node once it commits (users.changes.ts).
  const userChanges = makeUserChanges({
    state,
    onError: (err) => app.log.error({ err }, 'user change not published; other nodes may lag up to the cache TTL'),
  });
  const authCache = makeAuthCache(clock);
  const profileCache = makeProfileCache(clock);
  userChanges.attach(authCache, profileCache);
  await userChanges.start();
  app.addHook('onClose', async () => {
    await userChanges.stop();
  });
  const usersStore = makeUsersStore(db, userChanges.changed);
  const audit = makeAuditStore(db, clock);
  const users = makeUsersService({ store: usersStore, clock, publicUrl, profiles: profileCache });
  const sessionsStore = makeSessionsStore(db, userChanges.changed);
  const sessions = makeSessionsService({
    db,
    store: sessionsStore,
    clock,
    geo: opts.geo ?? new GeoipLiteLookup(),
    cache: authCache,
  });
  const notifications = makeNotificationsService({
    db,
    store: makeNotificationsStore(db),
    clock,
    audit,
    users: usersStore,
    // The socket server is created further down; notifications are only emitted once requests flow.
    events: realtimeNotificationEvents(() => realtime),
    log: app.log,
  });
  const bots = makeBotsService({ db, store: makeBotsStore(db), audit, state, clock, users });
  const auth = makeAuthService({
    db,
    clock,
    state,
    codes: makeCodeStore(state, clock),
    users: usersStore,
    sessions,
    notifications,
    present: users.present,
  });
  const subscriptions = makeSubscriptionsService({ db, clock, usersStore, users, notifications, audit });
  const subscriptionSweep = makeSubscriptionSweep({
    db,
    store: makeSubscriptionsStore(userChanges.changed),
    clock,
    notifications,
  });
  const stats = makeStatsService({
    clock,
    usersStore,
    bots,
    version: VERSION,
    sourceHash: config.sourceHash,
    storage: config.databaseUrl ? 'cluster' : 'embedded',
    startedAt: clock.now(),
    probe: async () => {
      await ping(db);
      await state.get('health-probe');
    },
    rooms: () => vm.statistics(),
  });
  // Realtime: Socket.IO on the same HTTP server; in cluster mode through Redis streams.
  const sessionResolver = sessions.resolver();
  const realtime = createRealtime(app.server, {
    allowedOrigins: config.allowedOrigins,
    redis: state instanceof RedisState ? { client: adapterClient(state, app), prefix: config.redisPrefix } : null,
    authenticate: async (cookieHeader): Promise<SocketData | null> => {
      const token = cookieHeader ? app.parseCookie(cookieHeader).psession : undefined;
      if (!token || token.length > 256) return null;
      const found = await sessionResolver.resolve(token);
      if (found?.user.state !== 0) return null;
      return {
        userId: found.user.id,
        sessionId: found.session.id,
        username: found.user.username,
        permissionLevel: found.user.permissionLevel,
        stranger: found.user.stranger,
      };
    },
  });
  const chatsStore = makeChatsStore(db);
  const keys = makeKeysService({
    db,
    store: makeKeysStore(db),
    clock,
    realtime,
    membership: {
      chatIdsOf: (userId, tx) => chatsStore.chatIdsOf(userId, tx),
      lockEpoch: async (chatId, tx) => (await chatsStore.lockById(chatId, tx))?.epoch ?? null,
    },
  });
  const messages = makeMessagesService({
    store: makeMessagesStore(db),
    clock,
    state,
    realtime,
    access: {
      chat: async (chatId) => {
        const chat = await chatsStore.byId(chatId);
        return chat ? { epoch: chat.epoch, archived: chat.archivedAt !== null } : null;
      },
      isMember: (chatId, userId) => chatsStore.isMember(chatId, userId),
      hasKey: (chatId, epoch, sessionId) => keys.hasKey(chatId, epoch, sessionId),
    },
  });
  // Guilds: each guild's public chat (no owner, so it takes nobody's slot) is made through the chats store.
  const guilds = makeGuildsService({
    db,
    store: makeGuildsStore(db),
    clock,
    audit,
    users: usersStore,
    chats: {
      create: async (name, at, tx) =>
        (await chatsStore.insert({ type: 'public', name, ownerUserId: null, createdAt: at, updatedAt: at }, tx)).id,
      isLive: async (chatId, tx) => (await chatsStore.byId(chatId, tx)) !== undefined,
    },
  });
  const chats = makeChatsService({
    db,
    store: chatsStore,
    clock,
    keys,
    messages,
    users,
    realtime,
    vanityChat: guilds.vanityChat,
  });
  const queue: MatchQueue =
    state instanceof RedisState ? new RedisMatchQueue(state.client, config.redisPrefix) : new MemoryMatchQueue();
  const blocksStore = makeBlocksStore(db);
  const matchmaking = makeMatchmakingService({
    clock,
    state,
    queue,
    chats,
    store: makeMatchmakingStore(db),
    realtime,
  });
  const blocks = makeBlocksService({ store: blocksStore, usersStore, users, queue, audit, clock });
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
    chatIdsOf: (userId, tx) => chatsStore.chatIdsOf(userId, tx),
    matchmaking,
    realtime,
    log: app.log,
  });
  const moderation = makeModerationService({
    db,
    clock,
    store: makeModerationStore(db, userChanges.changed),
    usersStore,
    users,
    chats,
    sessions,
    keys,
    messages,
    notifications,
    audit,
    realtime,
  });
  // Room VMs: browsers of this node (local chromium), viewers and control kept by the vm service.
  const vmProvider = new LocalChromiumProvider({
    chromiumPath: config.chromiumPath,
    maxRooms: config.vmMaxPerNode,
    log: (message) => app.log.warn(message),
  });
  const vm = makeVmService({
    provider: vmProvider,
    chats,
    realtime,
    clock,
    tokens: makeViewerTokens(viewerTokenKey(operator.value)),
    state,
    allowPrivateNetworks: config.vmAllowPrivateNetworks,
    idleMs: config.vmIdleTimeoutSeconds * 1000,
    log: app.log,
  });
  await vm.ready;
  const stopVmSweep = every(1_000, 'room-vm-sweep', () => vm.sweep(), app.log);
  // Before the socket server closes (viewers hear room:stopped); kills every browser of this node.
  app.addHook('preClose', async () => {
    stopVmSweep();
    await vm.close();
  });

  // Ended sessions (logout, destroy, eviction) lose their sockets and their keys, on every node.
  sessions.onEnded(({ userId, sessionIds }) => {
    realtime.disconnectSessions(sessionIds);
    keys.removeSessions(userId, sessionIds).catch((err: unknown) => app.log.error({ err }, 'key removal failed'));
  });

  const guards = makeGuards({
    config,
    publicApiKey: apiKey.value,
    operatorToken: operator.value,
    sessions: sessionResolver,
    bots: bots.resolver(),
  });

  registerAuthRoutes(app, { auth, guards, config, logout: sessions.logout });
  registerUsersRoutes(app, { users, guards });
  registerSessionsRoutes(app, { sessions, guards });
  registerBotRoutes(app, { bots, users, guards });
  registerPublicBotRoutes(app, { bots, guards });
  registerStatsRoutes(app, { stats, guards });
  registerAdminRoutes(app, { admin, bots, guards });
  registerChatsRoutes(app, { chats, guards });
  registerKeysRoutes(app, { keys, chats, guards });
  registerMessagesRoutes(app, { messages, chats, guards });
  registerChatSockets(realtime, chats);
  registerMatchmakingRoutes(app, { matchmaking, blocks, guards });
  registerMatchmakingSockets(realtime, matchmaking);
  registerModerationRoutes(app, { moderation, guards });
  registerVmRoutes(app, { vm, guards });
  registerVmSockets(realtime, vm);
  registerGuildsRoutes(app, { guilds, guards });
  // A guild chat's room VM starts with its guild's room settings (other chats: the vm defaults).
  vm.useSettings(guilds.roomSettingsOfChat);
  // The public chat of a guild has no owner row: the guild's owner runs its room.
  vm.useGuildOwners(guilds.ownsChatGuild);
  // A deleted chat's room stops (on this node; cluster: on the node that runs it).
  chats.onRemoved((chatId) => {
    vm.chatRemoved(chatId).catch((err: unknown) => app.log.warn({ err, chatId }, 'room VM stop after delete failed'));
  });

  // Background work, safe on every node at once.
  const stops = [
    every(5_000, 'match-queue-deadlines', () => matchmaking.sweepQueue(), app.log),
    every(30_000, 'online-refresh', () => matchmaking.markOnline(localUserIds(realtime)), app.log),
    every(60_000, 'direct-chat-lifecycle', () => chats.sweepDirect(), app.log),
    every(30_000, 'punishment-expiry', () => moderation.sweep(), app.log),
  ];
  registerNotificationsRoutes(app, { notifications, guards });
  registerAdminNotificationsRoutes(app, { notifications, guards });
  registerSubscriptionsRoutes(app, { subscriptions, guards });
  // Every minute, on every node: expired Trial/Premium back to Basic (SKIP LOCKED keeps nodes apart).
  const sweeping = subscriptionSweep.start(SWEEP_INTERVAL_MS, (err) =>
    app.log.error({ err }, 'subscription sweep failed'),
  );
  app.addHook('preClose', async () => {
    await sweeping.stop();
  });
  registerAvatarRoutes(app);
  registerWeb(app);

  app.addHook('preClose', async () => {
    for (const stop of stops) stop();
    await realtime.close();
  });
  app.addHook('onClose', async () => {
    if (opts.ownsStores === false) return;
    await state.close();
    await database.close();
  });

  return {
    app: app as unknown as FastifyInstance,
    services: { matchmaking, chats, moderation, vm },
    vmProvider,
    publicApiKey: apiKey.value,
    operatorToken: operator.value,
    operatorTokenFile: operator.file,
    publicApiKeyFile: apiKey.file,
    database,
    state,
    subscriptionSweep,
  };
}

/** A Redis connection of the socket adapter's own (it blocks on stream reads); errors are logged. */
function adapterClient(state: RedisState, app: App) {
  const client = state.client.duplicate();
  client.on('error', (err: Error) => app.log.warn({ err: err.message }, 'socket adapter redis error'));
  return client;
}

/** The web app's landing page until the single-page app lands (packages/web). */
function registerWeb(app: App) {
  const page = readFileSync(path.resolve(here, '../../web/public/index.html'), 'utf8');
  app.get('/', { schema: { hide: true } }, async (_req, reply) => reply.type('text/html; charset=utf-8').send(page));
}
