#!/usr/bin/env node
/**
 * CPU profile of the bench's main thread (where the app runs) during the measured rounds of one
 * side only:
 *
 *   node bench/tools/profile.mjs <scenario> <side> [scenario options…]
 *   node bench/tools/profile-summary.mjs /tmp/bench-profile-<scenario>-<side>.json
 *
 * Scenarios that announce their rounds on the BroadcastChannel 'bench-phase' ({ side, state:
 * 'start'|'end' }: fanout, history, match) are sampled between start and end of every round of <side>
 * ('parlor' or 'raw'), at 0.5 ms. The profiles (one per round) are written as a JSON array when
 * the run ends. `Profiler.stop` itself shows up as a native `dispatch`: ignore it.
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const [scenario, side, ...rest] = process.argv.slice(2);
if (!scenario || !side) {
  console.error('usage: node bench/tools/profile.mjs <scenario> <parlor|raw> [options…]');
  process.exit(1);
}
const out = path.join(tmpdir(), `bench-profile-${scenario}-${side}.json`);
const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 500 });
const channel = new BroadcastChannel('bench-phase');
channel.unref?.();
let profiling = false;
const profiles = [];
channel.onmessage = async ({ data }) => {
  if (data.side !== side) return;
  if (data.state === 'start' && !profiling) {
    profiling = true;
    await session.post('Profiler.start');
  } else if (data.state === 'end' && profiling) {
    profiling = false;
    profiles.push((await session.post('Profiler.stop')).profile);
  }
};
process.on('exit', () => {
  writeFileSync(out, JSON.stringify(profiles));
  console.error(`bench/tools/profile: ${profiles.length} profile(s) of "${side}" rounds in ${out}`);
});
const runJs = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../run.mjs');
process.argv = [process.argv[0], runJs, scenario, ...rest];
await import(runJs);
