import http from 'node:http';

/**
 * The HTTP baseline: a raw `node:http` server answering fixed bytes per "METHOD path", with no
 * framework, validation, hooks or storage. It marks what Node itself can do on this machine.
 *
 * `routes` maps "GET /v1/users/me" to { status, headers, body } where body is a Buffer/string
 * captured from the real service, so both sides send the same payload. Request bodies are read
 * (and dropped) before answering, as a real handler must. Listens on 127.0.0.1, port 0.
 */
export async function startRawServer(routes) {
  const table = new Map();
  for (const [key, r] of Object.entries(routes)) {
    const body = Buffer.isBuffer(r.body) ? r.body : Buffer.from(r.body);
    table.set(key, {
      status: r.status ?? 200,
      headers: {
        'content-type': 'application/json; charset=utf-8',
        ...r.headers,
        'content-length': String(body.length),
      },
      body,
    });
  }
  const notFound = Buffer.from('{"error":"not found"}');
  const server = http.createServer((req, res) => {
    const path = req.url.split('?')[0];
    const hit = table.get(`${req.method} ${path}`);
    const answer = () => {
      if (!hit) {
        res.writeHead(404, { 'content-type': 'application/json', 'content-length': notFound.length });
        res.end(notFound);
        return;
      }
      res.writeHead(hit.status, hit.headers);
      res.end(hit.body);
    };
    if (req.method === 'GET' || req.method === 'HEAD') {
      req.resume();
      answer();
    } else {
      req.on('data', () => {});
      req.on('end', answer);
    }
  });
  server.keepAliveTimeout = 72_000;
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
