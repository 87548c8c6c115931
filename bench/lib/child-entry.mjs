import { memoryAfterGc } from './child.mjs';

const mod = await import(process.argv[2]);
const commands = { ...mod.commands, memory: () => memoryAfterGc() };
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
