import { describe, expect, it } from 'vitest';
import { logPublishFailures, PUBLISH_FAILURE_LOG_MS } from './adapter-failures.js';

/** An adapter whose sends fail while `failing`, logged on a clock the test moves (`at`). */
function fakeAdapter() {
  const node = {
    at: 0,
    failing: true,
    lines: [] as Array<{ failed: number }>,
    adapter: {
      doPublish: (_message: { type: number }) =>
        node.failing ? Promise.reject(new Error('down')) : Promise.resolve('1-0'),
    },
    /** The `failed` count of each line logged so far. */
    counts: () => node.lines.map((l) => l.failed),
  };
  logPublishFailures(
    node.adapter,
    { warn: (obj: object) => void node.lines.push(obj as { failed: number }) },
    () => node.at,
  );
  return node;
}

describe('logPublishFailures', () => {
  it('logs the first failed cross-node message at once, then at most one line per interval with the count, and passes the failure on', async () => {
    const node = fakeAdapter();
    const { adapter } = node;
    await expect(adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    expect(node.counts()).toEqual([1]);
    node.at = PUBLISH_FAILURE_LOG_MS - 1;
    await expect(adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    await expect(adapter.doPublish({ type: 6 })).rejects.toThrow('down');
    expect(node.counts()).toEqual([1]);
    node.at = PUBLISH_FAILURE_LOG_MS;
    await expect(adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    expect(node.counts()).toEqual([1, 3]);
    node.failing = false;
    await expect(adapter.doPublish({ type: 3 })).resolves.toBe('1-0');
    await expect(adapter.doPublish({ type: 3 })).resolves.toBe('1-0');
    // The send that succeeds again says how many failed since the last line (none here), once.
    expect(node.counts()).toEqual([1, 3, 0]);
  });

  it('says how many failed in a burst shorter than the interval once sends succeed again', async () => {
    const node = fakeAdapter();
    for (let i = 0; i < 500; i++) {
      node.at = i;
      await expect(node.adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    }
    node.failing = false;
    await node.adapter.doPublish({ type: 3 });
    expect(node.counts()).toEqual([1, 499]);
    // A new failure after the recovery is logged at once.
    node.failing = true;
    await expect(node.adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    expect(node.counts()).toEqual([1, 499, 1]);
  });
});
