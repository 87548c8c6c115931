import { ErrorCodes } from '@parlor/protocol';
import type { FastifyBaseLogger } from 'fastify';
import { logFailure, toErrorBody } from './errors.js';
import type { AppSocket } from './socket-rooms.js';

/** The client-event registry's serving of one event: payload check, ack, refusals (realtime.on). */

/** A client event of a socket that may no longer act: refused (to its ack, if any), the socket dropped. */
export function refuseAndDrop(socket: AppSocket, packet: unknown[]): void {
  const ack = packet.at(-1);
  if (typeof ack === 'function')
    ack({ ok: false, code: 'ERR_UNAUTHENTICATED', message: ErrorCodes.ERR_UNAUTHENTICATED.message });
  socket.disconnect(true);
}

/**
 * An event no module serves: a client waiting for its ack is answered (ERR_NOT_FOUND) rather than
 * left to its timeout; without an ack it is dropped, as Socket.IO does for an event nobody listens to.
 */
export function refuseUnknown(packet: unknown[], next: () => void): void {
  const ack = packet.at(-1);
  if (typeof ack === 'function') ack({ ok: false, code: 'ERR_NOT_FOUND', message: 'No such event.' });
  else next();
}

export interface ClientEvent {
  event: string;
  valid: (payload: unknown) => boolean;
  run: (socket: AppSocket, payload: unknown) => Promise<object>;
}

/**
 * Answers one client event: ERR_VALIDATION for a bad payload, else the handler's result or error.
 * `args` are the event's arguments after its name; Socket.IO appends the ack callback last (when
 * the client asked for one), so whatever comes before it is the payload: exactly one argument,
 * else (none, or extra ones) the event is refused with nothing done.
 */
export function serveEvent(socket: AppSocket, h: ClientEvent, args: unknown[], log: FastifyBaseLogger): void {
  const last = args.at(-1);
  const reply = typeof last === 'function' ? (last as (a: unknown) => void) : () => {};
  const params = typeof last === 'function' ? args.slice(0, -1) : args;
  const payload = params[0];
  if (params.length !== 1 || !h.valid(payload)) {
    reply({ ok: false, code: 'ERR_VALIDATION', message: 'The payload is not valid.' });
    return;
  }
  Promise.resolve()
    .then(() => h.run(socket, payload))
    .then((result) => reply({ ok: true, ...result }))
    .catch((err: unknown) => {
      const answer = toErrorBody(err);
      const { body } = answer;
      logFailure(log, err, answer, { event: h.event });
      reply({
        ok: false,
        code: body.code,
        message: body.message,
        ...(body.ttl !== undefined ? { ttl: body.ttl } : {}),
        ...(body.retry_after !== undefined ? { retry_after: body.retry_after } : {}),
      });
    });
}
