/**
 * Client side of the connect storm, run in a child process (lib/child.mjs) so that none of its
 * memory counts in the server's process. Commands:
 *   storm({ kind: 'parlor'|'raw', url, cookies, n, window })
 *        opens n sockets, at most `window` handshakes in flight; Parlor sockets use socket.io-client
 *        with the session cookies (cycled), raw ones a bare `ws` client. Resolves with the time of
 *        each accept (Parlor: the namespace `connect`, i.e. the auth middleware passed; raw: `open`)
 *        and, for Parlor, of the `chat:list` the server sends once it has handled the connection.
 *   drop()  closes every socket of the last storm and waits until they are closed.
 */
import WebSocket from 'ws';
import { connectSio } from './sio-client.mjs';

let open = [];

async function stormParlor({ url, cookies, n, window }) {
  const accepted = new Float64Array(n);
  const settled = new Float64Array(n);
  const failures = {};
  let settleTimeouts = 0;
  let next = 0;
  const start = performance.now();
  const one = async (i) => {
    const t = performance.now();
    const cookie = cookies[i % cookies.length];
    let listed;
    const gotList = new Promise((r) => {
      listed = r;
    });
    let socket;
    try {
      socket = await connectSio(url, cookie, { timeoutMs: 30_000, on: { 'chat:list': () => listed() } });
    } catch (e) {
      failures[e.message] = (failures[e.message] ?? 0) + 1;
      return;
    }
    accepted[i] = performance.now() - t;
    open.push({ kind: 'parlor', socket });
    let timer;
    const gave = await Promise.race([
      gotList,
      new Promise((r) => {
        timer = setTimeout(() => r('timeout'), 30_000);
      }),
    ]);
    clearTimeout(timer);
    if (gave === 'timeout') settleTimeouts += 1;
    else settled[i] = performance.now() - t;
  };
  await Promise.all(
    Array.from({ length: Math.min(window, n) }, async () => {
      while (next < n) await one(next++);
    }),
  );
  return { ...finish('parlor', start, accepted, settled, failures), settleTimeouts };
}

async function stormRaw({ url, n, window }) {
  const accepted = new Float64Array(n);
  const failures = {};
  let next = 0;
  const start = performance.now();
  const one = async (i) => {
    const t = performance.now();
    const ws = new WebSocket(url, { perMessageDeflate: false });
    try {
      await new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
      });
    } catch (e) {
      failures[e.message] = (failures[e.message] ?? 0) + 1;
      return;
    }
    ws.on('error', () => {});
    accepted[i] = performance.now() - t;
    open.push({ kind: 'raw', ws });
  };
  await Promise.all(
    Array.from({ length: Math.min(window, n) }, async () => {
      while (next < n) await one(next++);
    }),
  );
  return finish('raw', start, accepted, null, failures);
}

function finish(kind, start, accepted, settled, failures) {
  const elapsedMs = performance.now() - start;
  const ok = accepted.filter((x) => x > 0);
  return {
    kind,
    elapsedMs,
    connected: ok.length,
    accepted: Float64Array.from(ok),
    settled: settled ? Float64Array.from(settled.filter((x) => x > 0)) : null,
    failures,
  };
}

export const commands = {
  storm: (args) => (args.kind === 'parlor' ? stormParlor(args) : stormRaw(args)),
  async drop() {
    const closing = open.map(
      (c) =>
        new Promise((resolve) => {
          if (c.kind === 'parlor') {
            c.socket.disconnect();
            resolve();
          } else {
            if (c.ws.readyState === WebSocket.CLOSED) return resolve();
            c.ws.once('close', resolve);
            c.ws.close();
            setTimeout(() => {
              c.ws.terminate();
              resolve();
            }, 2000);
          }
        }),
    );
    const n = open.length;
    open = [];
    await Promise.all(closing);
    return { closed: n };
  },
  async close() {
    await commands.drop();
  },
};
