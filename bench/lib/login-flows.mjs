import { makeClient, sessionCookie } from './http-client.mjs';
import { summarize } from './stats.mjs';
import { inWorker } from './worker.mjs';

const PLATFORM = 'platform_a';
const UA = 'parlor-bench/1';

/**
 * The simulated client address of flow i: 198.18.0.0/15, the range set aside for benchmarks
 * (RFC 2544). The service sees a public address, as from a real user (so the geo lookup runs),
 * and each flow has its own, so the per-IP limits (5 pending codes, verify failures) never bind.
 */
export function benchIp(i) {
  const n = i % 131072;
  return `198.${18 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`;
}
/** Bots speak from TEST-NET-3 addresses. */
const botIp = (k) => `203.0.113.${(k % 254) + 1}`;

/**
 * Drives the web login of spec 5 the way a user and a bot perform it, `concurrency` flows at a
 * time, until `durationMs` has passed or `maxFlows` flows have started:
 *   POST /v1/authentication/request   (public key, from the user's address)
 *   POST /v1/authentication/bot/login-code   (an Official bot's key, round-robin over botKeys:
 *                                             other bot types get 403, docs/api.md Login)
 *   POST /v1/authentication/verify    (public key, same address) → psession cookie
 * Flow i uses identity `${idPrefix}${i}` and address benchIp(i), i from firstIndex on.
 * Returns counts, latency samples (whole flow and per step, Float64Array ms), failures by step
 * and status, up to `keepCookies` session cookies (and their addresses, `ips`), and with `capture` the raw answers of the
 * first flow. Summarise one or several parts with summarizeFlows().
 */
export async function loginFlowsTask(opts) {
  const {
    url,
    publicKey,
    botKeys,
    concurrency = 16,
    durationMs = 10_000,
    maxFlows = 1_000_000,
    firstIndex = 0,
    idPrefix = 'bench',
    keepCookies = 0,
    capture = false,
  } = opts;
  const client = makeClient(url, { maxSockets: concurrency * 2 });
  const flows = [];
  const steps = { request: [], loginCode: [], verify: [] };
  const failures = {};
  const cookies = [];
  const ips = [];
  let captured = null;
  let failed = 0;
  let next = firstIndex;
  const end = firstIndex + maxFlows;
  const start = performance.now();
  const deadline = start + durationMs;
  let botTurn = 0;

  const fail = (step, what) => {
    failed++;
    const key = `${step} ${what}`;
    failures[key] = (failures[key] ?? 0) + 1;
  };

  const one = async (i) => {
    const ip = benchIp(i);
    const pid = `${idPrefix}${i}`;
    const userHeaders = { 'x-forwarded-for': ip, 'x-api-key': publicKey, 'user-agent': UA };
    const t0 = performance.now();
    const r1 = await client.post(
      '/v1/authentication/request',
      { platform: PLATFORM, platform_user_id: pid },
      { headers: userHeaders },
    );
    if (r1.status !== 200) return fail('request', r1.status);
    const t1 = performance.now();
    const k = botTurn++ % botKeys.length;
    const r2 = await client.post(
      '/v1/authentication/bot/login-code',
      {
        platform: PLATFORM,
        platform_user_id: pid,
        platform_username: `bench_${i}`,
        platform_avatar_url: `https://cdn.example/${pid}.png`,
      },
      { headers: { 'x-forwarded-for': botIp(k), 'x-api-key': botKeys[k], 'user-agent': UA } },
    );
    if (r2.status !== 200) return fail('login-code', r2.status);
    const code = JSON.parse(r2.text()).code;
    if (!code) return fail('login-code', 'no code');
    const t2 = performance.now();
    const r3 = await client.post('/v1/authentication/verify', { code }, { headers: userHeaders });
    if (r3.status !== 200) return fail('verify', r3.status);
    const cookie = sessionCookie(r3.headers);
    if (!cookie) return fail('verify', 'no cookie');
    const t3 = performance.now();
    flows.push(t3 - t0);
    steps.request.push(t1 - t0);
    steps.loginCode.push(t2 - t1);
    steps.verify.push(t3 - t2);
    if (cookies.length < keepCookies) {
      cookies.push(cookie);
      ips.push(ip);
    }
    if (capture && !captured) {
      captured = {
        request: r1.text(),
        loginCode: r2.text(),
        verify: r3.text(),
        verifySetCookie: r3.headers['set-cookie'] ?? [],
      };
    }
  };

  const loop = async () => {
    while (performance.now() < deadline && next < end && failed < 1000) {
      const i = next++;
      try {
        await one(i);
      } catch (e) {
        fail('network', e.code ?? e.message);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const elapsedS = (performance.now() - start) / 1000;
  client.close();
  return {
    concurrency,
    elapsedS,
    started: next - firstIndex,
    completed: flows.length,
    failed,
    failures,
    stoppedBy: failed >= 1000 ? 'failures' : next >= end ? 'count' : 'duration',
    samples: {
      flow: Float64Array.from(flows),
      request: Float64Array.from(steps.request),
      loginCode: Float64Array.from(steps.loginCode),
      verify: Float64Array.from(steps.verify),
    },
    cookies,
    /** The address each kept cookie logged in from (same order). */
    ips,
    captured,
    nextIndex: next,
  };
}

/** Adds up loginFlowsTask parts (interleaved rounds): rate over the summed time, percentiles over all flows. */
export function summarizeFlows(parts) {
  const sum = (k) => parts.reduce((a, p) => a + p[k], 0);
  const all = (k) => parts.flatMap((p) => Array.from(p.samples[k]));
  const failures = {};
  for (const p of parts) for (const [k, n] of Object.entries(p.failures)) failures[k] = (failures[k] ?? 0) + n;
  const elapsedS = sum('elapsedS');
  const completed = sum('completed');
  return {
    rounds: parts.length,
    concurrency: parts[0]?.concurrency,
    elapsedS,
    started: sum('started'),
    completed,
    failed: sum('failed'),
    failures,
    stoppedBy: parts.some((p) => p.stoppedBy === 'count')
      ? 'count'
      : parts.some((p) => p.stoppedBy === 'failures')
        ? 'failures'
        : 'duration',
    flowsPerSec: completed / elapsedS,
    latency: summarize(all('flow')),
    steps: {
      request: summarize(all('request')),
      loginCode: summarize(all('loginCode')),
      verify: summarize(all('verify')),
    },
  };
}

/** loginFlowsTask in a worker thread (the load generator off the server's event loop). */
export function loginFlows(opts) {
  return inWorker(import.meta.url, 'loginFlowsTask', opts);
}
