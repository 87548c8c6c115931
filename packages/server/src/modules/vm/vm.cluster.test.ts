import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { MemoryState } from '../../platform/state/memory.js';
import { makeVmCluster } from './vm.cluster.js';

/** An in-process state store whose publishes to matching channels fail, as during a Redis blip. */
class FlakyState extends MemoryState {
  failing: RegExp | null = null;
  override async publish(channel: string, message: string): Promise<void> {
    if (this.failing?.test(channel)) throw new Error(`publish to ${channel} failed`);
    return super.publish(channel, message);
  }
}

/** Lets pending promise callbacks and timers of this turn run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('vm cluster plumbing when the state store fails to publish', () => {
  let state: FlakyState;
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  beforeEach(() => {
    state = new FlakyState();
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });
  afterEach(async () => {
    process.off('unhandledRejection', onUnhandled);
    vi.useRealTimers();
    await state.close();
  });

  it('logs a reply that cannot be sent to the calling node instead of rejecting unhandled', async () => {
    const log = { warn: vi.fn() };
    const owner = makeVmCluster(state, { log, nodeId: 'owner' });
    await owner.ready;
    owner.serve(async (op) => ({ done: op }));
    state.failing = /^vm:rpc-reply:/;
    // A request from another node, as it arrives on the owner's channel.
    await state.publish('vm:rpc:owner', JSON.stringify({ id: 'r1', from: 'caller', op: 'stop', args: {} }));
    for (let i = 0; i < 5; i++) await settle();
    expect(unhandled).toEqual([]);
    expect(log.warn).toHaveBeenCalledWith(
      expect.objectContaining({ op: 'stop', to: 'caller' }),
      'room VM reply to another node failed',
    );
    await owner.close();
  });

  it('rejects a call whose request cannot be sent, and leaves no timeout to reject later', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const caller = makeVmCluster(state, { log: { warn: vi.fn() }, nodeId: 'caller' });
    await caller.ready;
    state.failing = /^vm:rpc:/;
    await expect(caller.call('elsewhere', 'stop', {})).rejects.toThrow('publish to vm:rpc:elsewhere failed');
    vi.advanceTimersByTime(60_000);
    for (let i = 0; i < 5; i++) await settle();
    expect(unhandled).toEqual([]);
    await caller.close();
  });

  it('still answers a call across nodes when publishing works', async () => {
    const log = { warn: vi.fn() };
    const owner = makeVmCluster(state, { log, nodeId: 'owner' });
    const caller = makeVmCluster(state, { log, nodeId: 'caller' });
    await Promise.all([owner.ready, caller.ready]);
    owner.serve(async (op, args) => ({ op, args }));
    expect(await caller.call('owner', 'ping', { n: 1 })).toEqual({ op: 'ping', args: { n: 1 } });
    expect(log.warn).not.toHaveBeenCalled();
    await Promise.all([owner.close(), caller.close()]);
  });
});
