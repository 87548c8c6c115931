import type { FastifyBaseLogger } from 'fastify';

/** How often at most the failed cross-node messages are logged (ms): in a Redis outage every emit fails. */
export const PUBLISH_FAILURE_LOG_MS = 10_000;

/** The cluster adapter's send of one message to the other nodes (socket.io-adapter ClusterAdapter). */
interface Publishing {
  doPublish(message: { type: number }): Promise<string>;
}

/**
 * Logs the messages the socket adapter could not send to the other nodes (an emit, a socket drop,
 * a room change): the adapter swallows the failure into its debug output, and what the message
 * carried then reaches this node's sockets only. One warn line at the first failure, then at most
 * one per PUBLISH_FAILURE_LOG_MS with how many failed since; the first send that succeeds after
 * failures says how many failed since the last line (`failed`). The failure itself is passed on.
 */
export function logPublishFailures(adapter: object, log: Pick<FastifyBaseLogger, 'warn'>, now = () => Date.now()) {
  const publishing = adapter as Publishing;
  const send = publishing.doPublish.bind(adapter);
  /** Failures since the last line; whether any failed since the last success. */
  let failed = 0;
  let failing = false;
  let loggedAt = Number.NEGATIVE_INFINITY;
  publishing.doPublish = (message) =>
    send(message).then(
      (offset) => {
        if (failing) {
          log.warn({ failed }, 'socket messages sent to the other nodes again');
          failing = false;
          failed = 0;
          loggedAt = Number.NEGATIVE_INFINITY;
        }
        return offset;
      },
      (err: unknown) => {
        failed += 1;
        failing = true;
        if (now() - loggedAt >= PUBLISH_FAILURE_LOG_MS) {
          log.warn({ err, failed }, 'socket messages not sent to the other nodes; they reach this node only');
          loggedAt = now();
          failed = 0;
        }
        throw err;
      },
    );
}
