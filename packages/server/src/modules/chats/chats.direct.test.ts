import { describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import type { MessagesService } from '../messages/messages.service.js';
import { makeDirectChats } from './chats.direct.js';
import { CHAT_ROWS_TABLES } from './chats.purge.store.js';
import type { ChatsStore } from './chats.store.js';

/** The direct chats over a store stand-in (only what the sweep reads), with the sweep's listeners and log. */
function sweeper(store: Partial<ChatsStore>) {
  const archivedChats = vi.fn();
  const log = { error: vi.fn(), warn: vi.fn() };
  const direct = makeDirectChats({
    db: {} as Db,
    store: store as ChatsStore,
    clock: new FakeClock(Date.now()),
    messages: {} as MessagesService,
    realtime: { emitTo: vi.fn(), io: {} as never, leaveChat: vi.fn() },
    mustGet: async () => {
      throw new Error('not used');
    },
    removedChats: vi.fn(),
    archivedChats,
    log,
  });
  return { direct, archivedChats, log };
}

describe('sweepDirect', () => {
  it('runs the remove and purge steps when the archive step fails, logging the failure with its name', async () => {
    const calls: string[] = [];
    const store = {
      archiveDue: async () => {
        calls.push('archive');
        throw new Error('archive broke');
      },
      memberCounts: async () => new Map<number, number>(),
      removeDue: async () => {
        calls.push('remove');
        return { removed: [], members: [] };
      },
      clearDeleted: async (table: string) => {
        calls.push(`clear ${table}`);
        return 0;
      },
      purgeDeleted: async () => {
        calls.push('purge');
        return 2;
      },
    } as unknown as ChatsStore;
    const { direct, log } = sweeper(store);
    expect(await direct.sweepDirect()).toEqual({ archived: 0, removed: 0, cleared: 0, purged: 2 });
    expect(calls).toEqual(['archive', 'remove', ...CHAT_ROWS_TABLES.map((t) => `clear ${t}`), 'purge']);
    expect(log.error).toHaveBeenCalledTimes(1);
    expect(log.error.mock.calls[0]?.[0]).toMatchObject({ task: 'direct-chat-lifecycle', step: 'archive' });
  });

  it('tells the archive listeners of archived chats even when the member count read after the archive fails', async () => {
    const store = {
      archiveDue: async () => [{ id: 7 }, { id: 8 }],
      memberCounts: async () => {
        throw new Error('count broke');
      },
      removeDue: async () => ({ removed: [], members: [] }),
      clearDeleted: async () => 0,
      purgeDeleted: async () => 0,
    } as unknown as ChatsStore;
    const { direct, archivedChats, log } = sweeper(store);
    await direct.sweepDirect();
    expect(archivedChats).toHaveBeenCalledWith([7, 8]);
    expect(log.error.mock.calls[0]?.[0]).toMatchObject({ task: 'direct-chat-lifecycle', step: 'archive' });
  });
});

describe('announceLeft', () => {
  /** The direct chats whose chat reads fail with `failure`, with the calls a leave's announcement makes. */
  function announcer(failure: Error) {
    const publish = vi.fn();
    const emitTo = vi.fn();
    const archivedChats = vi.fn();
    const direct = makeDirectChats({
      db: {} as Db,
      store: {} as ChatsStore,
      clock: new FakeClock(Date.now()),
      messages: { publish } as unknown as MessagesService,
      realtime: { emitTo, io: {} as never, leaveChat: vi.fn() },
      mustGet: async () => {
        throw failure;
      },
      removedChats: vi.fn(),
      archivedChats,
      log: { error: vi.fn(), warn: vi.fn() },
    });
    const left = { chatIds: [7], systems: [{ id: '1-0' } as never] };
    return { announce: () => direct.announceLeft(left), publish, emitTo, archivedChats };
  }

  it('announces a committed leave of a chat deleted since (no chat:updated) without failing', async () => {
    const { announce, publish, emitTo, archivedChats } = announcer(appError('ERR_CHAT_NOT_FOUND'));
    await expect(announce()).resolves.toBeUndefined();
    expect(publish).toHaveBeenCalledWith({ id: '1-0' });
    expect(archivedChats).toHaveBeenCalledWith([7]);
    expect(emitTo).not.toHaveBeenCalled();
  });

  it('still fails on any other failure of the chat read', async () => {
    await expect(announcer(new Error('database gone')).announce()).rejects.toThrow('database gone');
  });
});
