import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo, Socket as NetSocket } from 'node:net';
import { Server } from 'socket.io';
import { type Socket as ClientSocket, io as connect } from 'socket.io-client';
import { afterEach, describe, expect, it } from 'vitest';
import { coalesce, coalesceSocketWrites, type EngineConnection } from './socket-writes.js';

/** A Socket.IO server on a real port, with or without the coalescing. */
async function start(coalescing: boolean) {
  const http: HttpServer = createServer();
  const io = new Server(http);
  if (coalescing) coalesceSocketWrites(io.engine as unknown as Parameters<typeof coalesceSocketWrites>[0]);
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  return { io, url, close: () => new Promise<void>((r) => io.close(() => r())) };
}

const opened: { close(): Promise<void> }[] = [];
const clients: ClientSocket[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of opened.splice(0)) await s.close();
});

/** Connects a client; resolves with it and the server side's TCP socket write counter. */
async function connectCounting(server: Awaited<ReturnType<typeof start>>, transports: string[]) {
  const serverSide = new Promise<{ writes: () => number; emitAll: (n: number) => void }>((resolve) => {
    server.io.once('connection', (socket) => {
      const conn = socket.conn as unknown as { transport: { socket?: { _socket?: NetSocket } } };
      const tcp = conn.transport.socket?._socket;
      let writes = 0;
      if (tcp) {
        const writev = tcp._writev?.bind(tcp);
        const write = tcp._write.bind(tcp);
        tcp._writev = (chunks, cb) => {
          writes += 1;
          writev?.(chunks, cb);
        };
        tcp._write = (chunk, enc, cb) => {
          writes += 1;
          write(chunk, enc, cb);
        };
      }
      // Answers a client's round trip: once its ack is back, nothing of the connection's start is in flight.
      socket.on('sync', (ack: () => void) => ack());
      resolve({
        writes: () => writes,
        emitAll: (n) => {
          for (let i = 0; i < n; i++) socket.emit('m', i);
        },
      });
    });
  });
  const client = connect(server.url, { transports, reconnection: false, forceNew: true });
  clients.push(client);
  await new Promise<void>((resolve, reject) => {
    client.once('connect', resolve);
    client.once('connect_error', reject);
  });
  return { client, ...(await serverSide) };
}

function receive(client: ClientSocket, n: number): Promise<number[]> {
  const got: number[] = [];
  return new Promise((resolve) => {
    client.on('m', (i: number) => {
      got.push(i);
      if (got.length === n) resolve(got);
    });
  });
}

describe('coalesced socket writes', () => {
  /** 20 packets emitted in one turn to a WebSocket client: what it received, and the TCP writes. */
  async function burst(coalescing: boolean) {
    const server = await start(coalescing);
    opened.push(server);
    const { client, writes, emitAll } = await connectCounting(server, ['websocket']);
    // One round trip first, so the count starts after every write the connection made so far.
    await client.emitWithAck('sync');
    const before = writes();
    const got = receive(client, 20);
    emitAll(20);
    return { received: await got, writes: writes() - before };
  }

  it('sends the packets of one turn to a WebSocket connection in one write, in order', async () => {
    expect(await burst(true)).toEqual({ received: Array.from({ length: 20 }, (_, i) => i), writes: 1 });
  });

  it('without it, the same packets take a write each (what the test above guards against)', async () => {
    const { received, writes } = await burst(false);
    expect(received).toHaveLength(20);
    expect(writes).toBeGreaterThanOrEqual(2);
  });

  it('holds nothing past the turn: packets of later turns arrive on their own', async () => {
    const server = await start(true);
    opened.push(server);
    const { client, emitAll } = await connectCounting(server, ['websocket']);
    for (let round = 0; round < 3; round++) {
      const got = receive(client, 1);
      emitAll(1);
      expect(await got).toEqual([0]);
      client.off('m');
    }
  });

  it('keeps the order on the polling transport and across the upgrade to WebSocket', async () => {
    const server = await start(true);
    opened.push(server);
    const { client, emitAll } = await connectCounting(server, ['polling']);
    const got = receive(client, 50);
    emitAll(50);
    expect(await got).toEqual(Array.from({ length: 50 }, (_, i) => i));

    const upgrading = await connectCounting(server, ['polling', 'websocket']);
    const both = receive(upgrading.client, 200);
    for (let k = 0; k < 4; k++) {
      upgrading.emitAll(50);
      await new Promise((r) => setTimeout(r, 5));
    }
    const all = await both;
    // Four rounds of 0..49, each in order and the rounds one after the other.
    expect(all).toEqual([0, 1, 2, 3].flatMap(() => Array.from({ length: 50 }, (_, i) => i)));
  });

  it('leaves a connection of another shape as it is', () => {
    const odd = { transport: {} } as unknown as EngineConnection;
    expect(coalesce(odd)).toBe(false);
    expect(odd).toEqual({ transport: {} });
  });
});
