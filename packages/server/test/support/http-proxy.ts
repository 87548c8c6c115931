import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A tiny HTTP forward proxy on 127.0.0.1 for the room browser's region proxy (VM_PROXY_US/EU):
 * plain absolute-URI requests only (`GET http://host/path`). Every host it is asked for is served
 * by `target` (a test site on 127.0.0.1), so a name only the proxy "knows" loads; `hosts` records
 * each request's `host[:port]` and `urls` its absolute URL, in order. A CONNECT (https) is refused
 * with 502; `tunnels` records its `host:port`.
 */
export async function startHttpProxy(target: { port: number }) {
  const hosts: string[] = [];
  const urls: string[] = [];
  const tunnels: string[] = [];
  const server = http.createServer((req, res) => {
    let url: URL;
    try {
      url = new URL(req.url ?? '');
    } catch {
      res.writeHead(400).end('absolute URI required');
      return;
    }
    hosts.push(url.host);
    urls.push(url.href);
    const upstream = http.request(
      {
        host: '127.0.0.1',
        port: target.port,
        method: req.method,
        path: url.pathname + url.search,
        headers: req.headers,
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.writeHead(502).end());
    req.pipe(upstream);
  });
  server.on('connect', (req: http.IncomingMessage, socket: import('node:net').Socket) => {
    tunnels.push(req.url ?? '');
    // The socket is ours once CONNECT arrives: the browser may reset it (it gives up on the name).
    socket.on('error', () => {});
    socket.end('HTTP/1.1 502 Bad Gateway\r\n\r\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    hosts,
    urls,
    tunnels,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
