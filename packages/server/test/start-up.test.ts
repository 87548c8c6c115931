import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/platform/config.js';
import { createBacking, describeApp, MODE, openTestDatabase, seedDataDir } from './support/app.js';
import { closedPort } from './support/errors.js';
import { captureLog, LEVEL } from './support/logs.js';

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
    // The database opens (this run's own); Redis, at a port nothing listens on, does not.
    const backing = await createBacking();
    try {
      const database = await openTestDatabase(backing);
      try {
        const message = await failure(buildApp({ config, database, logger: false }));
        expect(message).toMatch(new RegExp(`^could not open Redis at 127\\.0\\.0\\.1:${redis}: `));
        expect(message).not.toContain('hunter2');
      } finally {
        await database.close();
      }
    } finally {
      await backing.release();
    }
  });
});

/** Permission bits (and sticky, set-id) of a path. */
const modeOf = (p: string) => statSync(p).mode & 0o7777;

/**
 * A single node keeping what it generates in `dir`: the embedded store in embedded runs, this
 * run's scratch PostgreSQL database (and secrets still generated into DATA_DIR) in cluster runs.
 */
function ownDataDir(dir: string, databaseUrl: string | null) {
  return loadConfig(
    {},
    { dataDir: dir, databaseUrl, redisUrl: null, publicApiKey: null, operatorToken: null, logLevel: 'silent' },
  );
}

describeApp('DATA_DIR kept from other local accounts (room browsers run as one)', () => {
  it('takes group and other access away from an existing DATA_DIR at start, in one warn line; the store and secrets are 0700/0600', async () => {
    const backing = await createBacking();
    const dir = path.join(dataDir, `existing-${MODE}`);
    mkdirSync(dir);
    chmodSync(dir, 0o755);
    const captured = captureLog('info');
    const built = await buildApp({ config: ownDataDir(dir, backing.databaseUrl), logger: captured.log });
    try {
      expect(modeOf(dir)).toBe(0o700);
      const warnings = captured.lines().filter((l) => l.level === LEVEL.warn);
      expect(warnings.map((l) => l.msg)).toEqual([`took group and other access away from ${dir} (mode 0755 → 0700)`]);
      expect([modeOf(path.join(dir, 'public-api-key')), modeOf(path.join(dir, 'operator-token'))]).toEqual([
        0o600, 0o600,
      ]);
      // The embedded database's own directory: new, so 0700 from the start (PGlite writes its files 0666).
      if (MODE === 'embedded') expect(modeOf(path.join(dir, 'pglite'))).toBe(0o700);
      else expect(existsSync(path.join(dir, 'pglite'))).toBe(false);
    } finally {
      await built.app.close();
      await backing.release();
    }
  }, 120_000);

  // Cluster runs have no embedded store.
  it.skipIf(MODE === 'cluster')(
    'also tightens an existing pglite directory of the embedded store',
    async () => {
      const dir = path.join(dataDir, 'existing-pglite');
      seedDataDir(dir);
      chmodSync(path.join(dir, 'pglite'), 0o755);
      const captured = captureLog('info');
      const built = await buildApp({ config: ownDataDir(dir, null), logger: captured.log });
      try {
        expect([modeOf(dir), modeOf(path.join(dir, 'pglite'))]).toEqual([0o700, 0o700]);
        expect(
          captured
            .lines()
            .filter((l) => l.level === LEVEL.warn)
            .map((l) => l.msg),
        ).toEqual([`took group and other access away from ${path.join(dir, 'pglite')} (mode 0755 → 0700)`]);
      } finally {
        await built.app.close();
      }
    },
    120_000,
  );

  it('stops at a stored secret shorter than its minimum (a cut-short write), naming the file and the variable, before opening a store', async () => {
    const backing = await createBacking();
    try {
      for (const [name, variable, min] of [
        ['public-api-key', 'PUBLIC_API_KEY', 16],
        ['operator-token', 'OPERATOR_TOKEN', 24],
      ] as const) {
        const dir = path.join(dataDir, `short-${name}-${MODE}`);
        mkdirSync(dir, { mode: 0o700 });
        writeFileSync(path.join(dir, name), '', { mode: 0o600 });
        const message = await failure(buildApp({ config: ownDataDir(dir, backing.databaseUrl), logger: false }));
        expect(message).toBe(
          `${path.join(dir, name)} holds 0 characters; ${variable} needs at least ${min}: delete the file to have a new one made, or set ${variable}`,
        );
        // Nothing opened: no embedded store made, no lock left.
        expect(readdirSync(dir).filter((f) => f.startsWith('pglite'))).toEqual([]);
      }
    } finally {
      await backing.release();
    }
  });
});
