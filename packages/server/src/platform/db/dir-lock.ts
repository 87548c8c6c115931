import { linkSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** The lock files this process holds (resolved paths): a file naming this pid but not listed here is stale. */
const heldHere = new Set<string>();

/** How many times a take starts over after losing a race for a stale lock. */
const TAKE_ATTEMPTS = 5;

/** Numbers this process's scratch files, so two takes in one process never share one. */
let scratch = 0;

/** Whether a process with this pid exists (EPERM: it does, under another user). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

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

/** What a lock file says: `pid start` (or just `pid`, written before start times were), trimmed. */
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

/** Whether the process a lock's content names still holds it. */
function live(file: string, content: string): boolean {
  const pid = pidOf(content);
  if (pid === null) return false;
  if (pid === process.pid) return heldHere.has(file);
  if (!running(pid)) return false;
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

/** Test seam: runs after a lock has been judged stale, before it is removed. */
export interface LockHooks {
  beforeTakeover?: () => void;
}

/**
 * Removes the stale lock (`content`) while holding `<file>.takeover`, created exclusively: takers of
 * one stale lock go one at a time, and each removes the lock only if it still holds that content,
 * so none can remove a lock another taker has just put in place. A takeover file left by a taker
 * that crashed is judged like a lock and removed (the caller's next attempt takes it). Answers
 * false when another live taker holds it: the caller starts over.
 */
function removeIfStill(file: string, content: string, mine: string): boolean {
  const guard = `${file}.takeover`;
  const aside = `${guard}.${process.pid}.${++scratch}.tmp`;
  writeFileSync(aside, mine, { mode: 0o600 });
  try {
    try {
      linkSync(aside, guard);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const holder = contentOf(guard);
      if (holder !== null && !live(path.resolve(guard), holder)) unlinkIfThere(guard);
      return false;
    }
    try {
      if (contentOf(file) === content) unlinkIfThere(file);
    } finally {
      if (contentOf(guard) === mine) unlinkIfThere(guard);
    }
    return true;
  } finally {
    unlinkIfThere(aside);
  }
}

/**
 * Takes `file` as an exclusive lock for this process: the file appears at once with this pid and
 * its start time in it (written aside, then hard-linked into place, which fails if the file
 * exists). A file whose process no longer runs, or whose pid now belongs to another process (a
 * reused pid: another start time), or names this process without being held here, was left by a
 * server that crashed or was killed: it is taken over. A live holder, this process included, makes
 * it throw one line naming `what`, the pid and the file. Answers the release, which removes the
 * file (once; only while it is still this process's).
 */
export function takeLockFile(file: string, what: string, hooks: LockHooks = {}): () => void {
  const key = path.resolve(file);
  const start = startTimeOf(process.pid);
  const mine = start === null ? `${process.pid}\n` : `${process.pid} ${start}\n`;
  const aside = `${file}.${process.pid}.${++scratch}.tmp`;
  writeFileSync(aside, mine, { mode: 0o600 });
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        linkSync(aside, file);
        break;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
      const content = contentOf(file);
      if ((content !== null && live(key, content)) || attempt >= TAKE_ATTEMPTS)
        throw new Error(
          `${what} is in use by another process (pid ${(content !== null && pidOf(content)) || 'unknown'}): stop it first, or remove ${file} if that pid is not a Parlor server`,
        );
      if (content === null) continue; // gone since: try again
      hooks.beforeTakeover?.();
      removeIfStill(file, content, mine);
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
