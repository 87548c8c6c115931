/** The `vm` scenario's tables and target lines (bench/vm.mjs measures, this prints). */
import os from 'node:os';
import { ratio, summarize } from './stats.mjs';
import { fmt, printTable } from './table.mjs';

const TARGET = { fps: 0.9, inputP50Ms: 100 };
const mib = (b) => `${(b / 2 ** 20).toFixed(0)} MiB`;

export function report(label, r) {
  const s = { parlor: summarize(r.parlorStarts), first: summarize(r.firstFrames), raw: summarize(r.rawStarts) };
  printTable(
    `start (${label})`,
    ['', 'Parlor', 'provider alone', 'ratio'],
    [
      [
        'start p50 (REST → 200 | provider.start)',
        fmt.ms(s.parlor.p50),
        fmt.ms(s.raw.p50),
        fmt.ratio(ratio(s.parlor.p50, s.raw.p50)),
      ],
      ['start max', fmt.ms(s.parlor.max), fmt.ms(s.raw.max), fmt.ratio(ratio(s.parlor.max, s.raw.max))],
      ['start → first frame at a viewer p50', fmt.ms(s.first.p50), '', ''],
    ],
  );
  const rows = [];
  for (const n of r.counts) {
    const f = r.fps[n];
    const l = r.latency[n];
    rows.push([
      `${n} viewer(s): fps per viewer (mean; min)`,
      `${fmt.num(f.parlor.fps)}; ${fmt.num(f.parlor.minFps)}`,
      fmt.num(f.raw.fps),
      fmt.ratio(ratio(f.parlor.fps, f.raw.fps)),
    ]);
    rows.push([
      `${n}: fps the browser produced`,
      fmt.num(f.parlor.producedFps),
      fmt.num(f.raw.producedFps),
      fmt.ratio(ratio(f.parlor.producedFps, f.raw.producedFps)),
    ]);
    rows.push([
      `${n}: MiB/s sent (all viewers)`,
      fmt.num(f.parlor.bytesPerSec / 2 ** 20),
      fmt.num(f.raw.bytesPerSec / 2 ** 20),
      '',
    ]);
    rows.push([
      `${n}: CPU browser tree / server / viewers (cores)`,
      `${f.parlor.browserCpu.toFixed(2)} / ${f.parlor.serverCpu.toFixed(2)} / ${f.parlor.clientCpu.toFixed(2)}`,
      `${f.raw.browserCpu.toFixed(2)} / ${f.raw.serverCpu.toFixed(2)} / —`,
      '',
    ]);
    rows.push([
      `${n}: input → frame p50 / p99`,
      `${fmt.ms(l.parlor.p50)} / ${fmt.ms(l.parlor.p99)}`,
      `${fmt.ms(l.raw.p50)} / ${fmt.ms(l.raw.p99)}`,
      fmt.ratio(ratio(l.parlor.p50, l.raw.p50)),
    ]);
  }
  printTable(`frames and input (${label})`, ['', 'Parlor', 'raw screencast', 'ratio'], rows);
  printTable(
    `memory per room, PSS of the browser process tree (${label})`,
    ['', 'Parlor room', 'raw browser'],
    [
      ['still page, nobody watching', mib(r.idleMemory.parlor), mib(r.idleMemory.raw)],
      [`animated, ${Math.max(...r.counts)} viewers (max seen)`, mib(r.streamingMemory), ''],
    ],
  );
  const top = Math.max(...r.counts);
  const fpsRatio = ratio(r.fps[top].parlor.fps, r.fps[top].raw.fps);
  const p50 = r.latency[top].parlor.p50;
  console.log(
    `\n[vm] target fps at ${top} viewers ≥ ${TARGET.fps}× the raw screencast: ${fmt.ratio(fpsRatio)} ${fpsRatio >= TARGET.fps ? 'MET' : 'NOT MET'}`,
  );
  console.log(
    `[vm] target input → frame p50 < ${TARGET.inputP50Ms} ms at ${top} viewers: ${fmt.ms(p50)} ${p50 < TARGET.inputP50Ms ? 'MET' : 'NOT MET'}; load ${os.loadavg()[0].toFixed(2)}`,
  );
  return { ...r, startSummary: s, fpsRatio, inputP50: p50 };
}
