import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import cookie from '@fastify/cookie';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ErrorBodySchema, Limits } from '@parlor/protocol';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import type { Logger } from 'pino';
import { type AuthService, STRANGER_SWEEP_INTERVAL_MS } from './modules/auth/auth.service.js';
import { DIRECT_SWEEP_TASK } from './modules/chats/chats.direct.js';
import type { ChatsService } from './modules/chats/chats.service.js';
import { localUserIds } from './modules/matchmaking/matchmaking.routes.js';
import type { MatchmakingService } from './modules/matchmaking/matchmaking.service.js';
import type { ModerationService } from './modules/moderation/moderation.service.js';
import type { SessionsService } from './modules/sessions/sessions.service.js';
import { type SubscriptionSweep, SWEEP_INTERVAL_MS } from './modules/subscriptions/subscriptions.sweep.js';
import type { VmService } from './modules/vm/vm.service.js';
import { emptyPrincipal, makeGuards } from './platform/auth.js';
import { type BackgroundTasks, backgroundTasks } from './platform/background.js';
import { trustProxyOption } from './platform/client-address.js';
import { type Clock, systemClock } from './platform/clock.js';
import type { Config } from './platform/config.js';
import { connectionOptions, installDrain } from './platform/connections.js';
import { installCors } from './platform/cors.js';
import { trackCommits } from './platform/db/after-commit.js';
import { type Database, openDatabase } from './platform/db/index.js';
import { installErrorHandler, logFailure, toErrorBody } from './platform/errors.js';
import type { GeoLookup } from './platform/geo.js';
import { HOST_HEADER_OPTIONS, installHostCheck, routeHostlessToApp } from './platform/host-header.js';
import { createLogger, RequestLogController } from './platform/logging.js';
import { installMethodNotAllowed, ROUTER_OPTIONS } from './platform/method-not-allowed.js';
import { embeddedLocation, openStore, storeLocation } from './platform/open-stores.js';
import type { Realtime } from './platform/realtime.js';
import type { Retention } from './platform/retention.js';
import { type App, requestBodyOptional } from './platform/routing.js';
import { loadOrCreateSecret } from './platform/secret-files.js';
import { API_SECURITY_HEADERS, apiPath, computeSecurityHeaders } from './platform/security-headers.js';
import { openState, type StateStore } from './platform/state/index.js';
import { installJsonBodyParser, refuseUndeclaredQuery, validatorCompiler } from './platform/validation.js';
import type { VmProvider } from './platform/vm/provider.js';
import { installWriteLimit } from './platform/write-limit.js';
import { registerRoutes } from './wiring/routes.js';
import { wireServices } from './wiring/services.js';

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
  /** The process's logger (main.ts); `false` logs nothing (tests); unset: one at `LOG_LEVEL` on stdout. */
  logger?: false | Logger;
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
  services: {
    matchmaking: MatchmakingService;
    chats: ChatsService;
    moderation: ModerationService;
    vm: VmService;
    auth: AuthService;
    retention: Retention;
    sessions: SessionsService;
    /** The socket server (tests hold a handshake with a middleware of their own). */
    realtime: Realtime;
  };
  /** The room VM provider of this node: its own browsers, or its browser hosts' (VM_HOSTS). */
  vmProvider: VmProvider;
  /** The background tasks of this node, stopped together at close. */
  tasks: BackgroundTasks;
}

/** Builds the whole service from configuration: stores, services, routes. Nothing listens yet. */
export async function buildApp(opts: AppOptions): Promise<BuiltApp> {
  const { config } = opts;
  const clock = opts.clock ?? systemClock;
  // JSON lines with credentials redacted and query/command values kept out of errors (logging.ts).
  const log = opts.logger === false ? undefined : (opts.logger ?? createLogger(config.logLevel));
  // DATA_DIR's mode fixed or left open (secret-files.ts makePrivateDir) is worth a line.
  const warn = (message: string) => log?.warn(message);
  // The secrets first: a stored one that is refused stops the start before a store is open.
  const apiKey = loadOrCreateSecret(config.publicApiKey, config.dataDir, 'public-api-key', 'ppk_', warn);
  const operator = loadOrCreateSecret(config.operatorToken, config.dataDir, 'operator-token', 'pop_', warn);
  const database = opts.database ?? (await openConfiguredDatabase(config, warn));
  let state: StateStore;
  try {
    state = opts.state ?? (await openConfiguredState(config, clock, log));
  } catch (err) {
    // Not left open behind a failed start (PGlite writes its files on close).
    if (!opts.database) await database.close().catch(() => {});
    throw err;
  }
  // Transactions run work queued with afterCommit once committed (the user-change channel's publishes).
  const db = trackCommits(database.db);

  // Security headers are computed once and copied onto each answer: the API's lean set on its paths,
  // helmet's full set with Parlor's policy on pages (security-headers.ts).
  const pageHeaders = computeSecurityHeaders();
  const securityHeaders = (url: string) => (apiPath(url) ? API_SECURITY_HEADERS : pageHeaders);
  const app = Fastify({
    ...(log ? { loggerInstance: log } : { logger: false }),
    logController: new RequestLogController(),
    trustProxy: trustProxyOption(config.trustProxy),
    bodyLimit: Limits.BODY_LIMIT_BYTES,
    // Shared with the 404/405 router (method-not-allowed.ts): parameters up to 16 KiB.
    routerOptions: ROUTER_OPTIONS,
    // Close lets requests in flight finish; later ones get the API's 503 (connections.ts).
    ...connectionOptions,
    // Node's own 400 to an HTTP/1.1 request without Host has no body and no security headers: the
    // app makes that check itself (installHostCheck below, host-header.ts).
    ...HOST_HEADER_OPTIONS,
    // Failures before routing (a malformed %-escape) run no hook: they get the error body and the
    // security headers here.
    frameworkErrors: (err, request, reply) => {
      const answer = toErrorBody(err);
      logFailure(request.log, err, answer, {});
      void (reply as FastifyReply).headers(securityHeaders(request.url)).status(answer.status).send(answer.body);
    },
  }).withTypeProvider<TypeBoxTypeProvider>() as unknown as App;
  // The API speaks JSON only: Fastify's built-in text/plain parser would let a text body reach validation.
  app.removeContentTypeParser('text/plain');
  installJsonBodyParser(app);
  app.setValidatorCompiler(validatorCompiler);
  installErrorHandler(app);
  refuseUndeclaredQuery(app);
  app.addSchema(ErrorBodySchema);
  app.decorateRequest('principal', null as never);
  app.addHook('onRequest', (req, reply, done) => {
    req.principal = emptyPrincipal();
    reply.headers(securityHeaders(req.url));
    done();
  });
  // Right after the security headers: a request without Host gets its 400 with them, and nothing
  // later (drain, 404/405, routes, the Origin check) sees it.
  installHostCheck(app);
  installDrain(app);
  // CORS for the other ALLOWED_ORIGINS' pages, before the hook below would answer a preflight 405 (cors.ts).
  installCors(app, config.allowedOrigins);
  // After the hooks above (its 404/405 carry their headers), before the body is read.
  installMethodNotAllowed(app);

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
    transformObject: requestBodyOptional,
  });
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: true });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  // Every background task (the sweeps below, retention, the room VM sweep) stops in this one hook,
  // all at once, before the room VMs, the sockets and the stores close (background.ts).
  const tasks = backgroundTasks(app.log);
  app.addHook('preClose', async () => tasks.stopAll());

  // Stores and services, wired by hand: each gets only what it uses (wiring/).
  const services = await wireServices({
    app,
    tasks,
    config,
    clock,
    db,
    state,
    geo: opts.geo,
    operatorToken: operator.value,
    version: VERSION,
  });
  const { realtime, matchmaking, chats, moderation, vm, vmProvider, subscriptionSweep, auth, retention, sessions } =
    services;
  // Engine.IO has taken `/socket.io/…` requests off the server by now: one without Host still goes
  // to the app's check above, not to Engine.IO (host-header.ts).
  routeHostlessToApp(app.server, (req, res) => app.routing(req, res));

  const guards = makeGuards({
    config,
    publicApiKey: apiKey.value,
    operatorToken: operator.value,
    sessions: services.sessionResolver,
    bots: services.bots.resolver(),
  });

  installWriteLimit(app, services.writes);
  registerRoutes(app, services, guards, config);

  // Background work, safe on every node at once.
  tasks.every(5_000, 'match-queue-deadlines', () => matchmaking.sweepQueue());
  tasks.every(30_000, 'online-refresh', () => matchmaking.markOnline(localUserIds(realtime)));
  tasks.every(60_000, DIRECT_SWEEP_TASK, () => chats.sweepDirect());
  tasks.every(30_000, 'punishment-expiry', () => moderation.sweep());
  tasks.every(STRANGER_SWEEP_INTERVAL_MS, 'stranger-accounts', () => auth.sweepStrangers());
  // Expired Trial/Premium back to Basic (SKIP LOCKED keeps nodes apart).
  tasks.every(SWEEP_INTERVAL_MS, 'subscription-downgrade', () => subscriptionSweep.run());
  registerWeb(app);

  // This node's sockets go at once (their clients reconnect elsewhere); the adapter stays until the
  // requests in flight are answered, so what they emit reaches the other nodes. onClose hooks run
  // last registered first, once the HTTP server has closed: the adapter before the stores.
  app.addHook('preClose', async () => realtime.close());
  app.addHook('onClose', async () => {
    if (opts.ownsStores === false) return;
    await state.close();
    await database.close();
  });
  app.addHook('onClose', async () => realtime.closeAdapter());

  return {
    app: app as unknown as FastifyInstance,
    services: { matchmaking, chats, moderation, vm, auth, retention, sessions, realtime },
    vmProvider,
    publicApiKey: apiKey.value,
    operatorToken: operator.value,
    operatorTokenFile: operator.file,
    publicApiKeyFile: apiKey.file,
    database,
    state,
    subscriptionSweep,
    tasks,
  };
}

/** The coordination store of the configuration; a failure to reach Redis says where. */
function openConfiguredState(config: Readonly<Config>, clock: Clock, log: Logger | undefined): Promise<StateStore> {
  const open = () => openState({ url: config.redisUrl, prefix: config.redisPrefix, clock, log });
  return config.redisUrl ? openStore(storeLocation('Redis', config.redisUrl), open) : open();
}

/** The SQL store of the configuration; a failure to open it says which and where. */
function openConfiguredDatabase(config: Readonly<Config>, log: (message: string) => void): Promise<Database> {
  const location = config.databaseUrl
    ? storeLocation('PostgreSQL', config.databaseUrl)
    : embeddedLocation(config.dataDir);
  return openStore(location, () =>
    openDatabase({
      url: config.databaseUrl,
      dataDir: config.dataDir,
      statementTimeoutMs: config.databaseStatementTimeoutMs,
      log,
    }),
  );
}

/** The web app's landing page until the single-page app lands (packages/web). */
function registerWeb(app: App) {
  const page = readFileSync(path.resolve(here, '../../web/public/index.html'), 'utf8');
  app.get('/', { schema: { hide: true } }, async (_req, reply) => reply.type('text/html; charset=utf-8').send(page));
}
