import { Worker } from 'node:worker_threads';

/**
 * Runs `exportName(args)` of a module in a worker thread and resolves with its (structured-clone)
 * result. Load generators run here so they use the other core and never share the event loop of
 * the server they measure (which stays in the main thread, as in production).
 */
export function inWorker(moduleUrl, exportName, args) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./worker-entry.mjs', import.meta.url), {
      workerData: { moduleUrl: String(moduleUrl), exportName, args },
    });
    let settled = false;
    worker.once('message', (msg) => {
      settled = true;
      if (msg.ok) resolve(msg.result);
      else reject(Object.assign(new Error(msg.error), { stack: msg.stack }));
    });
    worker.once('error', (e) => {
      settled = true;
      reject(e);
    });
    worker.once('exit', (code) => {
      if (!settled) reject(new Error(`bench worker for ${exportName} exited with code ${code}`));
    });
  });
}
