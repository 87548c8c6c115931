import http from 'node:http';

/**
 * A minimal keep-alive HTTP client on `node:http` for scenario drivers: cheaper per request than
 * fetch, so the load generator takes less of the machine from the server it measures.
 * Loopback only: refuses any other host.
 */
export function makeClient(baseUrl, { maxSockets = 64 } = {}) {
  const base = new URL(baseUrl);
  assertLoopback(base.hostname);
  const agent = new http.Agent({ keepAlive: true, maxSockets });
  const request = (method, path, { headers = {}, body } = {}) =>
    new Promise((resolve, reject) => {
      const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      const h = { ...headers };
      if (payload) {
        h['content-type'] = 'application/json';
        h['content-length'] = String(payload.length);
      }
      const req = http.request({ host: base.hostname, port: base.port, method, path, headers: h, agent }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const raw = Buffer.concat(chunks);
          resolve({ status: res.statusCode, headers: res.headers, raw, text: () => raw.toString('utf8') });
        });
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(payload);
    });
  return {
    request,
    get: (path, opts) => request('GET', path, opts),
    post: (path, body, opts = {}) => request('POST', path, { ...opts, body }),
    close: () => agent.destroy(),
  };
}

/** The psession value from a Set-Cookie header list, or null. */
export function sessionCookie(headers, name = 'psession') {
  const list = headers['set-cookie'] ?? [];
  for (const c of list) {
    if (c.startsWith(`${name}=`)) {
      const v = c.slice(name.length + 1).split(';')[0];
      return v === '' ? null : v;
    }
  }
  return null;
}

export function assertLoopback(hostname) {
  const h = hostname.replace(/^\[|\]$/g, '');
  if (h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h)) return;
  throw new Error(`bench: refusing non-loopback host "${hostname}"`);
}
