import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type LockHooks, startTimeOf, takeLockFile, UNFINISHED_LOCK_MS } from './dir-lock.js';

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'parlor-lock-'));
  file = path.join(dir, 'pglite.lock');
});
let sleeper: ChildProcess | undefined;
afterEach(() => {
  sleeper?.kill();
  sleeper = undefined;
  rmSync(dir, { recursive: true, force: true });
});

/** What this process writes in a lock file. */
const mine = () => `${process.pid} ${startTimeOf(process.pid)}`;

/** A live process other than this one (killed after the test), with its start time. */
function liveOther(): { pid: number; start: string } {
  sleeper = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)'], { stdio: 'ignore' });
  const pid = sleeper.pid as number;
  const start = startTimeOf(pid);
  expect(start).toMatch(/^\d+$/);
  return { pid, start: start as string };
}

const linux = process.platform === 'linux';

/** The pid of a process that has exited (and so runs no more). */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', '']);
  expect(child.status).toBe(0);
  return child.pid as number;
}

describe('takeLockFile', () => {
  it('writes this pid and start time, refuses a second taker while held (this process too), and frees the file on release', () => {
    const release = takeLockFile(file, 'DATA_DIR x');
    expect(readFileSync(file, 'utf8').trim()).toBe(linux ? mine() : String(process.pid));
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
    expect(readFileSync(file, 'utf8').trim()).toBe(linux ? mine() : String(process.pid));
    release();
  });

  it('takes over a lock naming this pid that this process does not hold (a restart reusing the pid, PID 1 in a container)', () => {
    for (const content of [`${process.pid}\n`, `${mine()}\n`]) {
      writeFileSync(file, content);
      const release = takeLockFile(file, 'DATA_DIR x');
      expect(readFileSync(file, 'utf8').trim()).toBe(linux ? mine() : String(process.pid));
      release();
    }
  });

  it.runIf(linux)('takes over a lock naming a live pid with another start time (a reused pid)', () => {
    const other = liveOther();
    writeFileSync(file, `${other.pid} ${Number(other.start) + 1}\n`);
    const release = takeLockFile(file, 'DATA_DIR x');
    expect(readFileSync(file, 'utf8').trim()).toBe(mine());
    release();
  });

  it.runIf(linux)('refuses a lock held by a live other process, old format (pid only) or new', () => {
    const other = liveOther();
    for (const content of [`${other.pid} ${other.start}\n`, `${other.pid}\n`]) {
      writeFileSync(file, content);
      expect(() => takeLockFile(file, 'DATA_DIR x')).toThrow(`in use by another process (pid ${other.pid})`);
      expect(readFileSync(file, 'utf8')).toBe(content);
    }
  });

  it('lets exactly one of two takers racing on one stale lock hold it', () => {
    writeFileSync(file, `${deadPid()}\n`);
    let first: (() => void) | undefined;
    // Taker B judges the lock stale; before it moves it aside, taker A takes it over completely.
    const second = () =>
      takeLockFile(file, 'DATA_DIR x', {
        beforeTakeover: () => {
          if (!first) first = takeLockFile(file, 'DATA_DIR x');
        },
      });
    expect(second).toThrow(`DATA_DIR x is in use by another process (pid ${process.pid})`);
    expect(first).toBeDefined();
    expect(readdirSync(dir)).toEqual(['pglite.lock']);
    first?.();
    expect(existsSync(file)).toBe(false);
  });

  it('lets one of three takers hold it when two judged the lock stale before the third took it', () => {
    writeFileSync(file, `${deadPid()}\n`);
    const held: Array<() => void> = [];
    // B and A both judge the lock stale; C takes it over before either removes it. Neither A nor B
    // may remove C's lock (removal is only of the content judged stale, one taker at a time).
    const take = (inner?: () => void) => () => takeLockFile(file, 'DATA_DIR x', { beforeTakeover: () => inner?.() });
    let c: (() => void) | undefined;
    const a = take(() => {
      if (!c) c = takeLockFile(file, 'DATA_DIR x');
    });
    const b = take(() => {
      expect(a).toThrow('in use by another process');
    });
    expect(b).toThrow(`DATA_DIR x is in use by another process (pid ${process.pid})`);
    expect(c).toBeDefined();
    if (c) held.push(c);
    expect(readdirSync(dir)).toEqual(['pglite.lock']);
    expect(readFileSync(file, 'utf8').trim()).toBe(linux ? mine() : String(process.pid));
    for (const release of held) release();
    expect(existsSync(file)).toBe(false);
  });

  it('removes a takeover file left by a taker that crashed, then takes the stale lock', () => {
    writeFileSync(file, `${deadPid()}\n`);
    writeFileSync(`${file}.takeover`, `${deadPid()}\n`);
    const release = takeLockFile(file, 'DATA_DIR x');
    expect(readdirSync(dir)).toEqual(['pglite.lock']);
    release();
  });

  it.runIf(linux)('leaves a stale lock alone while a live taker holds the takeover file', () => {
    const stale = `${deadPid()}\n`;
    writeFileSync(file, stale);
    const other = liveOther();
    writeFileSync(`${file}.takeover`, `${other.pid} ${other.start}\n`);
    expect(() => takeLockFile(file, 'DATA_DIR x')).toThrow('in use by another process');
    expect(readFileSync(file, 'utf8')).toBe(stale);
    expect(readdirSync(dir).sort()).toEqual(['pglite.lock', 'pglite.lock.takeover']);
  });

  it('takes over an unreadable lock (no pid in it)', () => {
    for (const content of ['not a pid\n', '\n']) {
      writeFileSync(file, content);
      takeLockFile(file, 'DATA_DIR x')();
      expect(existsSync(file)).toBe(false);
    }
  });

  it('takes over a lock without its final newline once it is older than UNFINISHED_LOCK_MS (a crash or a power cut as it was written)', () => {
    const old = (Date.now() - UNFINISHED_LOCK_MS - 1_000) / 1000;
    for (const content of ['', `${deadPid()}`]) {
      writeFileSync(file, content);
      utimesSync(file, old, old);
      takeLockFile(file, 'DATA_DIR x')();
      expect(existsSync(file)).toBe(false);
    }
  });

  it('leaves a lock still being written alone (without hard links a file is created, then written): no newline yet', () => {
    for (const content of ['', `${deadPid()}`]) {
      writeFileSync(file, content);
      expect(() => takeLockFile(file, 'DATA_DIR x')).toThrow(
        `in use by another process (pid ${pidOrUnknown(content)}): stop it first, or remove ${file}`,
      );
      expect(readFileSync(file, 'utf8')).toBe(content);
      expect(readdirSync(dir)).toEqual(['pglite.lock']);
    }
  });

  it('release leaves a file that another process has taken since', () => {
    const release = takeLockFile(file, 'DATA_DIR x');
    writeFileSync(file, '1\n');
    release();
    expect(readFileSync(file, 'utf8')).toBe('1\n');
  });
});

/** The pid a refusal names for a lock's content. */
const pidOrUnknown = (content: string) => (content === '' ? 'unknown' : content);

/** A link that fails as it does on a file system without hard links (vfat, exfat, some network mounts). */
const failing = (code: string) => () => {
  throw Object.assign(new Error(`${code}: operation not permitted, link`), { code });
};

describe('takeLockFile where the file system makes no hard links', () => {
  const noLinks = (hooks: LockHooks = {}): LockHooks => ({ link: failing('EPERM'), ...hooks });

  it.each(['EPERM', 'ENOTSUP', 'EXDEV'])(
    'creates the lock itself (%s), mode 0600, refuses a second taker, leaves no scratch file and frees it on release',
    (code) => {
      const release = takeLockFile(file, 'DATA_DIR x', { link: failing(code) });
      expect(readFileSync(file, 'utf8').trim()).toBe(linux ? mine() : String(process.pid));
      expect(statSync(file).mode & 0o777).toBe(0o600);
      expect(readdirSync(dir)).toEqual(['pglite.lock']);
      expect(() => takeLockFile(file, 'DATA_DIR x', { link: failing(code) })).toThrow(
        `DATA_DIR x is in use by another process (pid ${process.pid})`,
      );
      expect(readdirSync(dir)).toEqual(['pglite.lock']);
      release();
      expect(existsSync(file)).toBe(false);
    },
  );

  it('takes over a stale lock, its takeover file created the same way, and leaves only the lock', () => {
    writeFileSync(file, `${deadPid()}\n`);
    const release = takeLockFile(file, 'DATA_DIR x', noLinks());
    expect(readFileSync(file, 'utf8').trim()).toBe(linux ? mine() : String(process.pid));
    expect(readdirSync(dir)).toEqual(['pglite.lock']);
    release();
  });

  it('lets exactly one of two takers racing on one stale lock hold it', () => {
    writeFileSync(file, `${deadPid()}\n`);
    let first: (() => void) | undefined;
    const second = () =>
      takeLockFile(
        file,
        'DATA_DIR x',
        noLinks({
          beforeTakeover: () => {
            if (!first) first = takeLockFile(file, 'DATA_DIR x', noLinks());
          },
        }),
      );
    expect(second).toThrow(`DATA_DIR x is in use by another process (pid ${process.pid})`);
    expect(first).toBeDefined();
    expect(readdirSync(dir)).toEqual(['pglite.lock']);
    first?.();
    expect(existsSync(file)).toBe(false);
  });

  it('leaves a lock another taker has just created in place of a stale empty one, still unwritten (empty too)', () => {
    const old = (Date.now() - UNFINISHED_LOCK_MS - 5_000) / 1000;
    writeFileSync(file, '');
    utimesSync(file, old, old);
    const take = () =>
      takeLockFile(
        file,
        'DATA_DIR x',
        noLinks({
          beforeTakeover: () => {
            // Meanwhile another taker removed the stale lock and created its own, not yet written.
            rmSync(file);
            writeFileSync(file, '', { flag: 'wx' });
          },
        }),
      );
    expect(take).toThrow(`DATA_DIR x is in use by another process (pid unknown): stop it first, or remove ${file}`);
    expect(readFileSync(file, 'utf8')).toBe('');
  });

  it('throws any other link error, leaving no file', () => {
    expect(() => takeLockFile(file, 'DATA_DIR x', { link: failing('EIO') })).toThrow(/EIO/);
    expect(readdirSync(dir)).toEqual([]);
  });
});
