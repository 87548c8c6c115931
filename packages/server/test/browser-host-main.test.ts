import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { RemoteBrowserProvider } from '../src/platform/vm/remote-provider.js';
import { MODE } from './support/app.js';
import { runNode, waitFor } from './support/process.js';
import {
  BROWSER_TEST_TIMEOUT_MS,
  CHROMIUM,
  describeProvider,
  eventually,
  livingInSession,
  roomSpec,
  WAIT_MS,
} from './support/vm-browser.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/**
 * The browser host process (`npm run browser-host`): the API server's handling of signals and
 * crashes (platform/process-lifecycle.ts). It uses no store, so it runs on the embedded project only.
 */
const HERE = path.dirname(fileURLToPath(import.meta.url));
const HOST_MAIN = path.resolve(HERE, '../dist/browser-host-main.js');
const HOST_CRASH = path.resolve(HERE, 'fixtures/host-crash.mjs');
const TOKEN = 'vht_host_main_test_token_0123456789abcdef';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A browser host on a free port of 127.0.0.1, logging at info; `url` once it serves. */
async function startHost(argv: string[]) {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-host-'));
  dirs.push(dataDir);
  const p = runNode(argv, {
    DATA_DIR: dataDir,
    HOST: '127.0.0.1',
    BROWSER_HOST_PORT: '0',
    VM_HOST_TOKEN: TOKEN,
    VM_MAX_PER_NODE: '1',
    CHROMIUM_PATH: CHROMIUM,
    LOG_LEVEL: 'info',
  });
  await waitFor(() => p.out().includes('token: from VM_HOST_TOKEN'));
  const where = /serving (\S+)/.exec(p.out())?.[1];
  return { ...p, url: `http://${where}` };
}

describeProvider('the browser host process (npm run browser-host)', () => {
  it('closes its browsers and exits 0 on SIGTERM', async () => {
    const host = await startHost([HOST_MAIN]);
    const node = new RemoteBrowserProvider({ hosts: [host.url], token: TOKEN, connectWaitMs: 3_000 });
    try {
      await node.start('room-1', roomSpec());
      // The room's browser: Chromium is started detached, a child of the host process.
      const pids = execFileSync('ps', ['-o', 'pid=', '--ppid', String(host.child.pid)])
        .toString()
        .split('\n')
        .map((l) => Number(l.trim()))
        .filter((pid) => pid > 0);
      expect(pids.length).toBeGreaterThan(0);
      host.child.kill('SIGTERM');
      expect(await host.exited, host.err()).toBe(0);
      const msgs = host.logs().map((l) => l.msg);
      expect(host.logs()).toContainEqual(expect.objectContaining({ msg: 'shutting down', signal: 'SIGTERM' }));
      expect(msgs).toContain('browser host closed');
      for (const pid of pids) await eventually(() => livingInSession(pid) === 0, WAIT_MS, 'the browser gone');
    } finally {
      await node.close();
    }
  });
});

describe.skipIf(MODE === 'cluster')('the browser host process after a crash', () => {
  it.each(['exception', 'rejection'])('logs an uncaught %s at fatal as JSON, closes, and exits 1', async (kind) => {
    const host = await startHost([HOST_CRASH, kind]);
    host.child.kill('SIGUSR2');
    expect(await host.exited).toBe(1);
    const fatal = host.logs().find((l) => l.level === 60);
    expect(fatal?.msg).toBe(kind === 'exception' ? 'uncaught exception' : 'unhandled rejection');
    expect(fatal?.err).toMatchObject({ message: 'host boom' });
    expect(host.logs().map((l) => l.msg)).toContain('browser host closed');
    expect(host.err()).toBe('');
  });
});
