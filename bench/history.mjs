/**
 * history: `GET /v1/portal/chats/{id}/messages` pages per second with autocannon, against the same
 * SQL query run directly on the same database, in a loop, in the same run.
 *
 *   - set-up: an Admin creates a public chat; `--readers` (8) users log in and join it on a socket
 *     (members read; Admins would skip the membership query). `--messages` (5000) messages are
 *     inserted with one SQL statement through the app's own database handle (the HTTP send path
 *     allows 20 messages per 10 s per user): ids `<ms>-0` one second apart, content real ciphertext
 *     bundles of a ~100-character message (the SDK's encryptMessage), the chat's id counter moved
 *     past them.
 *   - Parlor: autocannon, `--connections` (50), cycling through 64 requests: the readers' cookies ×
 *     32 `before` cursors spread over the history (and the newest page), `limit` 50 (the default).
 *   - baseline: the page query alone (the chat's messages before the cursor as the row comparison
 *     `(ms, seq) < (…)`, newest first; the store's statement also checks the reader's right and
 *     shapes the rows, which is Parlor's cost), built by drizzle from the app's schema
 *     (`toSQL()`, the exact text and parameters), sent straight to the driver the way the app's
 *     statements go (postgres.js `unsafe(text, params, { prepare: true }).values()`: prepared,
 *     platform/db/prepared.ts; PGlite `query` in array row mode), same cursors, same limit,
 *     `--connections` loops at once, on the app's own connection (pool) and in the app's thread.
 *     Rows are fetched and dropped: no JSON.
 * Parlor and the baseline alternate in rounds of ~2.5 s after 1 s warm-ups.
 *
 * Options: --mode, --duration S (8 per side), --messages N, --readers N, --connections N,
 *          --pglite disk|memory.
 */
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { and, desc, eq, sql } from 'drizzle-orm';
import { createBots, loginUsers, setLevel, userClient } from './lib/accounts.mjs';
import { autocannon, interleaved, summarizeAutocannon } from './lib/load.mjs';
import { machineLine } from './lib/machine.mjs';
import { startModeOrSkip } from './lib/modes.mjs';
import { intOpt } from './lib/options.mjs';
import { encryptMessage, generateChatKey } from './lib/sdk.mjs';
import { connectSio } from './lib/sio-client.mjs';
import { ratio, summarize } from './lib/stats.mjs';
import { fmt, printTable } from './lib/table.mjs';

export const description = 'GET chat messages pages/s (autocannon) vs the same SQL page query run directly';
export const defaults = { duration: 8 };
export const usage = `options:
  --mode embedded|cluster|both   (both)
  --duration S                   seconds per side (8), in alternating rounds of ~2.5 s
  --messages N                   messages in the chat (5000)
  --readers N                    reading users, members of the chat (8)
  --connections N                autocannon connections, and raw query loops (50)
  --pglite disk|memory           embedded store (disk)
  --json                         also print the results as one BENCH_JSON line`;

const TARGET = 0.7;
const ROUND_S = 2.5;
const PAGE = 50;
const CURSORS = 32;
const here = path.dirname(fileURLToPath(import.meta.url));

export async function run({ modes, duration, options }) {
  const messages = intOpt(options.messages, 5000, 100, 1_000_000);
  const readers = intOpt(options.readers, 8, 1, 200);
  const connections = intOpt(options.connections, 50, 1, 1000);
  const pglite = options.pglite === 'memory' ? 'memory' : 'disk';
  console.log(`[history] ${machineLine()}`);
  console.log(
    `[history] ${messages} messages, pages of ${PAGE} at ${CURSORS} cursors + the newest; ${readers} readers; ${connections} connections / query loops; ${duration} s per side in rounds of ~${ROUND_S} s`,
  );
  const schema = await import(pathToFileURL(path.resolve(here, '../packages/server/dist/platform/db/schema.js')).href);
  const results = {};
  for (const mode of modes) {
    const started = await startModeOrSkip('history', mode, { pglite }, results);
    if (!started) continue;
    console.log(
      `\n[history] ${started.label}; app up in ${fmt.ms(started.startMs)}; load ${os.loadavg()[0].toFixed(2)}`,
    );
    try {
      const r = await measure(started, schema, { duration, messages, readers, connections });
      results[mode] = report(mode, started.label, r, { connections });
    } finally {
      await started.close();
    }
  }
  return results;
}

async function measure(started, schema, { duration, messages: count, readers, connections }) {
  const { url } = started;
  const db = started.built.database.db;
  const t0 = performance.now();
  const botKeys = await createBots(url, 1);
  const { users } = await loginUsers(started, readers + 1, { botKeys, concurrency: 8 });
  const adminUser = users[0];
  const admin = userClient(url, adminUser);
  const me = await admin.ok('GET', '/v1/users/me');
  const adminId = me.user?.id ?? me.id;
  await setLevel(url, adminId, 2);
  const chatId = (await admin.ok('POST', '/v1/portal/chats/create', { name: 'history', type: 'public' })).chat.id;
  admin.close();
  const readerUsers = users.slice(1);
  for (const u of readerUsers) {
    const s = await connectSio(url, u.cookie);
    const ack = await s.emitWithAck('room:join', { chat_id: chatId });
    if (!ack.ok) throw new Error(`join: ${JSON.stringify(ack)}`);
    s.close();
  }

  // The history: one INSERT … SELECT through the app's database handle.
  const chatKey = generateChatKey();
  const bundles = Array.from({ length: 8 }, (_, i) =>
    encryptMessage({
      chatKey,
      chatId,
      epoch: 1,
      plaintext: `history message ${i} ${'lorem ipsum dolor sit amet '.repeat(4)}`.slice(0, 100),
    }),
  );
  for (const b of bundles) if (b.includes("'")) throw new Error('unexpected quote in a bundle');
  const ms0 = Date.now() - count * 1000 - 60_000;
  const tf = performance.now();
  const lits = bundles.map((b) => `'${b}'`).join(',');
  await db.execute(
    sql.raw(
      `insert into messages (chat_id, ms, seq, type, sender_id, content, system, created_at)
       select ${chatId}, ${ms0} + i * 1000, 0, 'user', ${adminId}, (array[${lits}])[1 + i % 8], null,
              to_timestamp((${ms0} + i * 1000) / 1000.0)
       from generate_series(0, ${count - 1}) as i`,
    ),
  );
  const lastMs = ms0 + (count - 1) * 1000;
  await db.execute(sql.raw(`update chats set msg_ms = ${lastMs}, msg_seq = 0 where id = ${chatId}`));
  // Statistics as autovacuum would have them on a live table (a fresh one has none).
  await db.execute(sql.raw('analyze messages'));
  const fillMs = performance.now() - tf;

  // Cursors spread over the history, and the newest page.
  const cursors = [null];
  for (let k = 0; k < CURSORS; k++) {
    const pos = PAGE + Math.floor(((count - PAGE) * (k + 0.5)) / CURSORS);
    cursors.push({ ms: ms0 + pos * 1000, seq: 0 });
  }
  const base = `/v1/portal/chats/${chatId}/messages`;
  const requests = Array.from({ length: 64 }, (_, k) => {
    const c = cursors[k % cursors.length];
    const u = readerUsers[k % readerUsers.length];
    return {
      method: 'GET',
      path: c ? `${base}?before=${c.ms}-${c.seq}&limit=${PAGE}` : `${base}?limit=${PAGE}`,
      headers: { cookie: `psession=${u.cookie}`, 'x-forwarded-for': u.ip },
    };
  });

  // The store's query, exactly: drizzle builds it, the driver runs it.
  const { messages: m } = schema;
  const queries = cursors.map((before) => {
    // The same row comparison as the store's page (the (chat_id, ms, seq) key bounds the scan).
    const cursor = before ? sql`(${m.ms}, ${m.seq}) < (${before.ms}, ${before.seq})` : undefined;
    return db
      .select()
      .from(m)
      .where(and(eq(m.chatId, chatId), cursor))
      .orderBy(desc(m.ms), desc(m.seq))
      .limit(PAGE)
      .toSQL();
  });
  const client = db.$client;
  const kind = started.built.database.kind;
  const runQuery =
    kind === 'postgres'
      ? (q) => client.unsafe(q.sql, q.params, { prepare: true }).values()
      : (q) => client.query(q.sql, q.params, { rowMode: 'array' });
  // Check once that both give the same page.
  const sample = await runQuery(queries[1]);
  const rows = kind === 'postgres' ? sample : sample.rows;
  const probe = userClient(url, readerUsers[0]);
  const viaHttp = await probe.ok('GET', requests[1].path);
  probe.close();
  if (rows.length !== PAGE || viaHttp.messages.length !== PAGE) {
    throw new Error(`page sizes differ: SQL ${rows.length}, HTTP ${viaHttp.messages.length}`);
  }
  const pageBytes = JSON.stringify(viaHttp).length;
  // How the database runs a page near the newest messages and the oldest page (EXPLAIN ANALYZE).
  const explain = async (q) => {
    const text = `explain (analyze, format json) ${q.sql}`;
    const res = await (kind === 'postgres'
      ? client.unsafe(text, q.params, { prepare: false })
      : client.query(text, q.params));
    const cell = (kind === 'postgres' ? res[0] : res.rows[0])['QUERY PLAN'];
    return planLine((typeof cell === 'string' ? JSON.parse(cell) : cell)[0].Plan);
  };
  const plans = {
    newest: await explain(queries[queries.length - 1]),
    middle: await explain(queries[1 + CURSORS / 2]),
    oldest: await explain(queries[1]),
  };

  const sqlLoop = async (seconds) => {
    const lat = [];
    let done = 0;
    let errors = 0;
    let turn = 0;
    const start = performance.now();
    const deadline = start + seconds * 1000;
    await Promise.all(
      Array.from({ length: connections }, async () => {
        while (performance.now() < deadline) {
          const q = queries[turn++ % queries.length];
          const t = performance.now();
          try {
            await runQuery(q);
            lat.push(performance.now() - t);
            done++;
          } catch {
            errors++;
          }
        }
      }),
    );
    return { durationS: (performance.now() - start) / 1000, done, errors, latencies: Float64Array.from(lat) };
  };
  const setupS = (performance.now() - t0) / 1000;

  await autocannon({ url, connections, requests, duration: 1 });
  await sqlLoop(1);
  // Measured rounds are announced on the 'bench-phase' channel (for a profiler).
  const phase = new BroadcastChannel('bench-phase');
  const parts = await interleaved(['parlor', 'raw'], duration, ROUND_S, async (side, seconds) => {
    phase.postMessage({ scenario: 'history', side, state: 'start' });
    const part =
      side === 'parlor' ? await autocannon({ url, connections, requests, duration: seconds }) : await sqlLoop(seconds);
    phase.postMessage({ scenario: 'history', side, state: 'end' });
    return part;
  });
  phase.close();
  const http = summarizeAutocannon(parts.parlor);
  const durationS = parts.raw.reduce((a, p) => a + p.durationS, 0);
  const done = parts.raw.reduce((a, p) => a + p.done, 0);
  const lat = summarize(parts.raw.flatMap((p) => Array.from(p.latencies)));
  const raw = {
    rps: done / durationS,
    done,
    errors: parts.raw.reduce((a, p) => a + p.errors, 0),
    p50: lat.p50,
    p99: lat.p99,
  };
  return {
    chatId,
    count,
    fillMs,
    setupS,
    pageBytes,
    sqlText: queries[1].sql,
    plans,
    http,
    raw,
    ratio: ratio(http.rps, raw.rps),
    kind,
  };
}

/** One line for an EXPLAIN (ANALYZE, FORMAT JSON) plan: each node, outermost first, with its rows. */
function planLine(node) {
  const parts = [];
  for (let n = node; n; n = n.Plans?.[0]) {
    let d = n['Node Type'];
    if (n['Sort Method']) d += ` (${n['Sort Method']})`;
    if (n['Scan Direction'] === 'Backward') d += ' Backward';
    if (n['Index Name']) d += ` on ${n['Index Name']}`;
    d += ` rows=${n['Actual Rows']}`;
    if (n['Rows Removed by Filter']) d += ` removed-by-filter=${n['Rows Removed by Filter']}`;
    if (n['Index Cond']) d += ` cond ${n['Index Cond']}`;
    if (n.Filter) d += ' +filter';
    parts.push(d);
  }
  return `${parts.join(' ← ')} (${node['Actual Total Time']} ms)`;
}

function report(mode, label, r, { connections }) {
  const p = r.http;
  const b = r.raw;
  printTable(
    `history — ${label}`,
    ['metric', 'Parlor', 'raw SQL', 'ratio'],
    [
      [`pages/s (${connections} connections / loops)`, fmt.num(p.rps), fmt.num(b.rps), fmt.ratio(r.ratio)],
      ['latency p50', fmt.ms(p.p50), fmt.ms(b.p50), fmt.ratio(ratio(p.p50, b.p50))],
      ['latency p99', fmt.ms(p.p99), fmt.ms(b.p99), fmt.ratio(ratio(p.p99, b.p99))],
      ['pages ok / failed', `${p.ok} / ${p.non2xx + p.errors}`, `${b.done} / ${b.errors}`, ''],
    ],
  );
  console.log('');
  if (p.non2xx || p.errors) console.log(`  Parlor: status codes ${JSON.stringify(p.statusCodes)}, errors ${p.errors}`);
  console.log(
    `  ${r.count} messages inserted in ${fmt.ms(r.fillMs)} (one INSERT … SELECT); a page of ${PAGE} is ${r.pageBytes} bytes of JSON; set-up ${r.setupS.toFixed(1)} s`,
  );
  console.log(
    `  the query (${r.kind === 'postgres' ? "postgres.js, prepared like the app's" : 'PGlite'}): ${r.sqlText}`,
  );
  console.log(`  EXPLAIN ANALYZE, a page just below the newest: ${r.plans.newest}`);
  console.log(`  EXPLAIN ANALYZE, the middle of the history: ${r.plans.middle}`);
  console.log(`  EXPLAIN ANALYZE, the oldest page: ${r.plans.oldest}`);
  console.log(
    `  load average after the mode: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log(
    `  target (${mode}): pages/s ≥ ${TARGET}× the raw query loop: ${r.ratio >= TARGET ? 'MET' : 'NOT MET'} (${fmt.ratio(r.ratio)}) [informational; never fails the run]`,
  );
  return {
    pagesPerSec: p.rps,
    rawPerSec: b.rps,
    ratio: r.ratio,
    http: p,
    raw: b,
    pageBytes: r.pageBytes,
    messages: r.count,
  };
}
