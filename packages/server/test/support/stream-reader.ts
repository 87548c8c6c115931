import type { TestApp } from './app.js';

/**
 * Holds a node's cluster stream reader, as when it lags behind a burst: the entries it reads wait,
 * in order, until `release` delivers them. What other nodes send over pub/sub (the cross-node reads
 * of presence) is still answered at once.
 */
export function holdReader(node: TestApp) {
  type Read = (message: { data?: string }, offset: string) => void;
  const adapter = node.services.realtime.io.of('/').adapter as unknown as { onRawMessage: Read };
  const read = adapter.onRawMessage;
  const held: [{ data?: string }, string][] = [];
  adapter.onRawMessage = (message, offset) => {
    held.push([message, offset]);
  };
  return {
    count: () => held.length,
    holds: (text: string) => held.some(([message]) => message.data?.includes(text) === true),
    /** Delivers what was held, in order, and reads on as usual (again: nothing). */
    release() {
      if (adapter.onRawMessage === read) return;
      adapter.onRawMessage = read;
      for (const [message, offset] of held.splice(0)) read.call(adapter, message, offset);
    },
  };
}
