import path from 'node:path';

/**
 * Which store and where, for a start-up failure: `PostgreSQL at db.internal:5432`, `Redis at
 * 10.0.0.7:6379`, `the embedded database in ./data/pglite`. Host and port only: a URL's user name
 * and password never appear.
 */
export function storeLocation(store: 'PostgreSQL' | 'Redis', url: string): string {
  const defaultPort = store === 'PostgreSQL' ? '5432' : '6379';
  try {
    const u = new URL(url);
    // `redis:///run/redis.sock`-style URLs have no host: name the socket's path instead.
    if (u.hostname === '') return `${store} at ${u.pathname}`;
    return `${store} at ${u.hostname}:${u.port || defaultPort}`;
  } catch {
    return `${store} (its URL does not parse)`;
  }
}

export function embeddedLocation(dataDir: string | null): string {
  return dataDir ? `the embedded database in ${path.join(dataDir, 'pglite')}` : 'the embedded database (in memory)';
}

/**
 * Opens a store; a failure names the store and where it is (`could not open Redis at
 * 127.0.0.1:6379: Connection is closed.`), the original error as its cause. Without it, start-up
 * printed the bare driver message ("Connection is closed.").
 */
export async function openStore<T>(location: string, open: () => Promise<T>): Promise<T> {
  try {
    return await open();
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new Error(`could not open ${location}: ${why}`, { cause: err });
  }
}
