import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  type Answer,
  type Ask,
  CROSS_NODE_READ_TIMEOUT_MS,
  crossNodeReads,
  SOCKET_READ_EVENTS,
} from './socket-reads.js';

/** One node's namespace as the reads see it: no local socket, `others` other nodes counted after `countMs`. */
function fakeNode(others: number, countMs: number) {
  const listeners = new Map<string, (message: never) => void>();
  const asked: Ask[] = [];
  const nsp = {
    sockets: new Map(),
    adapter: {
      rooms: new Map(),
      serverCount: () => new Promise<number>((resolve) => setTimeout(() => resolve(others + 1), countMs)),
    },
    on: (event: string, fn: (message: never) => void) => listeners.set(event, fn),
    serverSideEmit: (event: string, message: Ask) => {
      if (event === SOCKET_READ_EVENTS.ask) asked.push(message);
    },
  };
  const answer = (a: Answer) => (listeners.get(SOCKET_READ_EVENTS.answer) as (a: Answer) => void)(a);
  return { io: { of: () => nsp }, asked, answer };
}

const log = { warn: vi.fn() };
const socket = (id: string) => ({ id, data: { userId: 1 } as never, rooms: [] });

afterEach(() => {
  vi.useRealTimers();
  log.warn.mockClear();
});

describe('crossNodeReads().socketsIn', () => {
  it('keeps the answers of the nodes that answered when another is silent', async () => {
    vi.useFakeTimers();
    const node = fakeNode(2, 0);
    const read = crossNodeReads(node.io as never, log as never).socketsIn('chat:1');
    await vi.advanceTimersByTimeAsync(0);
    expect(node.asked).toHaveLength(1);
    node.answer({ id: node.asked[0]?.id ?? '', sockets: [socket('b1')] });
    await vi.advanceTimersByTimeAsync(CROSS_NODE_READ_TIMEOUT_MS);
    const { sockets, complete } = await read;
    expect([sockets.map((s) => s.id), complete]).toEqual([['b1'], false]);
    expect(log.warn).toHaveBeenCalledTimes(1);
  });

  it('asks nobody once it has given up while the count of nodes was on its way (a slow Redis)', async () => {
    vi.useFakeTimers();
    const node = fakeNode(1, CROSS_NODE_READ_TIMEOUT_MS + 500);
    const read = crossNodeReads(node.io as never, log as never).socketsIn(null);
    await vi.advanceTimersByTimeAsync(CROSS_NODE_READ_TIMEOUT_MS);
    expect(await read).toEqual({ sockets: [], complete: false });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(node.asked).toEqual([]);
  });
});
