/**
 * login: the web login flow and authenticated reads, against raw node:http in the same run.
 *
 *   a) full login flows per second (request → bot/login-code → verify), `--concurrency` flows at a
 *      time (16) for `--duration` seconds, capped by the bots' request budget; p50/p99 flow latency.
 *   b) GET /v1/users/me with autocannon, `--connections` (50) over the cookies of 8 users.
 * Baseline: a raw node:http server answering the same bytes the service answered (captured from one
 * real flow and one real /v1/users/me), driven by the same flow driver and the same autocannon
 * settings. Parlor and baseline are measured in alternating rounds (A B A B …, ~2.5 s each), so load
 * from elsewhere on a shared machine falls on both. Servers run in the main thread; load
 * generators in worker threads.
 *
 * Options: --mode embedded|cluster|both, --duration S (10), --concurrency N (16),
 *          --connections N (50), --pglite disk|memory (disk: the embedded store as deployed).
 */
import { createRequire } from 'node:module';
import os from 'node:os';
import { startRawServer } from './lib/baseline.mjs';
import { makeClient } from './lib/http-client.mjs';
import { autocannon, interleaved, summarizeAutocannon } from './lib/load.mjs';
import { loginFlows, loginFlowsTask, summarizeFlows } from './lib/login-flows.mjs';
import { machineLine } from './lib/machine.mjs';
import { BENCH_OPERATOR_TOKEN, startModeOrSkip } from './lib/modes.mjs';
import { intOpt } from './lib/options.mjs';
import { ratio } from './lib/stats.mjs';
import { fmt, printTable } from './lib/table.mjs';

export const description = 'login flows/s and authenticated GET /v1/users/me, vs raw node:http (same bytes)';
export const defaults = { duration: 10 };
export const usage = `options:
  --mode embedded|cluster|both   (both)
  --duration S                   seconds per side of each measured phase (10); warm-ups add a few seconds
  --concurrency N                login flows in flight at once (16)
  --connections N                autocannon connections for GET /v1/users/me (50)
  --pglite disk|memory           embedded store: a temp dir as deployed (disk), or in memory
  --json                         also print the results as one BENCH_JSON line`;

/** Whether geoip-lite (about 100 MB, loaded by the first login from a public address) is already in. */
const geoLoaded = () => Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes('/geoip-lite/'));

/** The target: authenticated reads at least this fraction of the raw baseline's rps. */
const READ_TARGET = 0.5;
/** Each bot key may make 600 requests a minute (Limits.BOT_REQUESTS_PER_MINUTE); spread over many. */
const BOTS = 32;
const BOT_PER_MINUTE = 600;
const READ_USERS = 8;
const WARMUP_S = 2;
/** Parlor and the baseline are measured in alternating rounds of about this many seconds. */
const ROUND_S = 2.5;

export async function run({ modes, duration, options }) {
  const concurrency = intOpt(options.concurrency, 16, 1, 256);
  const connections = intOpt(options.connections, 50, 1, 1000);
  const pglite = options.pglite === 'memory' ? 'memory' : 'disk';
  console.log(`[login] ${machineLine()}`);
  console.log(
    `[login] flows: ${concurrency} concurrent, ${duration} s; reads: autocannon ${connections} connections, ${duration} s, ${READ_USERS} users. Parlor and baseline alternate in rounds of ~${ROUND_S} s (same total each) after short warm-ups`,
  );
  const results = {};
  for (const mode of modes) {
    const started = await startModeOrSkip('login', mode, { pglite }, results);
    if (!started) continue;
    const load = os.loadavg()[0].toFixed(2);
    console.log(`\n[login] ${started.label}; app up in ${fmt.ms(started.startMs)} at ${started.url}; load ${load}`);
    try {
      const r = await measure(started, { duration, concurrency, connections });
      report(mode, started.label, r, { duration, concurrency, connections });
      results[mode] = r;
    } finally {
      await started.close();
    }
  }
  return results;
}

async function measure(started, { duration, concurrency, connections }) {
  const { url } = started;
  const publicKey = started.built.publicApiKey;

  // Bots: the login-code call is authenticated by an Official bot's key (other types get 403),
  // limited to 600/min per bot.
  const op = makeClient(url);
  const botKeys = [];
  for (let b = 0; b < BOTS; b++) {
    const res = await op.post(
      '/v1/admin/bots/create',
      { name: `bench bot ${b}`, type: 'official', rate_limit_per_hour: 1_000_000 },
      { headers: { authorization: `Bearer ${BENCH_OPERATOR_TOKEN}` } },
    );
    if (res.status !== 200) throw new Error(`bot create answered ${res.status}: ${res.text()}`);
    botKeys.push(JSON.parse(res.text()).api_key);
  }
  let botCalls = 0;
  const budget = () => Math.max(0, BOTS * BOT_PER_MINUTE - botCalls - BOTS); // keep a margin
  const flowOpts = { url, publicKey, botKeys, concurrency, idPrefix: `bench-${started.mode}-` };
  let nextIndex = 0;

  // Cold: the very first login (first public address loads the geo database), in this thread.
  const geoWasLoaded = geoLoaded();
  const cold = await loginFlowsTask({ ...flowOpts, concurrency: 1, maxFlows: 1, capture: true, firstIndex: 0 });
  if (cold.completed !== 1) throw new Error(`the first login failed: ${JSON.stringify(cold.failures)}`);
  botCalls += cold.started;
  nextIndex = cold.nextIndex;

  const warm = await loginFlows({
    ...flowOpts,
    durationMs: WARMUP_S * 1000,
    maxFlows: budget(),
    firstIndex: nextIndex,
    keepCookies: READ_USERS,
  });
  botCalls += warm.started;
  nextIndex = warm.nextIndex;
  if (warm.cookies.length < READ_USERS) throw new Error(`warm-up logins failed: ${JSON.stringify(warm.failures)}`);

  // One real answer of GET /v1/users/me, for the baseline's bytes.
  const me = await op.get('/v1/users/me', { headers: { cookie: `psession=${warm.cookies[0]}` } });
  if (me.status !== 200) throw new Error(`GET /v1/users/me answered ${me.status}: ${me.text()}`);
  op.close();

  // Baseline: the same bytes from raw node:http, up for the whole measurement.
  const cap = cold.captured;
  const raw = await startRawServer({
    'POST /v1/authentication/request': { body: cap.request },
    'POST /v1/authentication/bot/login-code': { body: cap.loginCode },
    'POST /v1/authentication/verify': { body: cap.verify, headers: { 'set-cookie': cap.verifySetCookie } },
    'GET /v1/users/me': { body: me.raw, headers: { 'content-type': me.headers['content-type'] } },
  });
  const target = { parlor: url, raw: raw.url };
  const reads = (side) => ({
    url: target[side],
    connections,
    requests: warm.cookies.map((c) => ({ method: 'GET', path: '/v1/users/me', headers: { cookie: `psession=${c}` } })),
  });

  let flowParts;
  let readParts;
  try {
    // a) flows, Parlor and baseline in alternating rounds.
    await loginFlows({ ...flowOpts, url: raw.url, durationMs: 1000 });
    flowParts = await interleaved(['parlor', 'raw'], duration, ROUND_S, async (side, seconds) => {
      if (side === 'raw') return loginFlows({ ...flowOpts, url: raw.url, durationMs: seconds * 1000 });
      const part = await loginFlows({
        ...flowOpts,
        durationMs: seconds * 1000,
        maxFlows: budget(),
        firstIndex: nextIndex,
      });
      botCalls += part.started;
      nextIndex = part.nextIndex;
      return part;
    });
    // b) authenticated reads, the same way.
    await autocannon({ ...reads('parlor'), duration: 1 });
    await autocannon({ ...reads('raw'), duration: 1 });
    // Measured read rounds are announced on the 'bench-phase' channel (for bench/tools/profile.mjs).
    const phase = new BroadcastChannel('bench-phase');
    try {
      readParts = await interleaved(['parlor', 'raw'], duration, ROUND_S, async (side, seconds) => {
        phase.postMessage({ side, state: 'start' });
        try {
          return await autocannon({ ...reads(side), duration: seconds });
        } finally {
          phase.postMessage({ side, state: 'end' });
        }
      });
    } finally {
      phase.close();
    }
  } finally {
    await raw.close();
  }

  const flows = summarizeFlows(flowParts.parlor);
  const baseFlows = summarizeFlows(flowParts.raw);
  const projectReads = summarizeAutocannon(readParts.parlor);
  const baseReads = summarizeAutocannon(readParts.raw);
  return {
    coldLoginMs: cold.samples.flow[0],
    coldLoadedGeo: !geoWasLoaded && geoLoaded(),
    meBodyBytes: me.raw.length,
    flowCap: { bots: BOTS, perBotPerMinute: BOT_PER_MINUTE },
    flows,
    baselineFlows: baseFlows,
    reads: projectReads,
    baselineReads: baseReads,
    readRatio: ratio(projectReads.rps, baseReads.rps),
    readTargetMet: ratio(projectReads.rps, baseReads.rps) >= READ_TARGET,
  };
}

function report(mode, label, r, { duration, concurrency, connections }) {
  const f = r.flows;
  const bf = r.baselineFlows;
  const p = r.reads;
  const b = r.baselineReads;
  const errs = (x) => `${x.failed ?? x.non2xx + x.errors}`;
  printTable(
    `login — ${label}`,
    ['metric', 'Parlor', 'raw node:http', 'ratio'],
    [
      [
        `login flows/s (${concurrency} concurrent)`,
        fmt.num(f.flowsPerSec),
        fmt.num(bf.flowsPerSec),
        fmt.ratio(ratio(f.flowsPerSec, bf.flowsPerSec)),
      ],
      [
        'flow latency p50',
        fmt.ms(f.latency.p50),
        fmt.ms(bf.latency.p50),
        fmt.ratio(ratio(f.latency.p50, bf.latency.p50)),
      ],
      [
        'flow latency p99',
        fmt.ms(f.latency.p99),
        fmt.ms(bf.latency.p99),
        fmt.ratio(ratio(f.latency.p99, bf.latency.p99)),
      ],
      ['flows completed / failed', `${f.completed} / ${errs(f)}`, `${bf.completed} / ${errs(bf)}`, ''],
      [`GET /v1/users/me req/s (${connections} conns)`, fmt.num(p.rps), fmt.num(b.rps), fmt.ratio(r.readRatio)],
      ['GET /v1/users/me latency p50', fmt.ms(p.p50), fmt.ms(b.p50), fmt.ratio(ratio(p.p50, b.p50))],
      ['GET /v1/users/me latency p99', fmt.ms(p.p99), fmt.ms(b.p99), fmt.ratio(ratio(p.p99, b.p99))],
      ['reads 2xx / non-2xx+errors', `${p.ok} / ${errs(p)}`, `${b.ok} / ${errs(b)}`, ''],
    ],
  );
  const s = f.steps;
  console.log(
    `\n  flow steps p50 / p99: request ${fmt.ms(s.request.p50)} / ${fmt.ms(s.request.p99)}, login-code ${fmt.ms(s.loginCode.p50)} / ${fmt.ms(s.loginCode.p99)}, verify ${fmt.ms(s.verify.p50)} / ${fmt.ms(s.verify.p99)}`,
  );
  const geo = r.coldLoadedGeo ? 'includes loading geoip-lite' : 'geoip-lite already loaded in this process';
  console.log(`  first login after start: ${fmt.ms(r.coldLoginMs)} (${geo}); /v1/users/me body ${r.meBodyBytes} bytes`);
  const capNote = f.stoppedBy === 'count' ? ' (reached: the flow phase stopped early)' : '';
  console.log(
    `  bot budget: ${r.flowCap.bots} bots × ${r.flowCap.perBotPerMinute} login-code calls/min${capNote}; flows stopped by ${f.stoppedBy} after ${f.elapsedS.toFixed(1)} s`,
  );
  if (f.failed) console.log(`  flow failures: ${JSON.stringify(f.failures)}`);
  if (bf.failed) console.log(`  baseline flow failures: ${JSON.stringify(bf.failures)}`);
  for (const [who, x] of [
    ['Parlor', p],
    ['baseline', b],
  ]) {
    if (x.non2xx || x.errors) {
      console.log(
        `  ${who} reads: status codes ${JSON.stringify(x.statusCodes)}, errors ${x.errors} (of which timeouts ${x.timeouts})`,
      );
    }
  }
  console.log(
    `  load average after the mode: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} (other work on the machine skews absolute figures)`,
  );
  console.log(
    `  target (${mode}): authenticated reads ≥ ${READ_TARGET}× raw baseline req/s: ${r.readTargetMet ? 'MET' : 'NOT MET'} (${fmt.ratio(r.readRatio)}) [informational; never fails the run]`,
  );
  void duration;
}
