import http from 'node:http';
import { WebSocketServer } from 'ws';

/**
 * The realtime baseline: a raw `node:http` server with a raw `ws` WebSocketServer on the same port,
 * no framework, no authentication lookups, no storage. It marks what Node and `ws` do on this
 * machine.
 *
 *   WebSocket at `/ws`           every connection joins the one broadcast set
 *   POST /v1/portal/chats/:id/messages {content}
 *                                builds the same message object Parlor sends in `message:new`
 *                                (id `<ms>-<seq>`, chat_id, type, sender_id, content, system,
 *                                created_at), sends its JSON to every connected client (encoded
 *                                once, the idiomatic `ws` broadcast), answers `{"id": …}`
 *   GET /stats                   connections accepted, open now
 *
 * Listens on 127.0.0.1, port 0.
 */
export async function startRawWs() {
  let lastMs = 0;
  let seq = 0;
  let accepted = 0;
  const server = http.createServer((req, res) => {
    const m = /^\/v1\/portal\/chats\/(\d+)\/messages$/.exec(req.url ?? '');
    if (req.method === 'POST' && m) {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        let body;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          res.writeHead(400).end();
          return;
        }
        const now = Date.now();
        if (now > lastMs) {
          lastMs = now;
          seq = 0;
        } else {
          seq += 1;
        }
        const id = `${lastMs}-${seq}`;
        const message = {
          id,
          chat_id: Number(m[1]),
          type: 'user',
          sender_id: 1,
          content: body.content,
          system: null,
          created_at: new Date(now).toISOString(),
        };
        const data = Buffer.from(JSON.stringify(message));
        for (const client of wss.clients) client.send(data, { binary: false });
        const answer = Buffer.from(JSON.stringify({ id }));
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': answer.length });
        res.end(answer);
      });
      return;
    }
    if (req.method === 'GET' && req.url === '/stats') {
      req.resume();
      const answer = JSON.stringify({ accepted, open: wss.clients.size });
      res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
      return;
    }
    req.resume();
    res.writeHead(404).end();
  });
  server.keepAliveTimeout = 72_000;
  const wss = new WebSocketServer({ server, path: '/ws', perMessageDeflate: false });
  wss.on('connection', (ws) => {
    accepted += 1;
    ws.on('error', () => {});
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}/ws`,
    server,
    wss,
    stats: () => ({ accepted, open: wss.clients.size }),
    /** Closes every client connection (the server keeps listening). */
    dropClients() {
      for (const c of wss.clients) c.terminate();
    },
    close: () =>
      new Promise((resolve) => {
        for (const c of wss.clients) c.terminate();
        wss.close();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
