import { makeClient } from './http-client.mjs';
import { loginFlows } from './login-flows.mjs';
import { BENCH_OPERATOR_TOKEN } from './modes.mjs';

/**
 * Set-up helpers shared by the realtime scenarios (fanout, connect, history, match): bots for the
 * login-code step, many logged-in users, a JSON client speaking as one of them, an Admin.
 * Nothing here is measured; scenarios time their set-up only to print it.
 */

/** Each bot key may make 600 requests a minute (Limits.BOT_REQUESTS_PER_MINUTE). */
export const BOT_PER_MINUTE = 600;

/** Registers `n` official bots through the operator route; returns their API keys. */
export async function createBots(url, n, label = 'bench bot') {
  const op = makeClient(url);
  try {
    const keys = [];
    for (let b = 0; b < n; b++) {
      const res = await op.post(
        '/v1/admin/bots/create',
        { name: `${label} ${b}`, type: 'official', rate_limit_per_hour: 1_000_000 },
        { headers: { authorization: `Bearer ${BENCH_OPERATOR_TOKEN}` } },
      );
      if (res.status !== 200) throw new Error(`bot create answered ${res.status}: ${res.text()}`);
      keys.push(JSON.parse(res.text()).api_key);
    }
    return keys;
  } finally {
    op.close();
  }
}

/**
 * Logs `n` fresh users in with the real web login flow (lib/login-flows.mjs, in a worker), each
 * from its own address in 198.18.0.0/15. Returns [{ cookie, ip }] in completion order.
 * `firstIndex` keeps identities and addresses of several batches apart within one mode.
 * Bots: enough keys that `n` login-code calls stay under 600 a minute each.
 */
export async function loginUsers(started, n, { botKeys, concurrency = 16, firstIndex = 0, idPrefix } = {}) {
  if (n <= 0) return { users: [], nextIndex: firstIndex, seconds: 0 };
  const need = Math.ceil(n / (BOT_PER_MINUTE - 20));
  if (!botKeys || botKeys.length < need) throw new Error(`loginUsers: ${n} logins need at least ${need} bots`);
  const t0 = performance.now();
  const r = await loginFlows({
    url: started.url,
    publicKey: started.built.publicApiKey,
    botKeys,
    concurrency,
    durationMs: 600_000,
    maxFlows: n,
    firstIndex,
    idPrefix: idPrefix ?? `bench-${started.mode}-`,
    keepCookies: n,
  });
  if (r.completed < n) {
    throw new Error(`only ${r.completed} of ${n} logins completed: ${JSON.stringify(r.failures)}`);
  }
  return {
    users: r.cookies.map((cookie, i) => ({ cookie, ip: r.ips[i] })),
    nextIndex: r.nextIndex,
    seconds: (performance.now() - t0) / 1000,
  };
}

/** A small JSON client speaking as one user (its psession cookie and address). */
export function userClient(url, { cookie, ip }, { maxSockets = 4 } = {}) {
  const c = makeClient(url, { maxSockets });
  const headers = {
    cookie: `psession=${cookie}`,
    'x-forwarded-for': ip ?? '198.18.255.1',
    'user-agent': 'parlor-bench/1',
  };
  const parse = (res) => {
    const text = res.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = text;
    }
    return { status: res.status, body };
  };
  return {
    get: async (path) => parse(await c.get(path, { headers })),
    post: async (path, body = {}) => parse(await c.post(path, body, { headers })),
    /** Throws unless the answer is 200; returns the body. */
    async ok(method, path, body) {
      const r = method === 'GET' ? await this.get(path) : await this.post(path, body);
      if (r.status !== 200) throw new Error(`${method} ${path} answered ${r.status}: ${JSON.stringify(r.body)}`);
      return r.body;
    },
    close: () => c.close(),
  };
}

/** Sets a user's permission level with the operator token (2 = Admin: may create 5 chats). */
export async function setLevel(url, userId, level) {
  const op = makeClient(url);
  try {
    const res = await op.post(
      `/v1/admin/users/${userId}/update`,
      { permission_level: level },
      { headers: { authorization: `Bearer ${BENCH_OPERATOR_TOKEN}` } },
    );
    if (res.status !== 200) throw new Error(`admin update answered ${res.status}: ${res.text()}`);
  } finally {
    op.close();
  }
}

/** Runs `fn(item, i)` over `items` with at most `concurrency` at a time; results in order. */
export async function pool(items, concurrency, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return out;
}
