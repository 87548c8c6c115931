import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import { describe, inject } from 'vitest';
import { type BuiltApp, buildApp } from '../../src/app.js';
import type { Clock } from '../../src/platform/clock.js';
import { type Config, loadConfig } from '../../src/platform/config.js';
import { type Database, openDatabase } from '../../src/platform/db/index.js';
import { openState, type StateStore } from '../../src/platform/state/index.js';
import type { LocalChromiumProvider } from '../../src/platform/vm/local-provider.js';
import { clearRedisPrefix, createScratchDatabase, SERVICE_URLS } from './services.js';

/** Which stores this run of the integration suite uses (set per vitest project). */
export const MODE: 'embedded' | 'cluster' = process.env.PARLOR_TEST_MODE === 'cluster' ? 'cluster' : 'embedded';

export interface TestApp extends BuiltApp {
  /**
   * The node's own browsers, with their test hooks (pid, page state). Every suite runs the local
   * provider but vm-remote.test.ts, which reaches its hosts' providers instead.
   */
  vmProvider: LocalChromiumProvider;
  url: string;
  config: Readonly<Config>;
  close(): Promise<void>;
}

/** Where one or more nodes keep their data: a scratch PostgreSQL database + Redis prefix, or PGlite. */
export interface Backing {
  databaseUrl: string | null;
  redisUrl: string | null;
  redisPrefix: string;
  dataDir: string;
  release(): Promise<void>;
}

const PUBLIC_KEY = 'ppk_test_public_key_0123456789abcdef';
const OPERATOR_TOKEN = 'pop_test_operator_token_0123456789abcdef';

/**
 * Puts a migrated embedded store (`pglite/`) into `dataDir` (made 0700 if missing), copied from the
 * run's template (support/pglite-image-setup.ts): a new one costs seconds of PGlite's initdb, which
 * is not what the suites keeping the store on disk test. Embedded runs only. Returns `dataDir`.
 */
export function seedDataDir(dataDir: string): string {
  if (MODE !== 'embedded') throw new Error('seedDataDir: embedded runs only');
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  cpSync(path.join(inject('pgliteDataDir'), 'pglite'), path.join(dataDir, 'pglite'), { recursive: true });
  return dataDir;
}

export async function createBacking(opts: { persistentDataDir?: string } = {}): Promise<Backing> {
  const dataDir = opts.persistentDataDir ?? mkdtempSync(path.join(tmpdir(), 'parlor-test-'));
  const cleanupDir = () => {
    if (!opts.persistentDataDir) rmSync(dataDir, { recursive: true, force: true });
  };
  if (MODE === 'embedded') {
    return { databaseUrl: null, redisUrl: null, redisPrefix: 'parlor:', dataDir, release: async () => cleanupDir() };
  }
  const scratch = await createScratchDatabase();
  const redisPrefix = `parlor-test:${path.basename(dataDir)}:`;
  return {
    databaseUrl: scratch.url,
    redisUrl: SERVICE_URLS.redis,
    redisPrefix,
    dataDir,
    release: async () => {
      await scratch.drop();
      await clearRedisPrefix(redisPrefix);
      cleanupDir();
    },
  };
}

export interface StartOptions {
  backing?: Backing;
  clock?: Clock;
  config?: Partial<Config>;
  /** Keep PGlite on disk under the backing's dataDir (restart tests); default in memory. */
  persistEmbedded?: boolean;
  /** The app's logger (support/logs.ts captures one); default none. */
  logger?: Logger;
  /** Called with the built app before it listens (hooks can still be added then). */
  beforeListen?: (built: BuiltApp) => void;
}

/**
 * Starts the real app on a real port (127.0.0.1, port 0). Embedded mode: PGlite in memory and
 * in-process state. Cluster mode: a scratch PostgreSQL database and a Redis key prefix. Pass the
 * same `backing` to several calls to get several nodes over one store.
 */
export async function startApp(opts: StartOptions = {}): Promise<TestApp> {
  const ownBacking = !opts.backing;
  const backing = opts.backing ?? (await createBacking());
  const config = loadConfig(
    {},
    {
      port: 0,
      host: '127.0.0.1',
      dataDir: backing.dataDir,
      databaseUrl: backing.databaseUrl,
      redisUrl: backing.redisUrl,
      redisPrefix: backing.redisPrefix,
      publicApiKey: PUBLIC_KEY,
      operatorToken: OPERATOR_TOKEN,
      trustProxy: 1,
      logLevel: 'silent',
      sourceHash: 'test-hash',
      ...opts.config,
    },
  );
  let database: Database | undefined;
  let state: StateStore | undefined;
  if (MODE === 'embedded') {
    // A restart test's first start finds a migrated store, as its second does.
    if (opts.persistEmbedded && !existsSync(path.join(backing.dataDir, 'pglite'))) seedDataDir(backing.dataDir);
    database = opts.persistEmbedded
      ? await openDatabase({ url: null, dataDir: backing.dataDir })
      : await openTestDatabase(backing);
    state = await openState({ url: null, prefix: 'parlor:', clock: opts.clock ?? { now: () => new Date() } });
  }
  const built = await buildApp({ config, clock: opts.clock, database, state, logger: opts.logger ?? false });
  opts.beforeListen?.(built);
  const address = await built.app.listen({ port: 0, host: '127.0.0.1' });
  return {
    ...built,
    vmProvider: built.vmProvider as LocalChromiumProvider,
    url: address,
    config,
    close: async () => {
      await built.app.close();
      if (ownBacking) await backing.release();
    },
  };
}

let imageBytes: Promise<Buffer> | undefined;
/** The run's migrated PGlite image (support/pglite-image-setup.ts), read once per worker. */
async function image(): Promise<Blob> {
  imageBytes ??= readFile(inject('pgliteImage'));
  return new Blob([await imageBytes]);
}

/**
 * A migrated database on this run's stores, as startApp opens it: an in-memory embedded store from
 * the run's image, or the backing's scratch PostgreSQL database.
 */
export function openTestDatabase(backing: Backing): Promise<Database> {
  return MODE === 'embedded'
    ? image().then((loaded) => openDatabase({ url: null, dataDir: null, image: loaded }))
    : openDatabase({ url: backing.databaseUrl, dataDir: null });
}

/** `describe` for integration suites: on the cluster project it is skipped when services are missing. */
export const describeApp = describe.skipIf(MODE === 'cluster' && !inject('servicesAvailable'));

/** Nodes A and B of one deployment, and what stops them both. */
export interface Nodes {
  a: TestApp;
  b: TestApp;
  close(): Promise<void>;
}

/**
 * Two nodes over one backing (PostgreSQL + Redis) in cluster mode; in embedded mode one node,
 * which is both A and B. Suites that check "on every node" run unchanged in both modes.
 */
export async function startNodes(opts: Omit<StartOptions, 'backing'> = {}): Promise<Nodes> {
  const backing = await createBacking();
  const a = await startApp({ ...opts, backing });
  const b = MODE === 'cluster' ? await startApp({ ...opts, backing }) : a;
  return {
    a,
    b,
    async close() {
      if (b !== a) await b.close();
      await a.close();
      await backing.release();
    },
  };
}
