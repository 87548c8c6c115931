// node analyze.mjs file.json: self time by category over profile chunks.
import { readFileSync } from 'node:fs';
const raw = JSON.parse(readFileSync(process.argv[2], "utf8")); const chunks = Array.isArray(raw) ? raw : [raw];
const byCat = new Map(); const byFn = new Map(); let total = 0;
const cat = (url, fn) => {
  if (!url) return fn === '(idle)' ? '(idle)' : fn === '(garbage collector)' ? '(gc)' : fn.startsWith('(') ? fn : 'native/builtin';
  const m = url.match(/node_modules\/((@[^/]+\/)?[^/]+)/);
  if (m) return m[1];
  if (url.includes('packages/server/dist/')) return 'parlor:' + url.split('packages/server/dist/')[1].split('/').slice(0, 2).join('/');
  if (url.includes('/bench/')) return 'bench:' + url.split('/bench/')[1];
  if (url.startsWith('node:')) return url.split('/')[0] === 'node:internal' ? 'node:' + url.split('/')[2] : url;
  return url;
};
for (const p of chunks) {
  const nodes = new Map(p.nodes.map((n) => [n.id, n]));
  const dt = p.timeDeltas; const samples = p.samples;
  for (let i = 0; i < samples.length; i++) {
    const n = nodes.get(samples[i]); const d = dt[i] ?? 0; total += d;
    const c = cat(n.callFrame.url, n.callFrame.functionName);
    byCat.set(c, (byCat.get(c) ?? 0) + d);
    const f = `${n.callFrame.functionName || '(anon)'} ${c}`;
    byFn.set(f, (byFn.get(f) ?? 0) + d);
  }
}
const top = (m, k) => [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, k).map(([n, v]) => `${(100 * v / total).toFixed(1).padStart(5)}%  ${n}`).join('\n');
console.log(`total ${(total / 1e6).toFixed(1)} s\n--- by package\n${top(byCat, 30)}\n--- by function\n${top(byFn, 35)}`);
