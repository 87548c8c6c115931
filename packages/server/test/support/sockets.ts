import type { ClientToServerEvents, ServerToClientEvents } from '@parlor/protocol';
import { io, type Socket } from 'socket.io-client';
import type { Client } from './client.js';

export type TestSocket = Socket<ServerToClientEvents, ClientToServerEvents> & {
  /** Every event received so far, in order. */
  received: { event: string; payload: any }[];
  /** Resolves with the first (past or future) event matching, or rejects after `ms`. */
  next(event: string, match?: (payload: any) => boolean, ms?: number): Promise<any>;
};

const open = new Set<Socket>();

/** Connects a Socket.IO client with the HTTP client's session cookie, and records its events. */
export async function connectSocket(base: string, client: Client, opts: { origin?: string } = {}): Promise<TestSocket> {
  const headers: Record<string, string> = {};
  if (client.cookie) headers.cookie = `psession=${client.cookie}`;
  if (opts.origin) headers.origin = opts.origin;
  const socket = io(base, {
    transports: ['websocket'],
    extraHeaders: headers,
    reconnection: false,
    forceNew: true,
  }) as TestSocket;
  open.add(socket);
  socket.received = [];
  const waiters: { event: string; match: (p: any) => boolean; resolve: (p: any) => void }[] = [];
  socket.onAny((event: string, payload: unknown) => {
    socket.received.push({ event, payload });
    for (const w of [...waiters]) {
      if (w.event === event && w.match(payload)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(payload);
      }
    }
  });
  socket.next = (event, match = () => true, ms = 15_000) => {
    const past = socket.received.find((r) => r.event === event && match(r.payload));
    if (past) return Promise.resolve(past.payload);
    return new Promise((resolve, reject) => {
      const w = { event, match, resolve };
      waiters.push(w);
      setTimeout(() => {
        const i = waiters.indexOf(w);
        if (i >= 0) {
          waiters.splice(i, 1);
          reject(new Error(`no ${event} within ${ms} ms; got ${socket.received.map((r) => r.event).join(', ')}`));
        }
      }, ms);
    });
  };
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('connect_error', (err) => reject(err));
  });
  return socket;
}

/** Resolves when the socket is disconnected (by the server), or rejects after `ms`. */
export function disconnected(socket: Socket, ms = 15_000): Promise<string> {
  if (socket.disconnected) return Promise.resolve('already');
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('still connected')), ms);
    socket.once('disconnect', (reason) => {
      clearTimeout(t);
      resolve(reason);
    });
  });
}

export function closeAllSockets(): void {
  for (const s of open) s.close();
  open.clear();
}
