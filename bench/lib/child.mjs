import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { addCleanup } from './cleanup.mjs';

/**
 * A long-lived helper process (not a thread): for figures that need a process of their own, such as
 * the RSS of a server with nothing else in it, or clients whose memory must not count in the
 * server's process. The module at `moduleUrl` exports `commands`: { name: async (args) => result }.
 * Every child also answers `memory` (after a full GC: rss, heapUsed, external, arrayBuffers) and
 * `exit`. Returns { call(name, args), close() }; `call` resolves with the command's result.
 * `execArgv` adds Node options (e.g. --cpu-prof for a profile of that process). `nice` (1-19) starts
 * it under `nice`, every thread included (a priority set after the start would miss the threads
 * Node has already made).
 */
export async function startChild(moduleUrl, { name = 'bench child', execArgv = [], nice = 0 } = {}) {
  const node = ['--expose-gc', ...execArgv];
  const child = fork(fileURLToPath(new URL('./child-entry.mjs', import.meta.url)), [String(moduleUrl)], {
    ...(nice > 0
      ? { execPath: 'nice', execArgv: ['-n', String(nice), process.execPath, ...node] }
      : { execArgv: node }),
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    // Structured clone over IPC: typed arrays of samples arrive as typed arrays.
    serialization: 'advanced',
  });
  const pending = new Map();
  let nextId = 0;
  let exited = false;
  child.on('message', (msg) => {
    const p = pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id);
    if (msg.ok) p.resolve(msg.result);
    else p.reject(Object.assign(new Error(`${name}: ${msg.error}`), { stack: msg.stack }));
  });
  child.on('exit', (code) => {
    exited = true;
    for (const p of pending.values()) p.reject(new Error(`${name} exited with code ${code}`));
    pending.clear();
  });
  await new Promise((resolve, reject) => {
    child.once('message', (m) => (m === 'ready' ? resolve() : reject(new Error(`${name}: ${JSON.stringify(m)}`))));
    child.once('error', reject);
  });
  const close = async () => {
    if (exited) return;
    const gone = new Promise((r) => child.once('exit', r));
    child.send({ id: -1, cmd: 'exit' });
    const t = setTimeout(() => child.kill('SIGKILL'), 3000);
    await gone;
    clearTimeout(t);
  };
  const removeCleanup = addCleanup(close);
  return {
    pid: child.pid,
    call(cmd, args) {
      if (exited) return Promise.reject(new Error(`${name} is gone`));
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        child.send({ id, cmd, args });
      });
    },
    async close() {
      removeCleanup();
      await close();
    },
  };
}

/** Memory of this process after a full GC (exposes gc at run time if needed). */
export async function memoryAfterGc() {
  const gc = await getGc();
  gc();
  await new Promise((r) => setImmediate(r));
  gc();
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers };
}

let gcFn = null;
async function getGc() {
  if (gcFn) return gcFn;
  if (typeof globalThis.gc === 'function') {
    gcFn = globalThis.gc;
    return gcFn;
  }
  const v8 = await import('node:v8');
  const vm = await import('node:vm');
  v8.setFlagsFromString('--expose-gc');
  gcFn = vm.runInNewContext('gc');
  return gcFn;
}
