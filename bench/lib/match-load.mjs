/**
 * The matchmaking load generator and its baseline (runs in a worker thread; match.mjs calls
 * `matchTask` through inWorker). One worker does the whole mode, because the users' sockets must
 * stay connected across rounds (a user counts as online while it has a socket):
 *
 *   1. `warmup` + `users` fresh users log in (the real login flow, each from its own address) and connect a
 *      socket each; every socket records when `match:found` arrives.
 *   2. rounds, alternating:
 *      Parlor: the next `batch` users POST /v1/portal/match {interests: [tag]}, `concurrency` at a
 *        time, user j of the batch on tag j % tags, so each tag gets users in turn: the first one
 *        waits, the next pairs with it during its request. A round ends when both users of every
 *        pair have their match:found (or 10 s after the last request).
 *      baseline: the match queue itself (MemoryMatchQueue, or RedisMatchQueue over a connection of
 *        its own and a scratch key prefix) in a loop for as long as the Parlor round took, with
 *        synthetic entries in the same tag order, `concurrency` calls in flight.
 * Users are fresh for every pair: a free account holds one active direct chat, so it matches once.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { makeClient } from './http-client.mjs';
import { loginFlowsTask } from './login-flows.mjs';
import { connectSio } from './sio-client.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/**
 * CPU time (ms) the app's thread (the process's main thread: its tid is the pid) has used, from
 * /proc (Linux; null elsewhere). Unlike throughput, it hardly moves with the machine's load.
 */
function appThreadCpuMs() {
  try {
    const stat = readFileSync(`/proc/${process.pid}/task/${process.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime (fields 14 and 15 of stat), in clock ticks of 10 ms.
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return null;
  }
}
export const tagName = (i) => `tag${String(i).padStart(2, '0')}`;

async function pool(items, concurrency, fn) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i], i);
      }
    }),
  );
}

export async function matchTask(opts) {
  const {
    url,
    publicKey,
    botKeys,
    mode,
    users: measured,
    warmup,
    tags,
    batch,
    concurrency,
    loginConcurrency,
    redis,
  } = opts;
  const userCount = measured + warmup;
  const log = (m) => console.log(`[match] ${mode}: ${m}`);

  // 1. Users and sockets.
  const t0 = performance.now();
  const logged = await loginFlowsTask({
    url,
    publicKey,
    botKeys,
    concurrency: loginConcurrency,
    durationMs: 600_000,
    maxFlows: userCount,
    idPrefix: `match-${mode}-`,
    keepCookies: userCount,
  });
  if (logged.completed < userCount) throw new Error(`logins failed: ${JSON.stringify(logged.failures)}`);
  const loginS = (performance.now() - t0) / 1000;
  const found = new Map(); // user index → { at, chatId }
  const users = logged.cookies.map((cookie, i) => ({ i, cookie, ip: logged.ips[i] }));
  const sockets = [];
  const t1 = performance.now();
  await pool(users, 32, async (u) => {
    const socket = await connectSio(url, u.cookie, {
      on: {
        'match:found': (payload) => {
          if (!found.has(u.i)) found.set(u.i, { at: performance.now(), chatId: payload?.chat_id });
        },
      },
    });
    sockets.push(socket);
  });
  const connectS = (performance.now() - t1) / 1000;
  log(`${userCount} users logged in in ${loginS.toFixed(1)} s, sockets connected in ${connectS.toFixed(1)} s`);

  // The baseline queue.
  const dist = path.resolve(here, '../../packages/server/dist/platform/state');
  let queue;
  let redisClient = null;
  if (redis) {
    const { RedisMatchQueue } = await import(pathToFileURL(path.join(dist, 'match-queue.redis.js')).href);
    const { Redis } = await import('ioredis');
    redisClient = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    queue = new RedisMatchQueue(redisClient, redis.prefix);
  } else {
    const { MemoryMatchQueue } = await import(pathToFileURL(path.join(dist, 'match-queue.memory.js')).href);
    queue = new MemoryMatchQueue();
  }
  let syntheticId = 10_000_000;

  const http = makeClient(url, { maxSockets: concurrency });
  let nextUser = 0;
  /** Tags with a user of this run waiting on them (at most one: one tag per user, no blocks). */
  const waitingOn = new Set();

  const parlorRound = async (n) => {
    const members = users.slice(nextUser, nextUser + n);
    nextUser += members.length;
    const sentAt = new Map();
    const answers = { searching: 0 };
    const errors = {};
    const answerLat = [];
    const notifiedBefore = found.size;
    let pairs = 0;
    const start = performance.now();
    const cpuStart = appThreadCpuMs();
    await pool(members, concurrency, async (u, j) => {
      const tag = tagName(j % tags);
      const t = performance.now();
      sentAt.set(u.i, t);
      const res = await http.post(
        '/v1/portal/match',
        { interests: [tag] },
        { headers: { cookie: `psession=${u.cookie}`, 'x-forwarded-for': u.ip, 'user-agent': 'parlor-bench/1' } },
      );
      answerLat.push(performance.now() - t);
      if (res.status !== 200) {
        const code = `${res.status} ${JSON.parse(res.text()).code ?? ''}`.trim();
        errors[code] = (errors[code] ?? 0) + 1;
        return;
      }
      const state = JSON.parse(res.text()).state;
      answers[state] = (answers[state] ?? 0) + 1;
      // Every search is answered “searching” (spec 4.5); with one tag each and no blocks, every
      // second user queued on a tag pairs with the one waiting there.
      if (waitingOn.has(tag)) {
        waitingOn.delete(tag);
        pairs++;
      } else waitingOn.add(tag);
    });
    const sendEnd = performance.now();
    const expected = 2 * pairs;
    const got = () => found.size - notifiedBefore;
    while (got() < expected && performance.now() - sendEnd < 10_000) await sleep(5);
    const cpuEnd = appThreadCpuMs();
    let last = sendEnd;
    const waiting = [];
    const pairing = [];
    const byChat = new Map();
    for (const u of members) {
      const f = found.get(u.i);
      if (!f) continue;
      if (f.at > last) last = f.at;
      byChat.set(f.chatId, [...(byChat.get(f.chatId) ?? []), u]);
    }
    // The pair's later request made it; a pair with a user of an earlier round was made by this one.
    for (const us of byChat.values()) {
      us.sort((a, b) => sentAt.get(a.i) - sentAt.get(b.i));
      const maker = us.at(-1);
      pairing.push(found.get(maker.i).at - sentAt.get(maker.i));
      if (us.length === 2) waiting.push(found.get(us[0].i).at - sentAt.get(us[0].i));
    }
    return {
      users: members.length,
      elapsedS: (last - start) / 1000,
      appCpuMs: cpuStart === null || cpuEnd === null ? null : cpuEnd - cpuStart,
      pairs,
      foundPairs: byChat.size,
      notified: got(),
      expected,
      answers,
      errors,
      pairingLat: Float64Array.from(pairing),
      waitingLat: Float64Array.from(waiting),
      answerLat: Float64Array.from(answerLat),
    };
  };

  const baselineRound = async (seconds) => {
    let pairs = 0;
    let calls = 0;
    let j = 0;
    const lat = [];
    const start = performance.now();
    const deadline = start + seconds * 1000;
    await Promise.all(
      Array.from({ length: redis ? concurrency : 1 }, async () => {
        while (performance.now() < deadline) {
          const now = Date.now();
          const entry = {
            userId: syntheticId++,
            tags: [tagName(j++ % tags)],
            enqueuedAt: now,
            deadline: now + 120_000,
            exclude: [],
            country: null,
          };
          const t = performance.now();
          const r = await queue.enqueue(entry, now);
          lat.push(performance.now() - t);
          calls++;
          if (r.kind === 'paired') pairs++;
        }
      }),
    );
    return { elapsedS: (performance.now() - start) / 1000, pairs, calls, latencies: Float64Array.from(lat) };
  };

  // 2. Rounds: a warm-up of each (the first `warmup` users), then alternate until the users run out.
  // Measured rounds are announced on the 'bench-phase' channel (for bench/tools/profile.mjs).
  const phase = new BroadcastChannel('bench-phase');
  const announced = async (side, fn) => {
    phase.postMessage({ scenario: 'match', side, state: 'start' });
    try {
      return await fn();
    } finally {
      phase.postMessage({ scenario: 'match', side, state: 'end' });
    }
  };
  const parts = { parlor: [], raw: [] };
  const warm = await parlorRound(warmup);
  await baselineRound(0.5);
  log(`warm-up: ${warm.users} users, ${warm.pairs} pairs in ${warm.elapsedS.toFixed(1)} s`);
  while (nextUser + batch <= users.length) {
    const p = await announced('parlor', () => parlorRound(batch));
    parts.parlor.push(p);
    parts.raw.push(await announced('raw', () => baselineRound(Math.max(0.5, p.elapsedS))));
  }

  phase.close();
  for (const s of sockets) s.disconnect();
  http.close();
  if (redisClient) {
    await queue.popExpired(Date.now() + 10 * 60_000, 100_000).catch(() => {});
    redisClient.disconnect();
  }
  return { loginS, connectS, warm: { users: warm.users, pairs: warm.pairs }, parts };
}
