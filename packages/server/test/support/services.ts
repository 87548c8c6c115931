import { Redis } from 'ioredis';
import postgres from 'postgres';

/** Where the cluster-mode suites find their services (the local standard ports by default). */
export const SERVICE_URLS = {
  postgres: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
  redis: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
};

export async function postgresReachable(): Promise<string | null> {
  const sql = postgres(SERVICE_URLS.postgres, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    await sql`select 1`;
    return null;
  } catch (e) {
    return `PostgreSQL at ${SERVICE_URLS.postgres}: ${(e as Error).message}`;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

export async function redisReachable(): Promise<string | null> {
  const r = new Redis(SERVICE_URLS.redis, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: 3000,
    retryStrategy: () => null,
  });
  try {
    await r.connect();
    await r.ping();
    return null;
  } catch (e) {
    return `Redis at ${SERVICE_URLS.redis}: ${(e as Error).message}`;
  } finally {
    r.disconnect();
  }
}

/**
 * For a unit file that also runs its cases on RedisState: what keeps Redis out of reach, or null.
 * Out of reach, those cases are skipped with a loud notice; with REQUIRE_SERVICES=1 (as in the
 * cluster-mode suites) the file fails instead.
 */
export async function redisForUnitCases(what: string): Promise<string | null> {
  const problem = await redisReachable();
  if (problem === null) return null;
  if (process.env.REQUIRE_SERVICES === '1') throw new Error(`REQUIRE_SERVICES=1 but ${problem}`);
  const line = '!'.repeat(78);
  process.stderr.write(`\n${line}\n!! SKIPPING ${what}: ${problem}\n${line}\n\n`);
  return problem;
}

/** A fresh database for one test file, dropped afterwards. */
export async function createScratchDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `parlor_t_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = postgres(SERVICE_URLS.postgres, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  const url = new URL(SERVICE_URLS.postgres);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const a = postgres(SERVICE_URLS.postgres, { max: 1, onnotice: () => {} });
      await a.unsafe(`drop database if exists ${name} with (force)`);
      await a.end();
    },
  };
}

/** Deletes every Redis key under a prefix (a test file's own namespace). */
export async function clearRedisPrefix(prefix: string): Promise<void> {
  const r = new Redis(SERVICE_URLS.redis, { maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await r.del(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
}
