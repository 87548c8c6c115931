/**
 * The bare Socket.IO reference for the connect storm, in a process of its own (lib/child.mjs): the
 * same socket.io server options as Parlor's (websocket transport from the client, connection
 * state recovery on, no client bundle), no authentication and no storage. On connection it does
 * what Parlor's handlers do without their queries: joins the user and session rooms and emits a
 * `chat:list` (empty). It shows how much of the gap to raw `ws` is the protocol itself.
 * Commands: start → { url }, close (plus the built-in memory and exit).
 */
import http from 'node:http';
import { Server } from 'socket.io';

let server = null;
let io = null;
let next = 0;

export const commands = {
  async start() {
    if (server) return { url: `http://127.0.0.1:${server.address().port}` };
    server = http.createServer();
    io = new Server(server, {
      path: '/socket.io',
      serveClient: false,
      // Parlor's SOCKET_MESSAGE_MAX_BYTES (platform/realtime.ts).
      maxHttpBufferSize: 32 * 1024,
      connectionStateRecovery: { maxDisconnectionDuration: 2 * 60 * 1000, skipMiddlewares: false },
    });
    io.on('connection', (socket) => {
      const id = next++;
      void socket.join([`user:${id}`, `session:${id}`]);
      socket.emit('chat:list', { chats: [] });
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${server.address().port}` };
  },
  async close() {
    await new Promise((resolve) => (io ? io.close(() => resolve()) : resolve()));
    server = null;
    io = null;
  },
};
