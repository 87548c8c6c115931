// node bench/scratch/profile-run.mjs <scenario> <side> [args…]: CPU profile of the main thread during the measured rounds of <side>.
import { Session } from 'node:inspector/promises';
import { writeFileSync } from 'node:fs';
const [scenario, side, ...rest] = process.argv.slice(2);
const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 500 });
const bc = new BroadcastChannel('bench-phase');
let profiling = false; let chunks = [];
bc.onmessage = async ({ data }) => {
  if (data.side !== side) return;
  if (data.state === 'start' && !profiling) { profiling = true; await session.post('Profiler.start'); }
  if (data.state === 'end' && profiling) { profiling = false; const { profile } = await session.post('Profiler.stop'); chunks.push(profile); }
};
bc.unref?.();
process.argv = [process.argv[0], 'bench/run.mjs', scenario, ...rest];
process.on('exit', () => { writeFileSync(`/tmp/prof/${scenario}-${side}.json`, JSON.stringify(chunks)); });
await import('../run.mjs');
