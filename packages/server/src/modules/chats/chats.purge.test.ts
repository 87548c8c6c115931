import { describe, expect, it } from 'vitest';
import type { PartFailure } from '../../platform/background.js';
import { drainByChat } from './chats.purge.js';
import type { DueChats } from './chats.purge.store.js';

/**
 * A step over chats with `rows` rows each, whose statements fail when they would touch a chat of
 * `bad` (as one statement over all the due chats does), answering the statements it was given.
 */
function step(rows: Map<number, number>, bad: Set<number>, failAll = false) {
  const statements: DueChats[] = [];
  const due = (except: readonly number[]) => [...rows.keys()].filter((id) => rows.get(id) && !except.includes(id));
  return {
    statements,
    rows,
    step: {
      name: 'clear messages',
      due: async (except: readonly number[]) => due(except),
      run: async (which: DueChats, limit: number) => {
        statements.push(which);
        const ids = 'only' in which ? [which.only] : due(which.except);
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
    expect(await drainByChat(s.step, 10, 5, failures)).toBe(4);
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
    expect(await drainByChat(s.step, 3, 5, failures)).toBe(6);
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
    expect(await drainByChat(s.step, 3, 5, failures)).toBe(0);
    expect(failures).toEqual([{ err: expect.any(Error), part: { step: 'clear messages' } }]);
  });
});
