/**
 * match: matchmaking. Pairs formed per second and enqueue → match:found latency with `--users`
 * (1000) searching users over `--tags` (50) interest tags, in batches of `--batch` (200), against
 * the bare coordination operation (the match queue's enqueue, in a loop) in the same run.
 *
 *   - every user is fresh (a free account holds one active direct chat, so it matches once), logs
 *     in with the real login flow from its own address, and keeps a socket open: it counts as
 *     online (POST /v1/portal/match refuses a caller who would be alone) and receives match:found.
 *   - Parlor round: a batch POSTs /v1/portal/match {interests: [tag]} with `--concurrency` (16) in
 *     flight, user j on tag j % 50: on each tag one user waits, the next pairs with it during its
 *     own request (the request creates the direct chat and sends match:found to both).
 *   - baseline round, as long as the Parlor round before it: MemoryMatchQueue.enqueue (embedded) or
 *     RedisMatchQueue.enqueue (cluster: the Lua script, over its own Redis connection, under the
 *     mode's key prefix) with synthetic entries in the same tag order, `--concurrency` in flight
 *     for Redis (the in-process queue is synchronous work, one call at a time).
 * Load generator and baseline loop run in a worker thread; the app in the main thread.
 *
 * Options: --mode, --users N (1000), --tags N (50), --batch N (200), --concurrency N (16),
 *          --pglite disk|memory. --duration is not used (the work is a fixed number of users).
 */
import os from 'node:os';
import { createBots } from './lib/accounts.mjs';
import { machineLine } from './lib/machine.mjs';
import { startModeOrSkip } from './lib/modes.mjs';
import { intOpt } from './lib/options.mjs';
import { ratio, summarize } from './lib/stats.mjs';
import { fmt, printTable } from './lib/table.mjs';
import { inWorker } from './lib/worker.mjs';

export const description = 'matchmaking pairs/s and enqueue→match:found latency vs the bare match-queue enqueue';
export const defaults = { duration: 10 };
export const usage = `options:
  --mode embedded|cluster|both   (both)
  --users N                      searching users measured, a multiple of --batch (1000); 100 more warm up
  --tags N                       interest tags (50)
  --batch N                      users per Parlor round, a multiple of 2 × tags (200)
  --concurrency N                match requests (and Redis baseline calls) in flight (16)
  --pglite disk|memory           embedded store (disk)
  --json                         also print the results as one BENCH_JSON line
(--duration is not used: the work is a fixed number of users)`;

const TARGET = 0.1;

export async function run({ modes, options }) {
  const tags = intOpt(options.tags, 50, 1, 500);
  const batch = intOpt(options.batch, 200, 2, 10_000);
  const users = intOpt(options.users, 1000, batch, 20_000);
  const concurrency = intOpt(options.concurrency, 16, 1, 256);
  const pglite = options.pglite === 'memory' ? 'memory' : 'disk';
  if (batch % (2 * tags) !== 0) throw new Error(`--batch must be a multiple of 2 × --tags (${2 * tags})`);
  if (users % batch !== 0) throw new Error('--users must be a multiple of --batch');
  const warmup = 2 * tags;
  console.log(`[match] ${machineLine()}`);
  console.log(
    `[match] ${users} users over ${tags} tags in batches of ${batch} (+${warmup} warming up), ${concurrency} requests in flight; each Parlor batch is followed by a baseline round as long as it`,
  );
  const results = {};
  for (const mode of modes) {
    const started = await startModeOrSkip('match', mode, { pglite }, results);
    if (!started) continue;
    console.log(`\n[match] ${started.label}; app up in ${fmt.ms(started.startMs)}; load ${os.loadavg()[0].toFixed(2)}`);
    try {
      const botKeys = await createBots(started.url, Math.max(2, Math.ceil((users + warmup) / 500)));
      const cfg = started.config;
      const r = await inWorker(new URL('./lib/match-load.mjs', import.meta.url), 'matchTask', {
        url: started.url,
        publicKey: started.built.publicApiKey,
        botKeys,
        mode,
        users,
        warmup,
        tags,
        batch,
        concurrency,
        loginConcurrency: 16,
        // Under the mode's prefix, so the run's cleanup removes whatever the baseline leaves.
        redis: mode === 'cluster' ? { url: cfg.redisUrl, prefix: `${cfg.redisPrefix}bench-mq:` } : null,
      });
      results[mode] = report(mode, started.label, r, { concurrency, users, tags });
    } finally {
      await started.close();
    }
  }
  return results;
}

function report(mode, label, r, { concurrency, users, tags }) {
  const P = r.parts.parlor;
  const B = r.parts.raw;
  const sum = (xs, k) => xs.reduce((a, x) => a + x[k], 0);
  const all = (xs, k) => summarize(xs.flatMap((x) => Array.from(x[k])));
  const pPairs = sum(P, 'pairs');
  const pRate = pPairs / sum(P, 'elapsedS');
  const bRate = sum(B, 'pairs') / sum(B, 'elapsedS');
  const pairing = all(P, 'pairingLat');
  const waiting = all(P, 'waitingLat');
  const answer = all(P, 'answerLat');
  const bLat = all(B, 'latencies');
  const errors = {};
  for (const p of P) for (const [k, n] of Object.entries(p.errors)) errors[k] = (errors[k] ?? 0) + n;
  const rr = ratio(pRate, bRate);
  // The app thread's CPU per pair over the Parlor rounds (both requests, the chat, the events).
  const cpuPerPair = P.every((p) => p.appCpuMs !== null) ? sum(P, 'appCpuMs') / pPairs : null;
  printTable(
    `match — ${label}`,
    ['metric', 'Parlor', 'bare enqueue', 'ratio'],
    [
      [`pairs/s (${users} users, ${tags} tags)`, fmt.num(pRate), fmt.num(bRate), fmt.ratio(rr)],
      [
        'pairing request → match:found p50',
        fmt.ms(pairing.p50),
        fmt.ms(bLat.p50),
        fmt.ratio(ratio(pairing.p50, bLat.p50)),
      ],
      [
        'pairing request → match:found p99',
        fmt.ms(pairing.p99),
        fmt.ms(bLat.p99),
        fmt.ratio(ratio(pairing.p99, bLat.p99)),
      ],
      ['waiting user: enqueue → match:found p50 / p99', `${fmt.ms(waiting.p50)} / ${fmt.ms(waiting.p99)}`, '', ''],
      ['POST /v1/portal/match answer p50 / p99', `${fmt.ms(answer.p50)} / ${fmt.ms(answer.p99)}`, '', ''],
      ['app thread CPU per pair', cpuPerPair === null ? 'n/a' : fmt.ms(cpuPerPair), '', ''],
      [
        'pairs notified / formed',
        `${sum(P, 'foundPairs')} / ${pPairs}`,
        `${sum(B, 'pairs')} of ${sum(B, 'calls')} calls`,
        '',
      ],
    ],
  );
  console.log('');
  console.log(
    `  bare enqueue column: latency of one enqueue call (${mode === 'cluster' ? `RedisMatchQueue, ${concurrency} in flight` : 'MemoryMatchQueue, one at a time'}); Parlor's pairing latency is from the pairing user's request start to its match:found`,
  );
  const missing = sum(P, 'expected') - sum(P, 'notified');
  if (missing > 0) console.log(`  match:found missing for ${missing} users (10 s after the last request)`);
  if (Object.keys(errors).length) console.log(`  Parlor refusals: ${JSON.stringify(errors)}`);
  console.log(
    `  set-up: ${users + r.warm.users} logins in ${r.loginS.toFixed(1)} s, sockets in ${r.connectS.toFixed(1)} s; ${P.length} Parlor rounds of ${P[0]?.users} users (${sum(P, 'elapsedS').toFixed(1)} s); load average after the mode: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log(
    `  target (${mode}): pairs/s ≥ ${TARGET}× the bare enqueue's: ${rr >= TARGET ? 'MET' : 'NOT MET'} (${fmt.ratio(rr)}) [informational; never fails the run]`,
  );
  return {
    pairsPerSec: pRate,
    barePairsPerSec: bRate,
    ratio: rr,
    cpuPerPair,
    pairing,
    waiting,
    answer,
    bare: bLat,
    errors,
  };
}
