import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { createBacking, describeApp, MODE, seedDataDir } from './support/app.js';
import { runNode, waitFor } from './support/process.js';
import { alive } from './support/vm-browser.js';

const MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../dist/main.js');
const dirs: string[] = [];
/** What a browser host needs to start (VM_HOST_TOKEN, its own port). */
const HOST_ENV = { BROWSER_HOST_PORT: '0', VM_HOST_TOKEN: 'vht_main_test_host_token_0123456789abcdef' };
/** The secrets a cluster's nodes share. */
const SHARED = {
  PUBLIC_API_KEY: 'ppk_main_test_public_key_0123456789',
  OPERATOR_TOKEN: 'pop_main_test_operator_token_0123456789',
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const CRASH = path.resolve(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/crash.mjs');
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** The processes whose parent is `pid` (Linux's /proc; none where it cannot be read). */
function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * Runs a root package.json script as npm does (`sh -c '<script>'`), with an `npm` on PATH that
 * does nothing, for the script's `npm run build` (dist is built).
 */
function runScript(name: 'start' | 'browser-host', env: Record<string, string>) {
  const scripts = (
    JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
  ).scripts;
  const bin = mkdtempSync(path.join(tmpdir(), 'parlor-npm-'));
  dirs.push(bin);
  writeFileSync(path.join(bin, 'npm'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  const child = spawn('sh', ['-c', scripts[name] ?? ''], {
    cwd: ROOT,
    env: { PATH: `${bin}:${path.dirname(process.execPath)}:${process.env.PATH ?? ''}`, LOG_LEVEL: 'silent', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => {
    out += d;
  });
  child.stderr.on('data', (d) => {
    out += d;
  });
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return { script: scripts[name], child, exited, out: () => out };
}

const run = (env: Record<string, string>, argv: string[] = [MAIN]) => runNode(argv, env);

/**
 * The environment of a node over this run's stores (a scratch database in cluster mode). `seeded`:
 * an embedded DATA_DIR already holds a migrated store (support/app.ts seedDataDir), for the cases
 * that test something else than a first start.
 */
async function nodeEnv(
  opts: { seeded?: boolean } = {},
): Promise<{ env: Record<string, string>; dataDir: string; release: () => Promise<void> }> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-main-'));
  dirs.push(dataDir);
  if (opts.seeded && MODE === 'embedded') seedDataDir(dataDir);
  const backing = MODE === 'cluster' ? await createBacking() : null;
  const services: Record<string, string> = backing?.databaseUrl
    ? {
        DATABASE_URL: backing.databaseUrl,
        REDIS_URL: backing.redisUrl ?? '',
        REDIS_PREFIX: backing.redisPrefix,
        PUBLIC_API_KEY: SHARED.PUBLIC_API_KEY,
        OPERATOR_TOKEN: SHARED.OPERATOR_TOKEN,
      }
    : {};
  return { env: { DATA_DIR: dataDir, PORT: '0', ...services }, dataDir, release: async () => backing?.release() };
}

describeApp('the server process (npm start)', () => {
  it('starts with no services, prints URL, public key and token file, serves, and stops cleanly on SIGTERM', async () => {
    // Cluster runs point the process at a scratch PostgreSQL database and a Redis prefix, with the
    // secrets every node shares (REDIS_URL requires them); embedded runs generate both.
    const node = await nodeEnv();
    const { dataDir } = node;
    const p = run(node.env);
    await waitFor(() => p.out().includes('operator token'));
    const url = /serving (http:\/\/\S+)/.exec(p.out())?.[1];
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    if (MODE === 'cluster') {
      expect(p.out()).toContain(`public API key: ${SHARED.PUBLIC_API_KEY}`);
      expect(p.out()).toContain('operator token: from OPERATOR_TOKEN');
    } else {
      expect(p.out()).toMatch(/public API key: ppk_/);
      expect(p.out()).toContain(path.join(dataDir, 'operator-token'));
      expect(statSync(path.join(dataDir, 'operator-token')).mode & 0o777).toBe(0o600);
    }
    const health = await fetch(`${url}/v1/health`);
    expect(((await health.json()) as { source_hash: string }).source_hash).toBe('main-test');
    expect(p.out(), p.out()).toContain(MODE === 'cluster' ? '(cluster (PostgreSQL, Redis) mode)' : 'embedded mode');
    p.child.kill('SIGTERM');
    expect(await p.exited).toBe(0);
    await node.release();
  }, 60_000);

  // A supervisor (docker stop, Kubernetes, systemd, kill) signals the process it started: npm, which
  // passes the signal to the script's shell. The shell must be the server (exec), not its parent.
  it.skipIf(MODE !== 'embedded').each([
    ['start', 'packages/server/dist/main.js', 'operator token', {}],
    ['browser-host', 'packages/server/dist/browser-host-main.js', 'token: from VM_HOST_TOKEN', HOST_ENV],
  ] as const)(
    'stops the server of `npm %s` on a SIGTERM to the script, which drains, exits 0 and releases DATA_DIR',
    async (name, entry, ready, env) => {
      const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-main-'));
      dirs.push(dataDir);
      // The server's store is not what this tests.
      if (name === 'start') seedDataDir(dataDir);
      const p = runScript(name, { DATA_DIR: dataDir, PORT: '0', ...env });
      let left: number[] = [];
      try {
        await waitFor(() => p.out().includes(ready));
        left = childrenOf(p.child.pid ?? 0);
        p.child.kill('SIGTERM');
        expect(await p.exited, p.out()).toEqual({ code: 0, signal: null });
        expect(existsSync(path.join(dataDir, 'pglite.lock'))).toBe(false);
        expect(left.filter(alive)).toEqual([]);
        expect(p.script).toMatch(new RegExp(`&& exec node ${entry}$`));
      } finally {
        // A server the script's shell left running (no exec), by its pid.
        for (const pid of left.filter(alive)) process.kill(pid, 'SIGKILL');
        if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
      }
    },
    60_000,
  );

  it('refuses to start with REDIS_URL but no PUBLIC_API_KEY or OPERATOR_TOKEN (nodes must share them)', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-main-'));
    dirs.push(dataDir);
    const p = run({ REDIS_URL: 'redis://127.0.0.1:6379', DATA_DIR: dataDir, OPERATOR_TOKEN: SHARED.OPERATOR_TOKEN });
    expect(await p.exited).toBe(1);
    expect(p.err().trim().split('\n')).toEqual([
      expect.stringMatching(/^parlor: invalid configuration: PUBLIC_API_KEY must be set when REDIS_URL is set/),
    ]);
    expect(existsSync(path.join(dataDir, 'public-api-key'))).toBe(false);
  });

  it('stops cleanly on a SIGTERM that arrives while it is still starting (migrations)', async () => {
    const node = await nodeEnv();
    const p = run({ ...node.env, LOG_LEVEL: 'info' });
    await waitFor(() => p.logs().some((l) => l.msg === 'starting'));
    p.child.kill('SIGTERM');
    expect(await p.exited, p.err()).toBe(0);
    expect(p.logs().some((l) => l.msg === 'shutting down' && l.signal === 'SIGTERM')).toBe(true);
    await node.release();
  }, 60_000);

  it('exits at once on a second signal while the first shutdown waits for a request in flight', async () => {
    const node = await nodeEnv({ seeded: true });
    const p = run({ ...node.env, LOG_LEVEL: 'info' });
    await waitFor(() => p.out().includes('operator token'));
    const url = new URL(/serving (http:\/\/\S+)/.exec(p.out())?.[1] ?? '');
    const key = /public API key: (\S+)/.exec(p.out())?.[1];
    // A request whose body never comes (past its key check): the shutdown waits for it (10 s cap).
    const socket = net.connect(Number(url.port), url.hostname);
    socket.on('error', () => {});
    socket.write(
      `POST /v1/authentication/lookup HTTP/1.1\r\nHost: x\r\nX-API-Key: ${key}\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{`,
    );
    await waitFor(() => p.logs().some((l) => l.msg === 'incoming request'));
    p.child.kill('SIGINT');
    await waitFor(() => p.logs().some((l) => l.msg === 'shutting down'));
    p.child.kill('SIGINT');
    expect(await p.exited).toBe(130);
    expect(p.logs().some((l) => l.msg === 'second signal: exiting at once')).toBe(true);
    socket.destroy();
    await node.release();
  }, 60_000);

  it.each(['exception', 'rejection'])(
    'logs an uncaught %s at fatal as JSON without query values, closes, and exits 1',
    async (kind) => {
      const p = run({}, [CRASH, kind]);
      expect(await p.exited).toBe(1);
      const lines = p.logs();
      const fatal = lines.find((l) => l.level === 60);
      expect(fatal?.msg).toBe(kind === 'exception' ? 'uncaught exception' : 'unhandled rejection');
      expect(fatal?.err).toMatchObject({ message: 'Failed query: select $1::text', cause: { message: 'boom' } });
      expect(lines.map((l) => l.msg)).toContain('closed');
      expect(p.out()).not.toContain('ct-SECRET-9f8e7d');
      expect(p.err()).toBe('');
    },
  );

  it('refuses to start on a stored operator token left empty, in one line naming the file and OPERATOR_TOKEN', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-main-'));
    dirs.push(dataDir);
    writeFileSync(path.join(dataDir, 'operator-token'), '', { mode: 0o600 });
    const p = run({ DATA_DIR: dataDir, PORT: '0' });
    expect(await p.exited).toBe(1);
    expect(p.err().trim().split('\n')).toEqual([
      `parlor: failed to start: ${path.join(dataDir, 'operator-token')} holds 0 characters; OPERATOR_TOKEN needs at least 24: delete the file to have a new one made, or set OPERATOR_TOKEN`,
    ]);
    expect(p.out()).not.toContain('serving');
  });

  it('refuses to start on invalid configuration, one line per variable', async () => {
    const p = run({ PORT: 'eighty', LOG_LEVEL: 'loud', DATA_DIR: tmpdir() });
    expect(await p.exited).toBe(1);
    const lines = p.err().trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^parlor: invalid configuration: PORT /);
    expect(lines[1]).toMatch(/^parlor: invalid configuration: LOG_LEVEL /);
  });
});
