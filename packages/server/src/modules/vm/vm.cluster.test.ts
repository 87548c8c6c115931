import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import { AppError, appError } from '../../platform/errors.js';
import { MemoryState } from '../../platform/state/memory.js';
import { makeVmCluster, PLACE_TTL_MS } from './vm.cluster.js';

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
    const log = { warn: vi.fn(), error: vi.fn() };
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
    const caller = makeVmCluster(state, { log: { warn: vi.fn(), error: vi.fn() }, nodeId: 'caller' });
    await caller.ready;
    state.failing = /^vm:rpc:/;
    await expect(caller.call('elsewhere', 'stop', {})).rejects.toThrow('publish to vm:rpc:elsewhere failed');
    vi.advanceTimersByTime(60_000);
    for (let i = 0; i < 5; i++) await settle();
    expect(unhandled).toEqual([]);
    await caller.close();
  });

  it('still answers a call across nodes when publishing works', async () => {
    const log = { warn: vi.fn(), error: vi.fn() };
    const owner = makeVmCluster(state, { log, nodeId: 'owner' });
    const caller = makeVmCluster(state, { log, nodeId: 'caller' });
    await Promise.all([owner.ready, caller.ready]);
    owner.serve(async (op, args) => ({ op, args }));
    expect(await caller.call('owner', 'ping', { n: 1 })).toEqual({ op: 'ping', args: { n: 1 } });
    expect(log.warn).not.toHaveBeenCalled();
    await Promise.all([owner.close(), caller.close()]);
  });
});

describe('a request the owning node fails to serve', () => {
  it('relays a refusal as it is, an outage as 503 with Retry-After and a bug as ERR_INTERNAL, logging the last two there', async () => {
    const state = new MemoryState();
    const ownerLog = { warn: vi.fn(), error: vi.fn() };
    const callerLog = { warn: vi.fn(), error: vi.fn() };
    const owner = makeVmCluster(state, { log: ownerLog, nodeId: 'owner' });
    const caller = makeVmCluster(state, { log: callerLog, nodeId: 'caller' });
    await Promise.all([owner.ready, caller.ready]);
    const bug = new TypeError("Cannot read properties of undefined (reading 'controller')");
    owner.serve(async (op) => {
      if (op === 'refused') throw appError('ERR_FORBIDDEN', 'Only the member in control sends input.');
      // What ioredis rejects a command with when Redis cannot be reached (errors.ts, connectionFailure).
      if (op === 'outage') throw new Error('Connection is closed.');
      throw bug;
    });
    const answer = (op: string) =>
      caller.call('owner', op, {}).then(
        () => expect.unreachable(`${op} answered`),
        (e: unknown) => (e instanceof AppError ? { status: e.status, body: e.body() } : e),
      );
    try {
      expect(await answer('refused')).toEqual({
        status: 403,
        body: { code: 'ERR_FORBIDDEN', message: 'Only the member in control sends input.' },
      });
      expect(ownerLog.warn).not.toHaveBeenCalled();
      expect(ownerLog.error).not.toHaveBeenCalled();
      expect(await answer('outage')).toEqual({
        status: 503,
        body: { code: 'ERR_SERVICE_UNAVAILABLE', message: 'The service is not available right now.', retry_after: 5 },
      });
      expect(ownerLog.warn).toHaveBeenLastCalledWith(
        {
          store_error: { type: 'Error', code: undefined, message: 'Connection is closed.' },
          op: 'outage',
          from: 'caller',
        },
        'backing store unavailable',
      );
      expect(await answer('bug')).toEqual({
        status: 500,
        body: { code: 'ERR_INTERNAL', message: 'Something went wrong on our side.' },
      });
      expect(ownerLog.error).toHaveBeenCalledWith(
        { err: bug, op: 'bug', from: 'caller' },
        'unexpected error serving another node',
      );
      expect(ownerLog.warn).toHaveBeenCalledTimes(1);
      expect(ownerLog.error).toHaveBeenCalledTimes(1);
      expect(callerLog.warn).not.toHaveBeenCalled();
      expect(callerLog.error).not.toHaveBeenCalled();
    } finally {
      await Promise.all([owner.close(), caller.close()]);
      await state.close();
    }
  });
});

describe('the room map after a node stalled past its entry’s lifetime', () => {
  it('the stalled node neither overwrites nor releases the entry of the node that took the room', async () => {
    const clock = new FakeClock(Date.UTC(2026, 10, 25));
    const state = new MemoryState(clock);
    const log = { warn: vi.fn(), error: vi.fn() };
    const a = makeVmCluster(state, { log, nodeId: 'node-a' });
    const b = makeVmCluster(state, { log, nodeId: 'node-b' });
    await Promise.all([a.ready, b.ready]);
    try {
      expect(await a.claim(7)).toBeNull();
      expect(await a.hold(7, 'running')).toBe(true);
      // Node A stalls past the entry's lifetime; node B claims the stopped-looking room.
      clock.advance(PLACE_TTL_MS);
      expect(await b.claim(7)).toBeNull();
      expect(await a.hold(7, 'running')).toBe(false);
      await a.release(7);
      expect(await a.placeOf(7)).toEqual({ node: 'node-b', state: 'starting' });
      // B's own hold and release still work.
      expect(await b.hold(7, 'running')).toBe(true);
      expect(await b.placeOf(7)).toEqual({ node: 'node-b', state: 'running' });
      await b.release(7);
      expect(await b.placeOf(7)).toBeNull();
      // Holds of this node's own at once (the sweep's and a launch's) all keep the entry.
      expect(await a.claim(9)).toBeNull();
      expect(await Promise.all([a.hold(9, 'starting'), a.hold(9, 'running'), a.hold(9, 'running')])).toEqual([
        true,
        true,
        true,
      ]);
      expect((await a.placeOf(9))?.node).toBe('node-a');
      // An entry that lapsed with nobody claiming it is taken back by its holder.
      expect(await a.claim(8)).toBeNull();
      clock.advance(PLACE_TTL_MS);
      expect(await a.hold(8, 'running')).toBe(true);
      expect(await b.placeOf(8)).toEqual({ node: 'node-a', state: 'running' });
    } finally {
      await a.close();
      await b.close();
      await state.close();
    }
  });
});
