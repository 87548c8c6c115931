import { linkSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';

/** Whether a process with this pid exists (EPERM: it does, under another user). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The pid a lock file names, or null (gone, empty, garbage). */
function holderOf(file: string): number | null {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

const unlinkIfThere = (file: string) => {
  try {
    unlinkSync(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
};

/**
 * Takes `file` as an exclusive lock for this process: the file appears at once with this pid in it
 * (written aside, then hard-linked into place, which fails if the file exists). A file whose pid
 * no longer runs was left by a server that crashed or was killed: it is taken over. A running
 * holder, this process included, makes it throw one line naming `what`, the pid and the file.
 * Answers the release, which removes the file (once; only while it still names this process).
 */
export function takeLockFile(file: string, what: string): () => void {
  const aside = `${file}.${process.pid}.tmp`;
  writeFileSync(aside, `${process.pid}\n`, { mode: 0o600 });
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        linkSync(aside, file);
        break;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        const holder = holderOf(file);
        if ((holder !== null && running(holder)) || attempt > 0)
          throw new Error(
            `${what} is in use by another process (pid ${holder ?? 'unknown'}): stop it first, or remove ${file} if that pid is not a Parlor server`,
          );
        // Stale: its process is gone. Remove it and try once more (a racing start may win: then it holds it).
        unlinkIfThere(file);
      }
    }
  } finally {
    unlinkIfThere(aside);
  }
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    if (holderOf(file) === process.pid) unlinkIfThere(file);
  };
}
