/**
 * Things to undo if the run is interrupted (Ctrl-C): scratch databases, Redis prefixes, temp dirs.
 * Normal runs undo them in their own `finally`; run.mjs calls runCleanups() on SIGINT/SIGTERM.
 */
const pending = new Set();

export function addCleanup(fn) {
  pending.add(fn);
  return () => pending.delete(fn);
}

export async function runCleanups() {
  const fns = [...pending].reverse();
  pending.clear();
  for (const fn of fns) {
    try {
      await fn();
    } catch (e) {
      console.error(`bench: cleanup failed: ${e?.message ?? e}`);
    }
  }
}
