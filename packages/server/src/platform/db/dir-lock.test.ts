import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { takeLockFile } from './dir-lock.js';

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'parlor-lock-'));
  file = path.join(dir, 'pglite.lock');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** The pid of a process that has exited (and so runs no more). */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', '']);
  expect(child.status).toBe(0);
  return child.pid as number;
}

describe('takeLockFile', () => {
  it('writes this pid, refuses a second taker while held (this process too), and frees the file on release', () => {
    const release = takeLockFile(file, 'DATA_DIR x');
    expect(readFileSync(file, 'utf8').trim()).toBe(String(process.pid));
    expect(() => takeLockFile(file, 'DATA_DIR x')).toThrow(
      `DATA_DIR x is in use by another process (pid ${process.pid}): stop it first, or remove ${file} if that pid is not a Parlor server`,
    );
    // The refused taker left nothing behind and did not disturb the holder's file.
    expect(readdirSync(dir)).toEqual(['pglite.lock']);
    release();
    expect(existsSync(file)).toBe(false);
    release();
    takeLockFile(file, 'DATA_DIR x')();
  });

  it('takes over a stale lock whose process no longer runs', () => {
    writeFileSync(file, `${deadPid()}\n`);
    const release = takeLockFile(file, 'DATA_DIR x');
    expect(readFileSync(file, 'utf8').trim()).toBe(String(process.pid));
    release();
  });

  it('takes over an empty or unreadable lock (a crash before the pid was written)', () => {
    for (const content of ['', 'not a pid\n']) {
      writeFileSync(file, content);
      takeLockFile(file, 'DATA_DIR x')();
      expect(existsSync(file)).toBe(false);
    }
  });

  it('release leaves a file that another process has taken since', () => {
    const release = takeLockFile(file, 'DATA_DIR x');
    writeFileSync(file, '1\n');
    release();
    expect(readFileSync(file, 'utf8')).toBe('1\n');
  });
});
