/**
 * connect: a storm of authenticated socket connections. Accepts per second and memory per
 * connection, against a raw `ws` server in the same run.
 *
 *   - `--sockets` (1000) socket.io-client sockets, each with the psession cookie of its own logged-in
 *     user (the real login flow), opened as fast as the client can with `--window` (100)
 *     handshakes in flight. An accept is the client's `connect` (the auth middleware resolved the
 *     session and the namespace connected); "settled" is the `chat:list` the server sends once
 *     it has handled the connection (one more query).
 *   - the baseline: a bare `ws` WebSocketServer (lib/raw-ws.mjs, no authentication) in a process
 *     of its own, the same number of bare `ws` clients, the same window.
 *   - a reference between the two: a bare Socket.IO server (lib/sio-bare-child.mjs: Parlor's
 *     socket.io options, no authentication, no storage) stormed by the same socket.io-client
 *     sockets as Parlor. Parlor / bare Socket.IO is what Parlor's own work costs; bare Socket.IO /
 *     raw ws is what the protocol (engine.io handshake, namespace connect, its objects) costs.
 *   - memory per connection: the server process's heap (after a full GC) and RSS with all sockets
 *     open, minus the same just before the storm, over the number of sockets. The clients run in
 *     a separate process, so none of their memory counts. RSS after the first storm partly reuses
 *     pages freed by earlier ones, so the RSS row is the first storm's; the heap row is the mean.
 *   - CPU per connection, of the server and of the clients (they share the cores) in the measured storms.
 * Parlor, bare Socket.IO and the baseline take turns (storm, measure, close all; then the next),
 * `--rounds` (3) each.
 *
 * Options: --mode, --sockets N (1000), --window N (100), --rounds N (3).
 * --duration is not used (a storm is a fixed number of sockets).
 */
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createBots, loginUsers } from './lib/accounts.mjs';
import { startChild } from './lib/child.mjs';
import { machineLine } from './lib/machine.mjs';
import { provisionStorage } from './lib/modes.mjs';
import { intOpt } from './lib/options.mjs';
import { ratio, summarize } from './lib/stats.mjs';
import { fmt, printTable } from './lib/table.mjs';

export const description = 'socket connect storm: accepts/s and memory per connection vs raw ws';
export const defaults = { duration: 10 };
export const usage = `options:
  --mode embedded|cluster|both   (both)
  --sockets N                    authenticated sockets per storm, one logged-in user each (1000)
  --window N                     handshakes in flight (100)
  --rounds N                     storms per side, in turn Parlor / bare socket.io / raw ws (3)
  --json                         also print the results as one BENCH_JSON line
(--duration is not used: a storm is a fixed number of sockets)`;

const TARGET = { accepts: 0.4, memory: 3 };
const APP_CHILD = new URL('./lib/app-child.mjs', import.meta.url);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const kib = (bytes) => (Number.isFinite(bytes) ? `${(bytes / 1024).toFixed(1)} KiB` : '—');

export async function run({ modes, options }) {
  const sockets = intOpt(options.sockets, 1000, 1, 20000);
  const window = intOpt(options.window, 100, 1, 5000);
  const rounds = intOpt(options.rounds, 3, 1, 20);
  console.log(`[connect] ${machineLine()}`);
  console.log(
    `[connect] ${sockets} sockets per storm (one user each), ${window} handshakes in flight, ${rounds} storms per side in turn Parlor / bare socket.io / raw ws; clients and the reference servers in processes of their own`,
  );
  const results = {};
  for (const mode of modes) {
    const provisioned = await provisionStorage(mode);
    if (provisioned.skipped) {
      console.log(`\n[connect] ${mode}: SKIPPED, cluster services not usable: ${provisioned.skipped}`);
      results[mode] = { skipped: provisioned.skipped };
      continue;
    }
    let app;
    let raw;
    let sio;
    let clients;
    try {
      // Users log in against a first app process; the storms run against a fresh one over the
      // same storage, so its memory holds nothing of the logins.
      app = await startChild(APP_CHILD, { name: 'app (logins)' });
      const first = await app.call('start', { mode, storage: provisioned.storage });
      const started = { mode, url: first.url, built: { publicApiKey: first.publicApiKey } };
      const botKeys = await createBots(first.url, Math.max(2, Math.ceil(sockets / 500)));
      const logged = await loginUsers(started, sockets, { botKeys, concurrency: 16 });
      const cookies = logged.users.map((u) => u.cookie);
      await app.close();
      app = await startChild(APP_CHILD, { name: 'app' });
      const fresh = await app.call('start', { mode, storage: provisioned.storage });
      console.log(
        `\n[connect] ${provisioned.label}; ${sockets} users logged in in ${logged.seconds.toFixed(1)} s; fresh app process up in ${fmt.ms(fresh.startMs)}; load ${os.loadavg()[0].toFixed(2)}`,
      );
      raw = await startChild(new URL('./lib/raw-ws-child.mjs', import.meta.url), { name: 'raw ws server' });
      sio = await startChild(new URL('./lib/sio-bare-child.mjs', import.meta.url), { name: 'bare socket.io server' });
      clients = await startChild(new URL('./lib/connect-clients.mjs', import.meta.url), { name: 'connect clients' });
      const rawUrls = await raw.call('start');
      const sioUrl = (await sio.call('start')).url;

      // BENCH_PROFILE_DIR=dir: CPU profiles of the app during Parlor's measured storms.
      const profileDir = process.env.BENCH_PROFILE_DIR;
      const storm = async (side, n, { profile = false } = {}) => {
        const server = { parlor: app, sio, raw }[side];
        const before = await server.call('memory');
        const cpuBefore = [await server.call('cpu'), await clients.call('cpu')];
        if (profile) await server.call('profileStart');
        const r = await clients.call('storm', {
          kind: side === 'raw' ? 'raw' : 'parlor',
          url: { parlor: fresh.url, sio: sioUrl, raw: rawUrls.wsUrl }[side],
          cookies,
          n,
          window,
        });
        if (profile) await server.call('profileStop');
        const cpuAfter = [await server.call('cpu'), await clients.call('cpu')];
        await sleep(300);
        const during = await server.call('memory');
        await clients.call('drop');
        if (side === 'raw') await raw.call('dropClients');
        await sleep(500);
        const cpu = { server: cpuAfter[0] - cpuBefore[0], clients: cpuAfter[1] - cpuBefore[1] };
        return { ...r, before, during, cpu };
      };
      // The first storm of each side, in fresh processes, gives the RSS figure; then a warm-up.
      const sides = ['parlor', 'sio', 'raw'];
      const parts = { parlor: [], sio: [], raw: [] };
      const firstStorms = {};
      for (const side of sides) firstStorms[side] = await storm(side, sockets);
      for (const side of sides) await storm(side, Math.min(100, sockets));
      for (let i = 0; i < rounds; i++) {
        for (const side of sides)
          parts[side].push(await storm(side, sockets, { profile: profileDir && side === 'parlor' }));
      }
      if (profileDir) {
        const file = path.join(profileDir, `connect-${mode}-parlor.json`);
        writeFileSync(file, JSON.stringify(await app.call('profiles')));
        console.log(`[connect] CPU profiles of Parlor's storms: ${file}`);
      }
      results[mode] = report(mode, provisioned.label, parts, {
        first: firstStorms,
        sockets,
        window,
      });
    } finally {
      await clients?.close();
      await sio?.close();
      await raw?.close();
      await app?.close();
      await provisioned.release();
    }
  }
  return results;
}

function summarizeSide(parts, first) {
  const connected = parts.reduce((a, p) => a + p.connected, 0);
  const elapsedS = parts.reduce((a, p) => a + p.elapsedMs, 0) / 1000;
  const acc = summarize(parts.flatMap((p) => Array.from(p.accepted)));
  const settled = parts[0].settled ? summarize(parts.flatMap((p) => Array.from(p.settled))) : null;
  const per = (p, k) => (p.during[k] - p.before[k]) / p.connected;
  const mean = (k) => parts.reduce((a, p) => a + per(p, k), 0) / parts.length;
  const failures = {};
  for (const p of [first, ...parts]) {
    for (const [k, n] of Object.entries(p.failures)) failures[k] = (failures[k] ?? 0) + n;
  }
  return {
    rounds: parts.length,
    connected,
    elapsedS,
    acceptsPerSec: connected / elapsedS,
    serverCpuPerConn: parts.reduce((a, p) => a + p.cpu.server, 0) / connected,
    clientCpuPerConn: parts.reduce((a, p) => a + p.cpu.clients, 0) / connected,
    firstAcceptsPerSec: first.connected / (first.elapsedMs / 1000),
    accept: acc,
    settled,
    settleTimeouts: parts.reduce((a, p) => a + (p.settleTimeouts ?? 0), 0),
    heapPerConn: mean('heapUsed'),
    externalPerConn: mean('external'),
    rssPerConnFirst: per(first, 'rss'),
    heapPerConnFirst: per(first, 'heapUsed'),
    rssPerConnMean: mean('rss'),
    rssBefore: first.before.rss,
    rssDuring: first.during.rss,
    failures,
  };
}

function report(mode, label, parts, { first, sockets, window }) {
  const p = summarizeSide(parts.parlor, first.parlor);
  const s = summarizeSide(parts.sio, first.sio);
  const b = summarizeSide(parts.raw, first.raw);
  const r = (x, y) => fmt.ratio(ratio(x, y));
  // One row: the three sides, then Parlor / raw (the target's ratio), Parlor / bare socket.io, bare / raw.
  const row = (name, pick, show) => [
    name,
    show(pick(p)),
    show(pick(s)),
    show(pick(b)),
    r(pick(p), pick(b)),
    r(pick(p), pick(s)),
    r(pick(s), pick(b)),
  ];
  printTable(
    `connect — ${label}`,
    ['metric', 'Parlor', 'bare socket.io', 'raw ws', 'Parlor/raw', 'Parlor/sio', 'sio/raw'],
    [
      row(`accepts/s (${sockets} sockets, ${window} in flight)`, (x) => x.acceptsPerSec, fmt.num),
      row('server CPU per connection', (x) => x.serverCpuPerConn, fmt.ms),
      row('clients CPU per connection', (x) => x.clientCpuPerConn, fmt.ms),
      row('accept latency p50', (x) => x.accept.p50, fmt.ms),
      row('accept latency p99', (x) => x.accept.p99, fmt.ms),
      row('settled (chat:list received) p50', (x) => x.settled?.p50 ?? Number.NaN, fmt.ms),
      row('heap per connection (after GC, mean)', (x) => x.heapPerConn, kib),
      row('RSS per connection (first storm)', (x) => x.rssPerConnFirst, kib),
      row('RSS per connection (later storms, mean)', (x) => x.rssPerConnMean, kib),
      [
        'connected / failed',
        `${p.connected} / ${sum(p.failures)}`,
        `${s.connected} / ${sum(s.failures)}`,
        `${b.connected} / ${sum(b.failures)}`,
        '',
        '',
        '',
      ],
    ],
  );
  console.log('');
  for (const [name, side] of [
    ['Parlor', p],
    ['bare socket.io', s],
    ['baseline', b],
  ]) {
    if (sum(side.failures)) console.log(`  ${name} connect failures: ${JSON.stringify(side.failures)}`);
    if (side.settleTimeouts) console.log(`  ${name} sockets that never got chat:list (30 s): ${side.settleTimeouts}`);
  }
  const mib = (x) => `${(x / 2 ** 20).toFixed(0)} MiB`;
  const firstLine = (name, x) =>
    `${name} ${fmt.num(x.firstAcceptsPerSec)} accepts/s, RSS ${mib(x.rssBefore)} → ${mib(x.rssDuring)}, heap ${kib(x.heapPerConnFirst)}/conn`;
  console.log(
    `  first storm (fresh processes, not in the rates above): ${firstLine('Parlor', p)}; ${firstLine('bare socket.io', s)}; ${firstLine('raw', b)}`,
  );
  console.log(
    `  load average after the mode: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  const accRatio = ratio(p.acceptsPerSec, b.acceptsPerSec);
  const memRatio = ratio(p.heapPerConn, b.heapPerConn);
  const rssRatio = ratio(p.rssPerConnFirst, b.rssPerConnFirst);
  const met = accRatio >= TARGET.accepts && memRatio <= TARGET.memory && rssRatio <= TARGET.memory;
  console.log(
    `  target (${mode}): accepts/s ≥ ${TARGET.accepts}× raw and memory per connection ≤ ${TARGET.memory}× raw (heap and first-storm RSS): ${met ? 'MET' : 'NOT MET'} (${fmt.ratio(accRatio)}; heap ${fmt.ratio(memRatio)}, RSS ${fmt.ratio(rssRatio)}) [informational; never fails the run]`,
  );
  console.log(
    `  bare socket.io against raw ws (the protocol's own share): accepts ${r(s.acceptsPerSec, b.acceptsPerSec)}, heap ${r(s.heapPerConn, b.heapPerConn)}, first-storm RSS ${r(s.rssPerConnFirst, b.rssPerConnFirst)}`,
  );
  return {
    parlor: p,
    sio: s,
    raw: b,
    acceptsRatio: accRatio,
    heapRatio: memRatio,
    rssRatio,
    sioAcceptsRatio: ratio(s.acceptsPerSec, b.acceptsPerSec),
    sioHeapRatio: ratio(s.heapPerConn, b.heapPerConn),
  };
}

const sum = (o) => Object.values(o).reduce((a, n) => a + n, 0);
