/**
 * fanout: one chat, N members on sockets, senders posting encrypted messages over HTTP; delivered
 * messages per second (message:new received by members) and send→receive latency, against a raw
 * `ws` broadcast server in the same run.
 *
 * Per mode, one worker thread holds every client (lib/fanout-load.mjs):
 *   - `--senders` users (1000) log in, register an X25519 key, join the chat and drop their socket
 *     (they stay members); the first, made Admin with the operator token, created the chat and keys
 *     the epoch for all of them in one share. Sends are `POST /v1/portal/chats/{id}/messages` with
 *     content from the SDK's encryptMessage, `--concurrency` (16) in flight. Parlor allows 20
 *     messages per 10 s per user and chat, so each sender sends at most once per 550 ms, which caps
 *     Parlor's offered rate at senders × 1.8 msg/s (1,800 msg/s by default, above what the raw side
 *     reaches here, so the limit does not bind); the output says when that cap was reached.
 *   - the room grows through `--sizes` (10,100,1000): fresh users log in (the real login flow)
 *     and join on socket.io-client; every member receives every message:new.
 *   - the baseline: raw node:http + `ws` (lib/raw-ws.mjs), same number of clients, same send loops
 *     (no pacing: it has no limits), broadcasting the same message object encoded once.
 * Parlor and the baseline alternate in rounds (~2 s each). A round sends for its time, then waits
 * until every member got every message (5 s at most; the rest counts as missing).
 *
 * Options: --mode, --duration S (4 per side; sizes ≥ 1000 use half), --sizes, --senders,
 *          --concurrency, --join-budget S (45 per mode), --pglite disk|memory.
 */
import os from 'node:os';
import { createBots } from './lib/accounts.mjs';
import { machineLine } from './lib/machine.mjs';
import { startModeOrSkip } from './lib/modes.mjs';
import { intOpt } from './lib/options.mjs';
import { startRawWs } from './lib/raw-ws.mjs';
import { ratio, summarize } from './lib/stats.mjs';
import { fmt, printTable } from './lib/table.mjs';
import { inWorker } from './lib/worker.mjs';

export const description =
  'message fan-out to N members on sockets (deliveries/s, send→receive p50/p99) vs raw ws broadcast';
export const defaults = { duration: 4 };
export const usage = `options:
  --mode embedded|cluster|both   (both)
  --duration S                   seconds per side at each size (4); sizes >= 1000 get half
  --sizes a,b,c                  members on sockets (10,100,1000)
  --senders N                    sending users (1000); Parlor caps each at 20 messages / 10 s
  --concurrency N                sends in flight (16)
  --join-budget S                seconds per mode for growing the room (45); past it, the largest size reached is measured
  --pglite disk|memory           embedded store (disk)
  --json                         also print the results as one BENCH_JSON line`;

const TARGET = { members: 100, deliveries: 0.7, p99: 2 };
const ROUND_S = 2;

export async function run({ modes, duration, options }) {
  const sizes = String(options.sizes ?? '10,100,1000')
    .split(',')
    .map((s) => intOpt(s.trim(), 0, 1, 5000))
    .sort((a, b) => a - b);
  const senders = intOpt(options.senders, 1000, 1, 5000);
  const concurrency = intOpt(options.concurrency, 16, 1, 256);
  const joinBudgetS = intOpt(options['join-budget'], 45, 1, 3600);
  const pglite = options.pglite === 'memory' ? 'memory' : 'disk';
  console.log(`[fanout] ${machineLine()}`);
  console.log(
    `[fanout] sizes ${sizes.join(', ')}; ${senders} senders, ${concurrency} sends in flight; ${duration} s per side per size (${duration / 2} s from 1000 members), rounds of ~${ROUND_S} s alternating Parlor / raw ws; room growth budget ${joinBudgetS} s per mode`,
  );
  const results = {};
  for (const mode of modes) {
    const started = await startModeOrSkip('fanout', mode, { pglite }, results);
    if (!started) continue;
    console.log(
      `\n[fanout] ${started.label}; app up in ${fmt.ms(started.startMs)}; load ${os.loadavg()[0].toFixed(2)}`,
    );
    const raw = await startRawWs();
    try {
      const maxLogins = senders + sizes[sizes.length - 1];
      const botKeys = await createBots(started.url, Math.max(4, Math.ceil(maxLogins / 300)));
      const r = await inWorker(new URL('./lib/fanout-load.mjs', import.meta.url), 'fanoutTask', {
        url: started.url,
        rawUrl: raw.url,
        rawWsUrl: raw.wsUrl,
        publicKey: started.built.publicApiKey,
        botKeys,
        mode,
        sizes,
        senders,
        concurrency,
        durationS: duration,
        bigDurationS: duration / 2,
        bigFrom: 1000,
        roundS: ROUND_S,
        joinConcurrency: 16,
        joinBudgetS,
        loginConcurrency: 16,
      });
      results[mode] = report(mode, started.label, r, { senders, concurrency });
    } finally {
      await raw.close();
      await started.close();
    }
  }
  return results;
}

function summarizeSide(parts) {
  const sum = (k) => parts.reduce((a, p) => a + p[k], 0);
  const lat = summarize(parts.flatMap((p) => Array.from(p.latencies)));
  const errors = {};
  for (const p of parts) for (const [k, n] of Object.entries(p.errors)) errors[k] = (errors[k] ?? 0) + n;
  return {
    rounds: parts.length,
    deliveriesPerSec: sum('delivered') / sum('elapsedS'),
    messagesPerSec: sum('sent') / sum('sendS'),
    sent: sum('sent'),
    delivered: sum('delivered'),
    expected: sum('expected'),
    capWaitS: sum('capWaitMs') / 1000,
    sendS: sum('sendS'),
    errors,
    p50: lat.p50,
    p99: lat.p99,
    max: lat.max,
  };
}

function report(mode, label, r, { senders, concurrency }) {
  const rows = [];
  const out = { chatId: r.chatId, setup: r.setup, sizes: [] };
  for (const s of r.results) {
    if (!s.parts) {
      out.sizes.push({ size: s.size, members: s.members, reached: false, skipped: s.skipped });
      continue;
    }
    const p = summarizeSide(s.parts.parlor);
    const b = summarizeSide(s.parts.raw);
    const m = `${s.members}${s.reached ? '' : ` (of ${s.size})`}`;
    rows.push(
      [
        `${m}: deliveries/s`,
        fmt.num(p.deliveriesPerSec),
        fmt.num(b.deliveriesPerSec),
        fmt.ratio(ratio(p.deliveriesPerSec, b.deliveriesPerSec)),
      ],
      [
        `${m}: messages/s sent`,
        fmt.num(p.messagesPerSec),
        fmt.num(b.messagesPerSec),
        fmt.ratio(ratio(p.messagesPerSec, b.messagesPerSec)),
      ],
      [`${m}: send→receive p50`, fmt.ms(p.p50), fmt.ms(b.p50), fmt.ratio(ratio(p.p50, b.p50))],
      [`${m}: send→receive p99`, fmt.ms(p.p99), fmt.ms(b.p99), fmt.ratio(ratio(p.p99, b.p99))],
      [`${m}: delivered / expected`, `${p.delivered} / ${p.expected}`, `${b.delivered} / ${b.expected}`, ''],
    );
    out.sizes.push({
      size: s.size,
      members: s.members,
      reached: s.reached,
      seconds: s.seconds,
      growS: s.grow.seconds,
      presenceBytes: s.grow.presenceBytes,
      parlor: p,
      raw: b,
      deliveriesRatio: ratio(p.deliveriesPerSec, b.deliveriesPerSec),
      p99Ratio: ratio(p.p99, b.p99),
    });
  }
  printTable(`fanout — ${label}`, ['members: metric', 'Parlor', 'raw ws', 'ratio'], rows);
  console.log('');
  for (const s of out.sizes) {
    if (!s.parlor) {
      console.log(`  ${s.size} members: not measured (${s.skipped}; ${s.members} on sockets)`);
      continue;
    }
    const p = s.parlor;
    const cap = senders * (1000 / 550);
    const capNote =
      p.capWaitS > 0.05 * p.sendS * concurrency
        ? `REACHED (send loops waited ${p.capWaitS.toFixed(1)} s for a sender under its limit)`
        : `not reached (send loops waited ${p.capWaitS.toFixed(2)} s)`;
    const errs = Object.keys(p.errors).length ? `; Parlor send errors ${JSON.stringify(p.errors)}` : '';
    const rawErrs = Object.keys(s.raw.errors).length ? `; baseline errors ${JSON.stringify(s.raw.errors)}` : '';
    console.log(
      `  ${s.members} members: room grown in ${s.growS.toFixed(1)} s, presence traffic ${(s.presenceBytes / 1e6).toFixed(1)} MB; ${s.seconds} s per side; Parlor rate cap ${cap.toFixed(0)} msg/s ${capNote}${errs}${rawErrs}`,
    );
  }
  const big = r.results.find((x) => !x.reached);
  if (big) {
    const largest = Math.max(...r.results.map((x) => x.members));
    console.log(
      `  ${big.size} members NOT reached within the growth budget: ${largest} was the largest. Raise --join-budget to go further.`,
    );
  }
  console.log(
    `  set-up: ${r.setup.logins} logins in ${r.setup.loginS.toFixed(1)} s, joins ${r.setup.joinS.toFixed(1)} s; presence events ignored by the clients: ${r.presence.packets} (${(r.presence.bytes / 1e6).toFixed(0)} MB); teardown ${fmt.ms(r.teardownMs)}`,
  );
  console.log(
    `  load average after the mode: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  const t = out.sizes.find((s) => s.members === TARGET.members && s.parlor);
  if (t) {
    const met = t.deliveriesRatio >= TARGET.deliveries && t.p99Ratio <= TARGET.p99;
    console.log(
      `  target (${mode}, ${TARGET.members} members): deliveries/s ≥ ${TARGET.deliveries}× raw and p99 ≤ ${TARGET.p99}× raw p99: ${met ? 'MET' : 'NOT MET'} (${fmt.ratio(t.deliveriesRatio)}, p99 ${fmt.ratio(t.p99Ratio)}) [informational; never fails the run]`,
    );
  }
  return out;
}
