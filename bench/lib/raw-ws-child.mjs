/**
 * The raw `ws` baseline (lib/raw-ws.mjs) in a process of its own (lib/child.mjs), so that its RSS
 * and heap hold nothing but the baseline server and its connections. Commands: start → { url,
 * wsUrl }, stats → { accepted, open }, dropClients, close (plus the built-in memory and exit).
 */
import { startRawWs } from './raw-ws.mjs';

let server = null;

export const commands = {
  async start() {
    server ??= await startRawWs();
    return { url: server.url, wsUrl: server.wsUrl };
  },
  stats: () => server.stats(),
  dropClients() {
    server.dropClients();
    return server.stats();
  },
  async close() {
    await server?.close();
    server = null;
  },
};
