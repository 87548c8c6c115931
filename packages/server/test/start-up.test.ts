import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/platform/config.js';
import { openDatabase } from '../src/platform/db/index.js';
import { describeApp } from './support/app.js';
import { closedPort } from './support/errors.js';

const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-start-up-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** The configuration of a cluster node whose stores are at ports nothing listens on. */
async function unreachable() {
  const [pg, redis] = [await closedPort(), await closedPort()];
  return {
    pg,
    redis,
    config: loadConfig(
      {},
      {
        dataDir,
        databaseUrl: `postgres://parlor:pg-hunter2@127.0.0.1:${pg}/parlor`,
        redisUrl: `redis://default:redis-hunter2@127.0.0.1:${redis}`,
        publicApiKey: 'ppk_test_public_key_0123456789abcdef',
        operatorToken: 'pop_test_operator_token_0123456789abcdef',
        logLevel: 'silent',
      },
    ),
  };
}

/** The message of buildApp's failure. */
async function failure(start: Promise<unknown>): Promise<string> {
  return start.then(
    () => 'started',
    (err: unknown) => (err instanceof Error ? err.message : String(err)),
  );
}

describeApp('start-up with a store that cannot be reached', () => {
  it('names PostgreSQL and its host:port, never the password of its URL', async () => {
    const { pg, config } = await unreachable();
    const message = await failure(buildApp({ config, logger: false }));
    expect(message).toMatch(new RegExp(`^could not open PostgreSQL at 127\\.0\\.0\\.1:${pg}: .*ECONNREFUSED`));
    expect(message).not.toContain('hunter2');
  });

  it('names Redis and its host:port, never the password of its URL', async () => {
    const { redis, config } = await unreachable();
    const database = await openDatabase({ url: null, dataDir: null });
    try {
      const message = await failure(buildApp({ config, database, logger: false }));
      expect(message).toMatch(new RegExp(`^could not open Redis at 127\\.0\\.0\\.1:${redis}: `));
      expect(message).not.toContain('hunter2');
    } finally {
      await database.close();
    }
  });
});
