import { describe, expect, it } from 'vitest';
import type { PartFailure } from '../../platform/background.js';
import { CHAT_FAILURES_PER_STEP, drainByChat, FAILED_CHAT_RETRY_MS, HeldChats } from './chats.purge.js';
import type { DueChats } from './chats.purge.store.js';

/**
 * A step over chats with `rows` rows each, whose statements fail when they would touch a chat of
 * `bad` (as one statement over all the due chats does), answering the statements it was given.
 */
function step(rows: Map<number, number>, bad: Set<number>, failAll = false, bound = 200) {
  const statements: DueChats[] = [];
  const due = (except: readonly number[]) =>
    [...rows.keys()].filter((id) => rows.get(id) && !except.includes(id)).slice(0, bound);
  return {
    statements,
    rows,
    step: {
      name: 'clear messages',
      due: async (except: readonly number[]) => due(except),
      run: async (which: DueChats, limit: number) => {
        statements.push(which);
        const ids = 'only' in which ? [which.only] : [...rows.keys()].filter((id) => !which.except.includes(id));
        if (failAll || ids.some((id) => bad.has(id))) throw new Error('injected fault');
        let left = limit;
        for (const id of ids) {
          const n = Math.min(rows.get(id) ?? 0, left);
          rows.set(id, (rows.get(id) ?? 0) - n);
          left -= n;
        }
        return limit - left;
      },
    },
  };
}

/** No chat held yet, at time 0. */
const fresh = () => ({ chats: new HeldChats(), now: 0 });

describe('drainByChat', () => {
  it('does every due chat in one statement a batch when none fails', async () => {
    const s = step(
      new Map([
        [1, 2],
        [2, 2],
      ]),
      new Set(),
    );
    const failures: PartFailure[] = [];
    expect(await drainByChat(s.step, 10, 5, failures, fresh())).toBe(4);
    expect(s.statements).toEqual([{ except: [] }]);
    expect(failures).toEqual([]);
  });

  it('does each chat alone once a batch fails, the one that fails then left out of the later batches', async () => {
    const s = step(
      new Map([
        [1, 3],
        [2, 3],
        [3, 3],
      ]),
      new Set([1]),
    );
    const failures: PartFailure[] = [];
    // 3 rows a batch: the failed batch's chats alone clear chat 2, then chat 3 goes in batches without chat 1.
    expect(await drainByChat(s.step, 3, 5, failures, fresh())).toBe(6);
    expect(s.statements).toEqual([{ except: [] }, { only: 1 }, { only: 2 }, { except: [1] }, { except: [1] }]);
    expect([...s.rows]).toEqual([
      [1, 3],
      [2, 0],
      [3, 0],
    ]);
    expect(failures).toEqual([{ err: expect.any(Error), part: { step: 'clear messages', chatId: 1 } }]);
  });

  it('records the batch’s own failure when no chat fails alone', async () => {
    const s = step(new Map(), new Set(), true);
    const failures: PartFailure[] = [];
    expect(await drainByChat(s.step, 3, 5, failures, fresh())).toBe(0);
    expect(failures).toEqual([{ err: expect.any(Error), part: { step: 'clear messages' } }]);
  });

  it('reads the due chats again when all it read failed alone: the chats behind them go in the same tick', async () => {
    const s = step(
      new Map([
        [1, 3],
        [2, 3],
        [3, 3],
      ]),
      new Set([1, 2]),
      false,
      2,
    );
    const failures: PartFailure[] = [];
    expect(await drainByChat(s.step, 3, 5, failures, fresh())).toBe(3);
    expect(s.statements).toEqual([{ except: [] }, { only: 1 }, { only: 2 }, { only: 3 }, { except: [1, 2] }]);
    expect(s.rows.get(3)).toBe(0);
    expect(failures.map((f) => f.part)).toEqual([
      { step: 'clear messages', chatId: 1 },
      { step: 'clear messages', chatId: 2 },
    ]);
  });

  it('stops trying chats alone once CHAT_FAILURES_PER_STEP have failed in the tick (the table, not a chat, fails)', async () => {
    const s = step(new Map(Array.from({ length: 10 }, (_, i) => [i + 1, 1] as [number, number])), new Set(), true);
    const failures: PartFailure[] = [];
    expect(await drainByChat(s.step, 5, 5, failures, fresh())).toBe(0);
    expect(s.statements).toEqual([
      { except: [] },
      ...Array.from({ length: CHAT_FAILURES_PER_STEP }, (_, i) => ({ only: i + 1 })),
    ]);
    expect(failures).toHaveLength(CHAT_FAILURES_PER_STEP);
  });

  it('holds a chat that failed alone out of the next ticks’ statements until FAILED_CHAT_RETRY_MS has passed', async () => {
    const rows = new Map([
      [1, 1],
      [2, 1],
    ]);
    const held = new HeldChats();
    const first = step(rows, new Set([1]));
    await drainByChat(first.step, 5, 5, [], { chats: held, now: 1_000 });
    expect(rows.get(2)).toBe(0);
    rows.set(2, 1);
    const next = step(rows, new Set());
    await drainByChat(next.step, 5, 5, [], { chats: held, now: 1_000 + FAILED_CHAT_RETRY_MS - 1 });
    expect(next.statements).toEqual([{ except: [1] }]);
    expect(rows.get(1)).toBe(1);
    const later = step(rows, new Set());
    await drainByChat(later.step, 5, 5, [], { chats: held, now: 1_000 + FAILED_CHAT_RETRY_MS });
    expect(later.statements).toEqual([{ except: [] }]);
    expect(rows.get(1)).toBe(0);
  });
});
