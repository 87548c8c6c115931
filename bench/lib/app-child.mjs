/**
 * The real app (lib/modes.mjs startMode) in a process of its own (lib/child.mjs), over storage
 * provisioned by the parent (provisionStorage), so that the process's RSS and heap hold the
 * server and nothing of the bench. Commands: start({ mode, storage }) → { url, publicApiKey,
 * startMs }, close (plus the built-in memory and exit).
 */
import { startMode } from './modes.mjs';

let started = null;

export const commands = {
  async start({ mode, storage }) {
    if (started) throw new Error('already started');
    started = await startMode(mode, { attach: storage });
    return { url: started.url, publicApiKey: started.built.publicApiKey, startMs: started.startMs };
  },
  async close() {
    await started?.close();
    started = null;
  },
};
