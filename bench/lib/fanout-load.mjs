/**
 * The fan-out load generator (runs in a worker thread; fanout.mjs calls `fanoutTask` through
 * inWorker). It holds every client of one mode for the whole run, so one worker does it all:
 *
 *   1. senders: `senders` fresh users log in, register an X25519 key, join the chat on a socket and
 *      disconnect (they stay members: membership is stored, the socket only enters the room).
 *      The first one is promoted to Admin beforehand and creates the chat. They join in batches
 *      of 250; after each, one share by the first gives every session of the batch its envelope.
 *   2. for each size N: more users log in (batches of 100) and join on socket.io-client until N
 *      sockets are in the room, within the join budget; N raw `ws` clients connect to the baseline.
 *   3. Parlor and the baseline are measured in alternating rounds. In a round, `concurrency` send
 *      loops POST encrypted messages; every receiver records (id, time) of each message it gets.
 *
 * Receivers never register a key: they are not in the key ring, which therefore stays the
 * senders' and never changes while the room grows (no rekeying during the run).
 */

import WebSocket from 'ws';
import { makeClient } from './http-client.mjs';
import { loginFlowsTask } from './login-flows.mjs';
import { BENCH_OPERATOR_TOKEN } from './modes.mjs';
import { buildKeyShare, encryptMessage, generateChatKey, generateKeyPair, publicKeyToBase64 } from './sdk.mjs';
import { connectSio, ignored } from './sio-client.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** Parlor allows 20 messages per 10 s per user and chat: one send per 550 ms stays under it. */
export const SENDER_SPACING_MS = 550;
/** Envelopes per key share: the bench's choice, kept from when shares had a 64 KiB body limit (the route takes 500). */
const SHARE_BATCH = 250;
const BATCH = 100;

function jsonClient(url, maxSockets) {
  const c = makeClient(url, { maxSockets });
  const call = async (method, path, { cookie, ip, body, headers = {} } = {}) => {
    const h = { 'user-agent': 'parlor-bench/1', ...headers };
    if (cookie) h.cookie = `psession=${cookie}`;
    if (ip) h['x-forwarded-for'] = ip;
    const res = await c.request(method, path, { headers: h, body });
    const text = res.text();
    let parsed = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = text;
    }
    return { status: res.status, body: parsed };
  };
  const ok = async (method, path, opts) => {
    const r = await call(method, path, opts);
    if (r.status !== 200) throw new Error(`${method} ${path} answered ${r.status}: ${JSON.stringify(r.body)}`);
    return r.body;
  };
  return { call, ok, close: () => c.close() };
}

async function pool(items, concurrency, fn) {
  let next = 0;
  const out = new Array(items.length);
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i], i);
      }
    }),
  );
  return out;
}

export async function fanoutTask(opts) {
  const {
    url,
    rawUrl,
    rawWsUrl,
    publicKey,
    botKeys,
    mode,
    sizes,
    senders: senderCount,
    concurrency,
    durationS,
    bigDurationS,
    bigFrom,
    roundS,
    joinConcurrency,
    joinBudgetS,
    loginConcurrency,
  } = opts;
  const log = (m) => console.log(`[fanout] ${mode}: ${m}`);
  const api = jsonClient(url, 64);
  const setup = { logins: 0, loginS: 0, joinS: 0 };
  let nextIndex = 0;
  const login = async (n) => {
    const t0 = performance.now();
    const r = await loginFlowsTask({
      url,
      publicKey,
      botKeys,
      concurrency: loginConcurrency,
      durationMs: 600_000,
      maxFlows: n,
      firstIndex: nextIndex,
      idPrefix: `fanout-${mode}-`,
      keepCookies: n,
    });
    nextIndex = r.nextIndex;
    setup.logins += r.completed;
    setup.loginS += (performance.now() - t0) / 1000;
    if (r.completed < n) throw new Error(`logins failed: ${JSON.stringify(r.failures)}`);
    return r.cookies.map((cookie, i) => ({ cookie, ip: r.ips[i] }));
  };

  // 1. Senders, the chat, the key.
  const t0 = performance.now();
  const senders = await login(senderCount);
  const me = await api.ok('GET', '/v1/users/me', senders[0]);
  await api.ok('POST', `/v1/admin/users/${me.user?.id ?? me.id}/update`, {
    headers: { authorization: `Bearer ${BENCH_OPERATOR_TOKEN}` },
    body: { permission_level: 2 },
  });
  const created = await api.ok('POST', '/v1/portal/chats/create', {
    ...senders[0],
    body: { name: 'fanout', type: 'public' },
  });
  const chatId = created.chat.id;
  // Keyed in batches: a share holds at most 500 envelopes, and the first share of an epoch must
  // cover every session then in the chat; later shares by a holder add the sessions that joined.
  const chatKey = generateChatKey();
  const shared = new Set();
  let epoch = null;
  for (let b = 0; b < senders.length; b += SHARE_BATCH) {
    await pool(senders.slice(b, b + SHARE_BATCH), 8, async (s) => {
      const kp = generateKeyPair();
      await api.ok('POST', '/v1/portal/keys', { ...s, body: { public_key: publicKeyToBase64(kp.publicKey) } });
      const socket = await connectSio(url, s.cookie);
      const ack = await socket.emitWithAck('room:join', { chat_id: chatId });
      if (!ack.ok) throw new Error(`sender join: ${JSON.stringify(ack)}`);
      socket.close();
    });
    const keys = await api.ok('GET', `/v1/portal/chats/${chatId}/keys`, senders[0]);
    if (epoch !== null && keys.epoch !== epoch) throw new Error(`epoch moved from ${epoch} to ${keys.epoch}`);
    epoch = keys.epoch;
    const share = buildKeyShare({ keyRing: keys.key_ring, chatKey, chatId, epoch });
    const envelopes = share.envelopes.filter((e) => !shared.has(e.session_id));
    await api.ok('POST', `/v1/portal/chats/${chatId}/keys/share`, { ...senders[0], body: { epoch, envelopes } });
    for (const e of envelopes) shared.add(e.session_id);
  }
  if (shared.size !== senderCount) throw new Error(`keyed ${shared.size} sessions, expected ${senderCount}`);
  const keys = { epoch };
  // Distinct ciphertexts of a ~100-character message, encrypted once.
  const contents = Array.from({ length: 256 }, (_, i) =>
    encryptMessage({
      chatKey,
      chatId,
      epoch: keys.epoch,
      plaintext: `bench message ${i} — ${'lorem ipsum dolor sit amet '.repeat(3)}`.slice(0, 100),
    }),
  );
  setup.sendersS = (performance.now() - t0) / 1000;
  log(`${senderCount} senders logged in, keyed and joined chat ${chatId} in ${setup.sendersS.toFixed(1)} s`);

  // Receivers and what they record in the current round.
  let current = null; // { side, ids: string[], times: number[] }
  const record = (side, id) => {
    if (current && current.side === side) {
      current.ids.push(id);
      current.times.push(performance.now());
    }
  };
  const parlorSockets = [];
  const rawSockets = [];
  const onParlorMessage = (m) => record('parlor', m?.id);
  const onRawMessage = (data) => record('raw', JSON.parse(data).id);

  const growParlor = async (target, budgetLeftMs) => {
    const start = performance.now();
    const before = { bytes: ignored.bytes, packets: ignored.packets };
    let stopped = null;
    while (parlorSockets.length < target) {
      if (performance.now() - start > budgetLeftMs) {
        stopped = 'budget';
        break;
      }
      const users = await login(Math.min(BATCH, target - parlorSockets.length));
      const tj = performance.now();
      await pool(users, joinConcurrency, async (u) => {
        const socket = await connectSio(url, u.cookie);
        socket.on('message:new', onParlorMessage);
        const ack = await socket.emitWithAck('room:join', { chat_id: chatId });
        if (!ack.ok) throw new Error(`join: ${JSON.stringify(ack)}`);
        parlorSockets.push(socket);
      });
      setup.joinS += (performance.now() - tj) / 1000;
    }
    return {
      stopped,
      seconds: (performance.now() - start) / 1000,
      presenceBytes: ignored.bytes - before.bytes,
      presencePackets: ignored.packets - before.packets,
    };
  };
  const growRaw = async (target) => {
    const need = target - rawSockets.length;
    await pool(Array.from({ length: need }), joinConcurrency, async () => {
      const ws = new WebSocket(rawWsUrl, { perMessageDeflate: false });
      await new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
      });
      ws.on('message', onRawMessage);
      rawSockets.push(ws);
    });
  };

  // Senders: Parlor paced per user to stay under its limits; the baseline has no limits.
  const parlorHttp = makeClient(url, { maxSockets: concurrency });
  const rawHttp = makeClient(rawUrl, { maxSockets: concurrency });
  const nextFree = new Array(senderCount).fill(0);
  let turn = 0;
  let contentTurn = 0;
  const pickSender = async (side, stats) => {
    if (side === 'raw') return turn++ % senderCount;
    for (;;) {
      const now = performance.now();
      for (let k = 0; k < senderCount; k++) {
        const i = turn++ % senderCount;
        if (nextFree[i] <= now) {
          nextFree[i] = now + SENDER_SPACING_MS;
          return i;
        }
      }
      const wait = Math.max(1, Math.min(...nextFree) - now);
      stats.capWaitMs += wait;
      await sleep(wait);
    }
  };

  const round = async (side, seconds, n) => {
    const http = side === 'parlor' ? parlorHttp : rawHttp;
    const stats = { capWaitMs: 0, errors: {}, sent: 0 };
    const sentIds = [];
    const sentAt = [];
    current = { side, ids: [], times: [] };
    const start = performance.now();
    const deadline = start + seconds * 1000;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (performance.now() < deadline) {
          const i = await pickSender(side, stats);
          if (performance.now() >= deadline) break;
          const s = senders[i];
          const ts = performance.now();
          try {
            const res = await http.post(
              `/v1/portal/chats/${chatId}/messages`,
              { content: contents[contentTurn++ % contents.length] },
              { headers: { cookie: `psession=${s.cookie}`, 'x-forwarded-for': s.ip, 'user-agent': 'parlor-bench/1' } },
            );
            if (res.status === 200) {
              sentIds.push(JSON.parse(res.text()).id);
              sentAt.push(ts);
            } else {
              stats.errors[res.status] = (stats.errors[res.status] ?? 0) + 1;
            }
          } catch (e) {
            stats.errors[e.code ?? 'network'] = (stats.errors[e.code ?? 'network'] ?? 0) + 1;
            await sleep(10);
          }
        }
      }),
    );
    const sendEnd = performance.now();
    const expected = sentIds.length * n;
    // Drain: every receiver should get every message; give up after 5 s (counted as missing).
    while (current.ids.length < expected && performance.now() - sendEnd < 5000) await sleep(5);
    const got = current;
    current = null;
    const at = new Map();
    for (let k = 0; k < sentIds.length; k++) at.set(sentIds[k], sentAt[k]);
    const lat = [];
    let last = sendEnd;
    for (let k = 0; k < got.ids.length; k++) {
      const t = at.get(got.ids[k]);
      if (t === undefined) continue; // a straggler from an earlier round
      lat.push(got.times[k] - t);
      if (got.times[k] > last) last = got.times[k];
    }
    return {
      side,
      elapsedS: (last - start) / 1000,
      sendS: (sendEnd - start) / 1000,
      sent: sentIds.length,
      expected,
      delivered: lat.length,
      latencies: Float64Array.from(lat),
      capWaitMs: stats.capWaitMs,
      errors: stats.errors,
    };
  };

  // 2-3. Sizes. Measured rounds are announced on the 'bench-phase' channel (for a profiler).
  const phase = new BroadcastChannel('bench-phase');
  const results = [];
  let budgetLeftMs = joinBudgetS * 1000;
  for (const size of sizes) {
    const grown = await growParlor(size, budgetLeftMs);
    budgetLeftMs -= grown.seconds * 1000;
    const n = parlorSockets.length;
    if (grown.stopped) {
      log(`join budget (${joinBudgetS} s) spent: ${n} of ${size} members on sockets`);
    }
    await growRaw(n);
    if (results.length > 0 && results[results.length - 1].members === n) {
      results.push({ size, members: n, reached: false, grow: grown, skipped: 'no member added within the budget' });
      break;
    }
    log(
      `${n} members on sockets (${grown.seconds.toFixed(1)} s to grow; presence traffic while joining: ${(grown.presenceBytes / 1e6).toFixed(1)} MB in ${grown.presencePackets} packets); ${n} raw ws clients`,
    );
    const seconds = size >= bigFrom ? bigDurationS : durationS;
    await round('parlor', 1, n);
    await round('raw', 1, n);
    const rounds = Math.max(1, Math.round(seconds / roundS));
    const parts = { parlor: [], raw: [] };
    for (let r = 0; r < rounds; r++) {
      for (const side of ['parlor', 'raw']) {
        phase.postMessage({ scenario: 'fanout', side, members: n, state: 'start' });
        parts[side].push(await round(side, seconds / rounds, n));
        phase.postMessage({ scenario: 'fanout', side, members: n, state: 'end' });
      }
    }
    results.push({ size, members: n, reached: n >= size, grow: grown, seconds, parts });
    if (grown.stopped) break;
  }

  // Teardown: the raw clients, then the Parlor sockets all at once (each disconnect makes the
  // server broadcast the member list to whoever is left; closing them together keeps that short).
  const td = performance.now();
  for (const ws of rawSockets) ws.terminate();
  for (const s of parlorSockets) s.disconnect();
  await sleep(200);
  phase.close();
  parlorHttp.close();
  rawHttp.close();
  api.close();
  return { chatId, senders: senderCount, setup, results, teardownMs: performance.now() - td, presence: { ...ignored } };
}
