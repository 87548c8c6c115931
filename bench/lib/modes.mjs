import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { addCleanup } from './cleanup.mjs';
import { assertLoopback } from './http-client.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const SERVER_DIST = path.resolve(here, '../../packages/server/dist');

export const MODES = ['embedded', 'cluster'];

/** The local services for the cluster mode (loopback only; override with BENCH_DATABASE_URL / BENCH_REDIS_URL). */
export const SERVICE_URLS = {
  postgres: process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
  redis: process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379',
};

/** Keys the benches use; long enough for the config rules, never real secrets. */
export const BENCH_PUBLIC_KEY = 'ppk_bench_public_key_0123456789abcdef';
export const BENCH_OPERATOR_TOKEN = 'pop_bench_operator_token_0123456789abcdef';

/** "embedded" | "cluster" | "both" → list of modes. */
export function parseModes(arg = 'both') {
  if (arg === 'both') return [...MODES];
  if (MODES.includes(arg)) return [arg];
  throw new Error(`--mode must be embedded, cluster or both (got "${arg}")`);
}

/** The built server (packages/server/dist). */
export async function loadServer() {
  const appJs = path.join(SERVER_DIST, 'app.js');
  if (!existsSync(appJs)) {
    throw new Error(
      'packages/server/dist is missing: run `npx tsc -b packages/protocol packages/server` (or npm run bench)',
    );
  }
  return import(pathToFileURL(appJs).href);
}

async function loadServerModule(rel) {
  return import(pathToFileURL(path.join(SERVER_DIST, rel)).href);
}

/** Null when PostgreSQL and Redis both answer, else the reason (one line). */
export async function clusterUnavailable() {
  for (const u of Object.values(SERVICE_URLS)) {
    try {
      assertLoopback(new URL(u).hostname);
    } catch (e) {
      return `${u}: ${e.message} (benches only use loopback services)`;
    }
  }
  const problems = [];
  const { default: postgres } = await import('postgres');
  const sql = postgres(SERVICE_URLS.postgres, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    await sql`select 1`;
  } catch (e) {
    problems.push(`PostgreSQL at ${SERVICE_URLS.postgres}: ${e.message}`);
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
  const { Redis } = await import('ioredis');
  const r = new Redis(SERVICE_URLS.redis, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: 3000,
    retryStrategy: () => null,
  });
  r.on('error', () => {});
  try {
    await r.connect();
    await r.ping();
  } catch (e) {
    problems.push(`Redis at ${SERVICE_URLS.redis}: ${e.message}`);
  } finally {
    r.disconnect();
  }
  return problems.length ? problems.join('; ') : null;
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

const uniq = () => `${Date.now().toString(36)}_${process.pid}_${Math.random().toString(36).slice(2, 7)}`;

/** A scratch database on the local PostgreSQL, dropped by drop(). */
async function createScratchDatabase() {
  const { default: postgres } = await import('postgres');
  const name = `parlor_bench_${uniq()}`;
  const admin = postgres(SERVICE_URLS.postgres, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(SERVICE_URLS.postgres);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    drop: async () => {
      const a = postgres(SERVICE_URLS.postgres, { max: 1, onnotice: () => {} });
      try {
        await a.unsafe(`drop database if exists ${name} with (force)`);
      } finally {
        await a.end();
      }
    },
  };
}

/** Deletes every Redis key under a prefix; returns how many. */
async function clearRedisPrefix(prefix) {
  const { Redis } = await import('ioredis');
  const r = new Redis(SERVICE_URLS.redis, { maxRetriesPerRequest: 1 });
  let removed = 0;
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) removed += await r.del(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
  return removed;
}

/**
 * Steps to undo, last first: `done()` runs every one even if an earlier one failed and rethrows
 * the first error; registered with the Ctrl-C cleanup until then. Later calls share the first.
 */
function undoStack() {
  const steps = [];
  const release = async () => {
    let first = null;
    while (steps.length) {
      try {
        await steps.pop()();
      } catch (e) {
        first ??= e;
      }
    }
    if (first) throw first;
  };
  const forget = addCleanup(release);
  // Runs the steps once and drops the exit hook, however often it is called.
  let finished = null;
  const done = () =>
    (finished ??= (async () => {
      try {
        await release();
      } finally {
        forget();
      }
    })());
  return { push: (fn) => steps.push(fn), pop: () => steps.pop(), done };
}

/** A scratch PostgreSQL database and a Redis prefix, their removal pushed on `undo`. */
async function scratchCluster(undo) {
  const scratch = await createScratchDatabase();
  undo.push(() => scratch.drop());
  const redisPrefix = `parlor-bench:${uniq()}:`;
  undo.push(() => clearRedisPrefix(redisPrefix));
  return {
    databaseUrl: scratch.url,
    redisUrl: SERVICE_URLS.redis,
    redisPrefix,
    label: `cluster: PostgreSQL scratch db ${scratch.name} + Redis prefix ${redisPrefix}`,
  };
}

/**
 * Starts the real app in this process on 127.0.0.1, port 0, logging off.
 *   embedded: PGlite (in a temp dir by default, `pglite: 'memory'` keeps it in memory) + in-process state
 *   cluster:  a scratch PostgreSQL database + Redis under a unique key prefix, both removed on close
 * Resolves { skipped } instead when the cluster services are unreachable.
 * `config` overrides any Config field (trustProxy is on: benches send X-Forwarded-For).
 * `attach` (from provisionStorage, possibly in another process) starts the app over storage that
 * already exists and that the caller removes: nothing is created or removed here but the app.
 */
export async function startMode(mode, { pglite = 'disk', config = {}, attach = null } = {}) {
  if (mode === 'cluster' && !attach) {
    const why = await clusterUnavailable();
    if (why) return { mode, skipped: why };
  }
  const { buildApp, loadConfig } = await loadServer();
  const undo = undoStack();

  const dataDir = attach ? attach.dataDir : mkdtempSync(path.join(tmpdir(), 'parlor-bench-'));
  if (!attach) undo.push(async () => rmSync(dataDir, { recursive: true, force: true }));
  try {
    let databaseUrl = null;
    let redisUrl = null;
    let redisPrefix = 'parlor:';
    let label;
    let database;
    if (attach) {
      ({ databaseUrl, redisUrl, redisPrefix, label } = attach);
    } else if (mode === 'cluster') {
      ({ databaseUrl, redisUrl, redisPrefix, label } = await scratchCluster(undo));
    } else if (pglite === 'memory') {
      const { openDatabase } = await loadServerModule('platform/db/index.js');
      database = await openDatabase({ url: null, dataDir: null });
      label = 'embedded: PGlite in memory + in-process state';
    } else {
      label = 'embedded: PGlite in a temp dir + in-process state';
    }
    const cfg = loadConfig(
      {},
      {
        port: 0,
        host: '127.0.0.1',
        dataDir,
        databaseUrl,
        redisUrl,
        redisPrefix,
        publicApiKey: BENCH_PUBLIC_KEY,
        operatorToken: BENCH_OPERATOR_TOKEN,
        trustProxy: 1,
        logLevel: 'silent',
        sourceHash: 'bench',
        ...config,
      },
    );
    const t0 = performance.now();
    if (database) undo.push(() => database.close());
    const built = await buildApp({ config: cfg, database, logger: false });
    if (database) undo.pop(); // the app owns it now and closes it
    // Interrupted runs close the app (its pool) before dropping the database under it.
    undo.push(() => withTimeout(built.app.close(), 5000, 'app.close()'));
    const url = await built.app.listen({ port: 0, host: '127.0.0.1' });
    const startMs = performance.now() - t0;
    return {
      mode,
      label,
      url,
      built,
      config: cfg,
      startMs,
      close: undo.done,
    };
  } catch (e) {
    await undo.done().catch(() => {});
    throw e;
  }
}

/**
 * The storage of a mode without an app: a temp dir (PGlite on disk), or a scratch PostgreSQL
 * database and a Redis prefix. Pass `storage` to startMode({ attach }) (here or in a child
 * process) to run apps over it one after the other; `release()` removes it all. Resolves
 * { skipped } when the cluster services are unreachable.
 */
export async function provisionStorage(mode) {
  if (mode === 'cluster') {
    const why = await clusterUnavailable();
    if (why) return { mode, skipped: why };
  }
  const undo = undoStack();
  try {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-bench-'));
    undo.push(async () => rmSync(dataDir, { recursive: true, force: true }));
    let storage;
    if (mode === 'cluster') {
      storage = { dataDir, ...(await scratchCluster(undo)) };
    } else {
      storage = {
        dataDir,
        databaseUrl: null,
        redisUrl: null,
        redisPrefix: 'parlor:',
        label: 'embedded: PGlite in a temp dir + in-process state',
      };
    }
    return { mode, storage, label: storage.label, release: undo.done };
  } catch (e) {
    await undo.done().catch(() => {});
    throw e;
  }
}

/**
 * startMode for a scenario's loop over modes: when the cluster services are not usable it prints
 * the scenario's SKIPPED line, records `{ skipped }` in `results[mode]` and returns null.
 */
export async function startModeOrSkip(scenario, mode, opts, results) {
  const started = await startMode(mode, opts);
  if (!started.skipped) return started;
  console.log(`\n[${scenario}] ${mode}: SKIPPED, cluster services not usable: ${started.skipped}`);
  results[mode] = { skipped: started.skipped };
  return null;
}
