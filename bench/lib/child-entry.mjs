import { Session } from 'node:inspector/promises';
import { memoryAfterGc } from './child.mjs';

const mod = await import(process.argv[2]);

/** CPU time of this process so far (user + system), in ms. */
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

// CPU profiles of chosen stretches (the bench's measured storms, say), collected until `profiles`.
let profiler = null;
const profiles = [];
const profile = {
  async profileStart() {
    if (!profiler) {
      profiler = new Session();
      profiler.connect();
    }
    await profiler.post('Profiler.enable');
    await profiler.post('Profiler.setSamplingInterval', { interval: 500 });
    await profiler.post('Profiler.start');
  },
  async profileStop() {
    const { profile: p } = await profiler.post('Profiler.stop');
    profiles.push(p);
  },
  profiles: () => profiles.splice(0),
};

const commands = { ...mod.commands, ...profile, memory: () => memoryAfterGc(), cpu: cpuMs };
process.on('message', async (msg) => {
  if (msg.cmd === 'exit') {
    try {
      await mod.commands?.close?.();
    } finally {
      process.exit(0);
    }
  }
  try {
    const fn = commands[msg.cmd];
    if (!fn) throw new Error(`unknown command ${msg.cmd}`);
    process.send({ id: msg.id, ok: true, result: await fn(msg.args) });
  } catch (e) {
    process.send({ id: msg.id, ok: false, error: e?.message ?? String(e), stack: e?.stack });
  }
});
process.send('ready');
