#!/usr/bin/env node
/**
 * Self time by package and by function over one or more V8 CPU profiles (a .cpuprofile file, or
 * the JSON array bench/tools/profile.mjs writes):
 *
 *   node bench/tools/profile-summary.mjs <file> [top=30]
 *
 * Packages are node_modules names; Parlor's own code is `parlor:<dir>`; Node internals `node:<x>`;
 * native code without a script (socket writes, the GC, idle) is listed by its V8 name.
 */
import { readFileSync } from 'node:fs';

const file = process.argv[2];
const top = Number(process.argv[3] ?? 30);
if (!file) {
  console.error('usage: node bench/tools/profile-summary.mjs <profile.json|.cpuprofile> [top]');
  process.exit(1);
}
const parsed = JSON.parse(readFileSync(file, 'utf8'));
const profiles = Array.isArray(parsed) ? parsed : [parsed];

function category(url, fn) {
  if (!url) {
    if (fn === '(idle)' || fn === '(program)') return fn;
    if (fn === '(garbage collector)') return '(gc)';
    return 'native';
  }
  const mod = url.match(/node_modules\/((@[^/]+\/)?[^/]+)/);
  if (mod) return mod[1];
  if (url.includes('packages/server/dist/')) {
    return `parlor:${url.split('packages/server/dist/')[1].split('/').slice(0, 2).join('/')}`;
  }
  if (url.includes('/bench/')) return `bench:${url.split('/bench/')[1]}`;
  if (url.startsWith('node:internal/')) return `node:${url.split('/')[1]}`;
  return url.split('/').slice(-2).join('/');
}

const byPackage = new Map();
const byFunction = new Map();
let total = 0;
for (const p of profiles) {
  const nodes = new Map(p.nodes.map((n) => [n.id, n]));
  for (let i = 0; i < p.samples.length; i++) {
    const n = nodes.get(p.samples[i]);
    const dt = p.timeDeltas[i] ?? 0;
    total += dt;
    const cat = category(n.callFrame.url, n.callFrame.functionName);
    byPackage.set(cat, (byPackage.get(cat) ?? 0) + dt);
    const fn = `${n.callFrame.functionName || '(anonymous)'}  [${cat}]`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + dt);
  }
}
const list = (m) =>
  [...m.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([k, v]) => `${((100 * v) / total).toFixed(1).padStart(5)}%  ${k}`)
    .join('\n');
console.log(`${profiles.length} profile(s), ${(total / 1e6).toFixed(1)} s sampled\n\nby package\n${list(byPackage)}`);
console.log(`\nby function\n${list(byFunction)}`);
