import { describe, expect, it } from 'vitest';
import { logPublishFailures, PUBLISH_FAILURE_LOG_MS } from './adapter-failures.js';

describe('logPublishFailures', () => {
  it('logs the first failed cross-node message at once, then at most one line per interval with the count, and passes the failure on', async () => {
    let at = 0;
    const lines: Array<{ failed: number }> = [];
    let failing = true;
    const adapter = {
      doPublish: (_message: { type: number }) => (failing ? Promise.reject(new Error('down')) : Promise.resolve('1-0')),
    };
    logPublishFailures(adapter, { warn: (obj: object) => void lines.push(obj as { failed: number }) }, () => at);

    await expect(adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    expect(lines.map((l) => l.failed)).toEqual([1]);
    at = PUBLISH_FAILURE_LOG_MS - 1;
    await expect(adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    await expect(adapter.doPublish({ type: 6 })).rejects.toThrow('down');
    expect(lines).toHaveLength(1);
    at = PUBLISH_FAILURE_LOG_MS;
    await expect(adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    expect(lines.map((l) => l.failed)).toEqual([1, 3]);
    failing = false;
    await expect(adapter.doPublish({ type: 3 })).resolves.toBe('1-0');
    await expect(adapter.doPublish({ type: 3 })).resolves.toBe('1-0');
    // The send that succeeds again says how many failed since the last line (none here), once.
    expect(lines.map((l) => l.failed)).toEqual([1, 3, 0]);
  });

  it('says how many failed in a burst shorter than the interval once sends succeed again', async () => {
    let at = 0;
    const lines: Array<{ failed: number }> = [];
    let failing = true;
    const adapter = {
      doPublish: (_message: { type: number }) => (failing ? Promise.reject(new Error('down')) : Promise.resolve('1-0')),
    };
    logPublishFailures(adapter, { warn: (obj: object) => void lines.push(obj as { failed: number }) }, () => at);
    for (let i = 0; i < 500; i++) {
      at = i;
      await expect(adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    }
    failing = false;
    await adapter.doPublish({ type: 3 });
    expect(lines.map((l) => l.failed)).toEqual([1, 499]);
    // A new failure after the recovery is logged at once.
    failing = true;
    await expect(adapter.doPublish({ type: 3 })).rejects.toThrow('down');
    expect(lines.map((l) => l.failed)).toEqual([1, 499, 1]);
  });
});
