import { once } from 'node:events';
import net from 'node:net';
import { DrizzleQueryError } from 'drizzle-orm';

/** A port on 127.0.0.1 that nothing listens on (it was free a moment ago). */
export async function closedPort(): Promise<number> {
  const server = net.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The error of a real connection refused by the local machine (ECONNREFUSED). */
export async function connectionRefused(): Promise<Error & { code?: string }> {
  const socket = net.connect(await closedPort(), '127.0.0.1');
  const [err] = (await once(socket, 'error').catch((e: unknown) => [e])) as [Error & { code?: string }];
  return err;
}

/** A value that must never reach a log line. */
export const SECRET = 'ct-SECRET-9f8e7d';

/** A failed Drizzle query whose parameter is SECRET, as Drizzle throws it (the driver's error as cause). */
export function failedQuery(cause: unknown = new Error('division by zero')): DrizzleQueryError {
  return new DrizzleQueryError('select $1::text, 1/0', [SECRET], cause as Error);
}
