import type { ServerToClientEvents } from '@parlor/protocol';
import type { ChatKeying } from './e2e-keying.js';
import type { MessageDelivery } from './e2e-messages.js';
import type { SessionResync } from './e2e-resync.js';
import { type E2EChatSessionEvents, E2ESessionError } from './e2e-types.js';
import { type BadServerEventDetails, type CheckedServerEvent, onChecked } from './server-events.js';
import { keepConnected, type ParlorSocket } from './socket.js';

/** E2EChatSession's `emit`. */
export type SessionEmit = <K extends keyof E2EChatSessionEvents>(
  event: K,
  arg: Parameters<E2EChatSessionEvents[K]>[0],
) => void;

/** The parts of an E2EChatSession its server events go to. */
export interface SessionEventsHost {
  socket: ParlorSocket;
  keying: ChatKeying;
  delivery: MessageDelivery;
  resync: SessionResync;
  isClosed: () => boolean;
  emit: SessionEmit;
  /** Forgets a chat the session is no longer in. */
  forget: (chatId: number) => void;
  /** Ends the session (emits `closed` with `e`). */
  end: (e: Parameters<E2EChatSessionEvents['closed']>[0]) => void;
}

/**
 * Subscribes an E2EChatSession to the server's events on its socket, and keeps the socket
 * connected. Returns what stops it all.
 */
export function listenToServer(host: SessionEventsHost): () => void {
  const { socket, keying, delivery, resync, emit } = host;
  const unsubscribe: (() => void)[] = [];
  // Every payload is checked before it is used: a listener runs inside Socket.IO, where what it
  // throws is uncaught (in Node the process ends), so a malformed event is reported and dropped.
  const on = <E extends CheckedServerEvent>(event: E, handler: ServerToClientEvents[E], onBad?: () => void) => {
    const bad = (details: BadServerEventDetails) => {
      badEvent(host, details);
      onBad?.();
    };
    const threw = (error: unknown) => {
      if (host.isClosed()) return;
      emit('error', new E2ESessionError('BACKGROUND_FAILURE', `Handling ${event} failed.`, { cause: error }));
    };
    unsubscribe.push(onChecked(socket, event, handler, bad, threw));
  };
  on('room:key', (e) =>
    keying.accept({ chatId: e.chat_id, epoch: e.epoch, envelope: e.envelope, sender: e.sender_session_id }),
  );
  on('room:rekey', (e) => keying.rekey(e.chat_id, e.epoch));
  on('portal:key_added', (e) => keying.keyAdded(e.chat_id, e.user_id, e.session_id, e.public_key));
  on('portal:key_removed', (e) => keying.keyRemoved(e.chat_id, e.user_id, e.session_id));
  on('message:new', (m) => delivery.push(m));
  on('message:bulk_deleted', (e) => {
    delivery.deleted(e.room_id, e.deleted_ids);
    emit('deleted', { chatId: e.room_id, ids: e.deleted_ids, deletedBy: e.deleted_by });
  });
  on('room:left', (e) => {
    host.forget(e.chat_id);
    emit('left', { chatId: e.chat_id, reason: e.reason });
  });
  on(
    'chat:list',
    (e) => {
      // The socket came back as another login session (its cookie changed while it was away): the
      // server gave it none of this session's rooms, and no envelope will name this session there.
      const sessionId = keying.sessionId;
      if (sessionId !== null && e.session_id !== sessionId) {
        host.end({ reason: 'session_changed' });
        return;
      }
      resync.chatList(e.chats.map((chat) => chat.id));
    },
    () => resync.chatList(null),
  );
  // The socket is connected when the session starts, so every later `connect` is a reconnection.
  const onConnect = () => resync.connected();
  const onDisconnect = (reason: string) => {
    resync.disconnected();
    if (!host.isClosed()) emit('disconnected', { reason });
  };
  socket.on('connect', onConnect);
  socket.on('disconnect', onDisconnect);
  unsubscribe.push(() => {
    socket.off('connect', onConnect);
    socket.off('disconnect', onDisconnect);
  });
  // Socket.IO does not reconnect after the server dropped the socket or refused a reconnection.
  // The server refused this session for good on a reconnection: report it, then close.
  const stopSupervising = keepConnected(socket, {
    onRefused: (error) => host.end({ reason: 'refused', code: error.code, error }),
  });
  return () => {
    stopSupervising();
    for (const off of unsubscribe.splice(0)) off();
  };
}

/** Reports a server event that was dropped because its payload has the wrong shape. */
function badEvent(host: SessionEventsHost, details: BadServerEventDetails): void {
  if (host.isClosed()) return;
  const message = `The server sent ${details.event} with a malformed payload; it was ignored.`;
  host.emit('error', new E2ESessionError('BAD_SERVER_EVENT', message, { details }));
}
