import { parentPort, workerData } from 'node:worker_threads';

const { moduleUrl, exportName, args } = workerData;
try {
  const mod = await import(moduleUrl);
  const result = await mod[exportName](args);
  parentPort.postMessage({ ok: true, result });
} catch (e) {
  parentPort.postMessage({ ok: false, error: e?.message ?? String(e), stack: e?.stack });
}
// Whatever the task left open (agents, sockets), the worker is done.
process.exit(0);
