import { linkSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
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

/** Test seam: runs after a lock has been judged stale, before it is moved aside. */
export interface LockHooks {
  beforeTakeover?: () => void;
}

/**
 * Moves the stale lock (`content`) aside atomically and removes it. If what was moved is not that
 * content, another taker won the race since: its lock is put back (link: never over a newer one).
 */
function moveAsideIfStill(file: string, content: string): void {
  const moved = `${file}.stale.${process.pid}.${++scratch}`;
  try {
    renameSync(file, moved);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw e;
  }
  try {
    if (contentOf(moved) !== content) linkSync(moved, file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  } finally {
    unlinkIfThere(moved);
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
      moveAsideIfStill(file, content);
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
