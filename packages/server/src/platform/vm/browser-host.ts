import { createHash, timingSafeEqual } from 'node:crypto';
import type { Server as HttpServer } from 'node:http';
import type { Static } from '@sinclair/typebox';
import { Server, type Socket } from 'socket.io';
import { appError } from '../errors.js';
import { compilePayload } from '../validation.js';
import {
  errorAck,
  type HostAck,
  HostPayloads,
  type HostToNodeEvents,
  type NodeToHostEvents,
  toWire,
  type WireInfo,
} from './host-protocol.js';
import type { VmProvider } from './provider.js';

/**
 * A browser host: room browsers of one machine (any VmProvider, the local Chromium one in
 * practice) served to Parlor nodes over Socket.IO (host-protocol.ts), for deployments where the
 * nodes' own machines should not run browsers (docs/operations.md "Browser hosts").
 *
 * Only nodes holding the token connect. Each connection starts and owns its rooms; another node
 * cannot stop, drive or watch them (it relays through the node that runs the room, as between
 * nodes with local browsers). A connection that drops takes its rooms with it.
 */
export interface BrowserHostOptions {
  provider: VmProvider;
  /** VM_HOST_TOKEN: what a node must present (`auth.token`). */
  token: string;
  /**
   * The host's own VM_ALLOW_PRIVATE_NETWORKS (unset: false). A room's browser reaches private
   * networks only when both the host and the node that starts it allow that: a node cannot turn
   * the host's network guard off.
   */
  allowPrivateNetworks?: boolean;
  log?: (message: string) => void;
}

type HostSocket = Socket<NodeToHostEvents, HostToNodeEvents>;

const digest = (s: string) => createHash('sha256').update(s).digest();

type HostEvent = keyof typeof HostPayloads;
type PayloadOf<E extends HostEvent> = Static<(typeof HostPayloads)[E]>;
const validators = Object.fromEntries(
  Object.entries(HostPayloads).map(([event, schema]) => [event, compilePayload(schema)]),
) as { [E in HostEvent]: (p: unknown) => p is PayloadOf<E> };

export function createBrowserHost(server: HttpServer, opts: BrowserHostOptions) {
  const { provider } = opts;
  const expected = digest(opts.token);
  const io = new Server<NodeToHostEvents, HostToNodeEvents>(server, {
    path: '/browser-host',
    serveClient: false,
    transports: ['websocket'],
    // A frame is a JPEG of up to a few hundred KiB; what nodes send is small.
    maxHttpBufferSize: 64 * 1024,
  });
  /** Which connection owns each room. */
  const owners = new Map<string, HostSocket>();
  const subscriptions = new Map<string, () => void>();
  /** Starts in flight, settled either way. */
  const starting = new Map<string, Promise<void>>();

  const unsubscribe = (roomId: string) => {
    subscriptions.get(roomId)?.();
    subscriptions.delete(roomId);
  };
  const release = (roomId: string) => {
    unsubscribe(roomId);
    owners.delete(roomId);
  };

  provider.onStopped((roomId, reason) => {
    const owner = owners.get(roomId);
    release(roomId);
    owner?.emit('host:stopped', { roomId, reason });
  });

  io.use((socket, next) => {
    const token = (socket.handshake.auth as { token?: unknown }).token;
    const ok = typeof token === 'string' && timingSafeEqual(digest(token), expected);
    next(ok ? undefined : new Error('ERR_UNAUTHENTICATED'));
  });

  io.on('connection', (socket: HostSocket) => {
    /**
     * Serves an event: a payload that fails its schema gets ERR_VALIDATION; otherwise the
     * handler's result, or its error, is the ack. Never throws.
     */
    const serve = <E extends HostEvent, T extends object>(event: E, run: (p: PayloadOf<E>) => Promise<T> | T) => {
      const valid = validators[event];
      (socket as unknown as { on(e: string, fn: (p: unknown, ack: unknown) => void): void }).on(event, (p, ack) => {
        const reply = typeof ack === 'function' ? (ack as (a: HostAck<T>) => void) : () => {};
        if (!valid(p)) {
          reply({ ok: false, code: 'ERR_VALIDATION', message: `The ${event} payload is not valid.` });
          return;
        }
        Promise.resolve()
          .then(() => run(p))
          .then((out) => reply({ ok: true, ...out }))
          .catch((err: unknown) => {
            const a = errorAck(err);
            if (a.code === 'ERR_INTERNAL') opts.log?.(`browser host: ${err instanceof Error ? err.message : err}`);
            reply(a);
          });
      });
    };
    /** Rooms are the starting connection's: others get "not running", as if there were no room. */
    const own = (roomId: string) => {
      if (owners.get(roomId) !== socket) throw appError('ERR_ROOM_NOT_RUNNING');
      return roomId;
    };

    serve('host:start', async ({ roomId, spec }) => {
      const owner = owners.get(roomId);
      if (owner && owner !== socket) throw appError('ERR_ROOM_START_FAILED', 'Another node runs this room.');
      // Claimed while it starts, so another node's start of the same room is refused meanwhile.
      owners.set(roomId, socket);
      const allowPrivateNetworks = spec.allowPrivateNetworks && opts.allowPrivateNetworks === true;
      const launch = provider.start(roomId, { ...spec, allowPrivateNetworks });
      const settled = launch.then(
        () => {},
        () => {},
      );
      starting.set(roomId, settled);
      void settled.then(() => {
        if (starting.get(roomId) === settled) starting.delete(roomId);
      });
      let info: Awaited<typeof launch>;
      try {
        info = await launch;
      } catch (err) {
        if (owners.get(roomId) === socket && !provider.status(roomId)) owners.delete(roomId);
        throw err;
      }
      // The connection may have dropped while the browser started (its rooms were released).
      if (socket.disconnected || owners.get(roomId) !== socket) {
        await provider.stop(roomId);
        throw appError('ERR_ROOM_START_FAILED', 'The node went away while the room started.');
      }
      return { info: toWire(info) };
    });
    serve('host:stop', async ({ roomId }) => {
      if (owners.get(roomId) !== socket) return {};
      const launching = starting.get(roomId);
      if (launching) {
        // A stop of a room still starting (stopped meanwhile, or the node gave up waiting) kills the
        // browser being launched at once, rather than after its launch: that start answers it failed.
        // The room stays the node's until then, so no other node's start of it comes between.
        await provider.stop(roomId);
        await launching;
        if (owners.get(roomId) !== socket) return {};
      }
      release(roomId);
      await provider.stop(roomId);
      return {};
    });
    serve('host:rooms', () => ({
      rooms: provider
        .list()
        .filter((i) => owners.get(i.roomId) === socket)
        .map(toWire) as WireInfo[],
    }));
    serve('host:input', async (p) => {
      await provider.input(own(p.roomId), p.input);
      return {};
    });
    serve('host:release', async ({ roomId }) => {
      await provider.releaseInput(own(roomId));
      return {};
    });
    serve('host:navigate', async (p) => {
      await provider.navigate(own(p.roomId), p.nav);
      return {};
    });
    serve('host:subscribe', ({ roomId }) => {
      own(roomId);
      if (!subscriptions.has(roomId)) {
        subscriptions.set(
          roomId,
          provider.subscribe(roomId, (f) => {
            socket.volatile.emit('host:frame', {
              roomId,
              seq: f.seq,
              mime: f.mime,
              data: f.data,
              width: f.width,
              height: f.height,
            });
          }),
        );
      }
      return {};
    });
    serve('host:unsubscribe', ({ roomId }) => {
      if (owners.get(roomId) === socket) unsubscribe(roomId);
      return {};
    });
    socket.on('disconnect', () => {
      for (const [roomId, owner] of [...owners]) {
        if (owner !== socket) continue;
        release(roomId);
        provider.stop(roomId).catch((err: unknown) => opts.log?.(`browser host: stopping ${roomId}: ${err}`));
      }
    });
  });

  return {
    io,
    /** Rooms per owning connection (statistics, tests). */
    rooms: () => owners.size,
    /** Disconnects every node and stops every room. */
    async close() {
      io.disconnectSockets(true);
      for (const roomId of [...owners.keys()]) release(roomId);
      await provider.close();
      await new Promise<void>((resolve) => io.close(() => resolve()));
    },
  };
}

export type BrowserHost = ReturnType<typeof createBrowserHost>;
