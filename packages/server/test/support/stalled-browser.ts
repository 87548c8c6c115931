import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/**
 * A "browser" binary that starts and never answers over DevTools, as a Chromium stuck in its
 * start-up would: a launch of it waits for its ready timeout unless called off. It writes its
 * pid where `pid()` reads it (it runs as `nobody` when the tests run as root, hence the modes).
 */
export function stalledBrowser() {
  const dir = mkdtempSync(path.join(tmpdir(), 'parlor-stalled-browser-'));
  chmodSync(dir, 0o777);
  const pidFile = path.join(dir, 'pid');
  const binary = path.join(dir, 'browser');
  writeFileSync(binary, `#!/bin/sh\necho $$ > ${pidFile}\nexec sleep 600\n`, { mode: 0o755 });
  return {
    path: binary,
    /** The browser's pid once it has started, else null. */
    pid: (): number | null => (existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').trim()) || null : null),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
