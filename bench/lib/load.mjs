import { assertLoopback } from './http-client.mjs';
import { summarize } from './stats.mjs';
import { inWorker } from './worker.mjs';

/**
 * One autocannon run in a worker thread. `opts` are autocannon's (url, connections, duration,
 * requests…). Resolves with the raw part: counts and the 2xx latencies (Float64Array, ms).
 * Summarise one or several parts (interleaved rounds) with summarizeAutocannon().
 *
 * Latencies come from autocannon's per-response event (float ms), not its histogram: that one
 * keeps whole milliseconds, too coarse for a baseline answering in well under 1 ms. (Inside a
 * worker thread autocannon also skips its own aggregation, so this is the only source anyway.)
 */
export function autocannon(opts) {
  assertLoopback(new URL(opts.url).hostname);
  return inWorker(import.meta.url, 'autocannonTask', opts);
}

/** Worker side of autocannon(); exported only for the worker. */
export async function autocannonTask(opts) {
  const { default: run } = await import('autocannon');
  const latencies = [];
  const r = await new Promise((resolve, reject) => {
    const instance = run({ pipelining: 1, ...opts }, (err, res) => (err ? reject(err) : resolve(res)));
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      if (statusCode >= 200 && statusCode < 300) latencies.push(responseTime);
    });
  });
  return {
    durationS: r.duration,
    total: r.totalCompletedRequests,
    ok: r['2xx'] ?? 0,
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    statusCodes: r.statusCodeStats,
    latencies: Float64Array.from(latencies),
  };
}

/**
 * Adds up autocannon parts: rps = 2xx answers / summed duration; errors include timeouts
 * (autocannon counts a timeout as both); latency percentiles over all 2xx answers.
 */
export function summarizeAutocannon(parts) {
  const sum = (k) => parts.reduce((a, p) => a + p[k], 0);
  const durationS = sum('durationS');
  const ok = sum('ok');
  const statusCodes = {};
  for (const p of parts) {
    for (const [code, { count }] of Object.entries(p.statusCodes ?? {})) {
      statusCodes[code] = (statusCodes[code] ?? 0) + count;
    }
  }
  const lat = summarize(parts.flatMap((p) => Array.from(p.latencies)));
  return {
    rounds: parts.length,
    durationS,
    total: sum('total'),
    ok,
    rps: ok / durationS,
    non2xx: sum('non2xx'),
    errors: sum('errors'),
    timeouts: sum('timeouts'),
    statusCodes,
    p50: lat.p50,
    p90: lat.p90,
    p99: lat.p99,
    max: lat.max,
    mean: lat.mean,
  };
}

/**
 * Measures two sides in alternating rounds (A B A B …) of `roundS` seconds until each side has had
 * `totalS`, so a burst of other work on a shared machine hits both sides alike and their ratio
 * holds better than two back-to-back runs. `measure(side, seconds, round)` returns one part.
 */
export async function interleaved(sides, totalS, roundS, measure) {
  const rounds = Math.max(1, Math.round(totalS / roundS));
  const per = totalS / rounds;
  const parts = Object.fromEntries(sides.map((s) => [s, []]));
  for (let i = 0; i < rounds; i++) {
    for (const s of sides) parts[s].push(await measure(s, per, i));
  }
  return parts;
}
