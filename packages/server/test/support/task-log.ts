import type { TaskLog } from '../../src/platform/background.js';

/** A background task's log that records what it was told, as [level, message, fields]. */
export function fakeTaskLog() {
  const lines: [string, string, object][] = [];
  const log = {
    error: (obj: object, msg: string) => void lines.push(['error', msg, obj]),
    warn: (obj: object, msg: string) => void lines.push(['warn', msg, obj]),
  } as unknown as TaskLog;
  return { log, lines };
}
