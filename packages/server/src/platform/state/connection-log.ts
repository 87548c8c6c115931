import type { Redis } from 'ioredis';

/** Where Redis connection changes are logged (the app's logger). */
export interface ConnectionLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/**
 * Logs one Redis connection's outages once each, not once per retry: the first error at warn
 * (with its error), the first reconnect attempt and the return (`ready` again) at info. ioredis
 * reconnects by itself; without an `error` listener a dropped connection would be an unhandled
 * error, so the listener is attached with or without a log.
 */
export function watchConnection(client: Redis, connection: string, log: ConnectionLog | undefined): void {
  let down = false;
  let errorLogged = false;
  let reconnectLogged = false;
  client.on('error', (err: Error) => {
    down = true;
    if (errorLogged) return;
    errorLogged = true;
    log?.warn({ err, redis: connection }, 'Redis connection failed; reconnecting');
  });
  client.on('reconnecting', (delayMs: number) => {
    down = true;
    if (reconnectLogged) return;
    reconnectLogged = true;
    log?.info({ redis: connection, delay_ms: delayMs }, 'Redis connection lost; reconnecting');
  });
  client.on('ready', () => {
    if (!down) return;
    down = false;
    errorLogged = false;
    reconnectLogged = false;
    log?.info({ redis: connection }, 'Redis connection back');
  });
}
