import { startMode } from '../lib/modes.mjs';
import { createBots, loginUsers } from '../lib/accounts.mjs';
import { connectSio } from '../lib/sio-client.mjs';
import { summarize } from '../lib/stats.mjs';
const mode = process.argv[2] ?? 'cluster';
const N = Number(process.argv[3] ?? 200);
const W = Number(process.argv[4] ?? 100);
const started = await startMode(mode);
try {
  const bots = await createBots(started.url, 2);
  const { users } = await loginUsers(started, N, { botKeys: bots });
  for (const w of [W, W, W]) {
    const lat = []; const socks = [];
    let next = 0; const t0 = performance.now();
    await Promise.all(Array.from({ length: w }, async () => { while (next < N) { const i = next++; const t = performance.now(); const s = await connectSio(started.url, users[i].cookie); lat.push(performance.now() - t); socks.push(s); if (socks.length % 200 === 0) process.stdout.write(` ${socks.length}@${(performance.now()-t0).toFixed(0)}`); } }));
    const el = performance.now() - t0;
    console.log(`window ${w}: ${N} in ${el.toFixed(0)} ms = ${(N / el * 1000).toFixed(0)}/s`, summarize(lat));
    for (const s of socks) s.disconnect();
    await new Promise((r) => setTimeout(r, 500));
  }
} finally { await started.close(); }
