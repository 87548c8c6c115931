import { closeSync, linkSync, openSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { processExists } from '../processes.js';
import { NO_HARD_LINKS } from '../secret-files.js';

/** The lock files this process holds (resolved paths): a file naming this pid but not listed here is stale. */
const heldHere = new Set<string>();

/** How many times a take starts over after losing a race for a stale lock. */
const TAKE_ATTEMPTS = 5;

/** Numbers this process's scratch files, so two takes in one process never share one. */
let scratch = 0;

/**
 * A process's start time (Linux: /proc/<pid>/stat field 22, in clock ticks since boot), or null
 * where there is no /proc. With the pid it names one process: a pid reused after a crash (PID 1 in
 * every container start) has another start time.
 */
export function startTimeOf(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 2 (the command) is in parentheses and may hold spaces: count from the last ')'.
    const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    return start && /^\d+$/.test(start) ? start : null;
  } catch {
    return null;
  }
}

/**
 * What a lock file says: `pid start` (or just `pid`, written before start times were) and a
 * newline, which every writer puts last, so a file without it is still being written.
 */
function contentOf(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/** The pid a lock's content names, or null (empty, garbage). */
function pidOf(content: string): number | null {
  const pid = Number(content.trim().split(/\s+/)[0]);
  return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
}

/**
 * How long a lock without its final newline counts as one being written (ms). Its taker writes it
 * within a moment (place, without hard links); one older than this was left so by a crash in that
 * moment, or emptied by a power cut before the file system kept its content, and is stale.
 */
export const UNFINISHED_LOCK_MS = 10_000;

/** Whether the file was last written within `ms` (false once it is gone). */
function writtenWithin(file: string, ms: number): boolean {
  try {
    return Date.now() - statSync(file).mtimeMs < ms;
  } catch {
    return false;
  }
}

/**
 * Whether the process a lock's content names still holds it. Content without its final newline
 * is a lock being written (place: no hard links) while it is younger than UNFINISHED_LOCK_MS:
 * removing it then would let two hold the lock.
 */
function live(file: string, content: string): boolean {
  if (!content.endsWith('\n')) return writtenWithin(file, UNFINISHED_LOCK_MS);
  const pid = pidOf(content);
  if (pid === null) return false;
  if (pid === process.pid) return heldHere.has(file);
  if (!processExists(pid)) return false;
  const recorded = content.trim().split(/\s+/)[1];
  const now = startTimeOf(pid);
  return recorded === undefined || now === null || recorded === now;
}

const unlinkIfThere = (file: string) => {
  try {
    unlinkSync(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
};

/** Test seams: runs after a lock has been judged stale, before it is removed; the hard link. */
export interface LockHooks {
  beforeTakeover?: () => void;
  link?: (from: string, to: string) => void;
}

/**
 * Puts `content` (held by the file `aside`) at `target` unless a file is there (false). Hard-linked
 * from `aside`, it appears whole. On a file system without hard links (vfat, exfat, some network
 * mounts) it is created exclusively and then written: until its final newline is in, live() takes
 * it for a lock being written. A failed write removes it (no other process removes such a file).
 */
function place(aside: string, target: string, content: string, link: NonNullable<LockHooks['link']>): boolean {
  try {
    link(aside, target);
    return true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? '';
    if (code === 'EEXIST') return false;
    if (!NO_HARD_LINKS.has(code)) throw e;
  }
  let fd: number;
  try {
    fd = openSync(target, 'wx', 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  }
  try {
    try {
      writeFileSync(fd, content);
    } finally {
      closeSync(fd);
    }
  } catch (e) {
    unlinkIfThere(target);
    throw e;
  }
  return true;
}

/**
 * Removes the stale lock (`content`) while holding `<file>.takeover`, created exclusively: takers of
 * one stale lock go one at a time, and each removes the lock only if it still holds that content,
 * so none can remove a lock another taker has just put in place. A takeover file left by a taker
 * that crashed is judged like a lock and removed (the caller's next attempt takes it). Answers
 * false when another live taker holds it: the caller starts over.
 */
function removeIfStill(file: string, content: string, mine: string, link: NonNullable<LockHooks['link']>): boolean {
  const guard = `${file}.takeover`;
  const aside = `${guard}.${process.pid}.${++scratch}.tmp`;
  writeFileSync(aside, mine, { mode: 0o600 });
  try {
    if (!place(aside, guard, mine, link)) {
      const holder = contentOf(guard);
      if (holder !== null && !live(path.resolve(guard), holder)) unlinkIfThere(guard);
      return false;
    }
    try {
      // Judged again under the guard: the same content may be another taker's lock just created
      // and not yet written (empty, without hard links), which is live while it is young.
      const now = contentOf(file);
      if (now === content && !live(path.resolve(file), now)) unlinkIfThere(file);
    } finally {
      if (contentOf(guard) === mine) unlinkIfThere(guard);
    }
    return true;
  } finally {
    unlinkIfThere(aside);
  }
}

/**
 * Takes `file` as an exclusive lock for this process: the file holds this pid and its start time
 * (written aside, then hard-linked into place, so it appears whole, which fails if the file exists;
 * without hard links, created exclusively and then written: place). A file whose process no longer
 * runs, or whose pid now belongs to another process (a reused pid: another start time), or names
 * this process without being held here, was left by a server that crashed or was killed: it is
 * taken over. A live holder, this process included, makes it throw one line naming `what`, the pid
 * and the file. Answers the release, which removes the file (once; only while it is still this
 * process's).
 */
export function takeLockFile(file: string, what: string, hooks: LockHooks = {}): () => void {
  const key = path.resolve(file);
  const link = hooks.link ?? linkSync;
  const start = startTimeOf(process.pid);
  const mine = start === null ? `${process.pid}\n` : `${process.pid} ${start}\n`;
  const aside = `${file}.${process.pid}.${++scratch}.tmp`;
  writeFileSync(aside, mine, { mode: 0o600 });
  try {
    for (let attempt = 1; ; attempt++) {
      if (place(aside, file, mine, link)) break;
      const content = contentOf(file);
      if ((content !== null && live(key, content)) || attempt >= TAKE_ATTEMPTS)
        throw new Error(
          `${what} is in use by another process (pid ${(content !== null && pidOf(content)) || 'unknown'}): stop it first, or remove ${file} if that pid is not a Parlor server`,
        );
      if (content === null) continue; // gone since: try again
      hooks.beforeTakeover?.();
      removeIfStill(file, content, mine, link);
    }
  } finally {
    unlinkIfThere(aside);
  }
  heldHere.add(key);
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    heldHere.delete(key);
    if (contentOf(file) === mine) unlinkIfThere(file);
  };
}
