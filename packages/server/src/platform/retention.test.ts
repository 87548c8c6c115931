import { describe, expect, it } from 'vitest';
import { fakeTaskLog } from '../../test/support/task-log.js';
import { FakeClock } from './clock.js';
import { makeRetention, RETENTION_TASK, type RetentionRule } from './retention.js';

/** A rule over `due` rows whose prune records the cut-off it was given. */
function rule(name: string, keepMs: number, due: number, cutOffs: Date[]): RetentionRule {
  let left = due;
  return {
    name,
    keepMs,
    prune: async (before, limit) => {
      cutOffs.push(before);
      const taken = Math.min(limit, left);
      left -= taken;
      return taken;
    },
  };
}

describe('makeRetention', () => {
  it('prunes each rule from its own window, batch after batch, and answers the rows per rule', async () => {
    const clock = new FakeClock(Date.UTC(2026, 0, 10));
    const cutOffs: Date[] = [];
    const { log } = fakeTaskLog();
    const retention = makeRetention(clock, [rule('a', 1_000, 5, cutOffs), rule('b', 60_000, 0, cutOffs)], log);
    expect(await retention.run({ batch: 2, maxBatches: 10 })).toEqual({ a: 5, b: 0 });
    const now = clock.now().getTime();
    expect(cutOffs.map((d) => now - d.getTime())).toEqual([1_000, 1_000, 1_000, 60_000]);
  });

  it('runs the other rules when one fails, and logs the failure with the rule name', async () => {
    const { log, lines } = fakeTaskLog();
    const cutOffs: Date[] = [];
    const broken: RetentionRule = {
      name: 'notifications',
      keepMs: 1_000,
      prune: () => Promise.reject(new Error('relation "notifications" does not exist')),
    };
    const retention = makeRetention(
      new FakeClock(),
      [rule('sessions', 1_000, 3, cutOffs), broken, rule('bot_commands', 1_000, 2, cutOffs)],
      log,
    );
    expect(await retention.run()).toEqual({ sessions: 3, bot_commands: 2 });
    expect(lines).toEqual([
      ['error', 'background task step failed', { err: expect.any(Error), task: RETENTION_TASK, step: 'notifications' }],
    ]);
  });
});
