import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from 'socket.io';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ParlorApiError } from './errors.js';
import { HttpClient } from './http.js';
import { connect, emitAck } from './socket.js';

/** A Socket.IO server that never acknowledges `room:join`. */
let io: Server;
let url: string;
beforeAll(async () => {
  const http = createServer();
  io = new Server(http);
  io.on('connection', (socket) => socket.on('room:join', () => {}));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => io.close(resolve));
});

describe('emitAck', () => {
  it('tells a disconnect while waiting (ERR_SOCKET_DISCONNECTED) from no answer in time (ERR_SOCKET_TIMEOUT)', async () => {
    const socket = await connect(new HttpClient({ baseUrl: url }), { reconnection: false });
    try {
      const slow = await emitAck(socket, 'room:join', { chat_id: 1 }, 50).catch((e: unknown) => e);
      expect(slow).toBeInstanceOf(ParlorApiError);
      expect(slow).toMatchObject({ code: 'ERR_SOCKET_TIMEOUT', status: 0, source: 'socket' });

      const pending = emitAck(socket, 'room:join', { chat_id: 1 }, 10_000).catch((e: unknown) => e);
      socket.disconnect();
      const dropped = await pending;
      expect(dropped).toBeInstanceOf(ParlorApiError);
      expect(dropped).toMatchObject({ code: 'ERR_SOCKET_DISCONNECTED', status: 0, source: 'socket' });
    } finally {
      socket.disconnect();
    }
  });
});
