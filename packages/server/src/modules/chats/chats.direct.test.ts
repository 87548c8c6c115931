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
  const emitTo = vi.fn();
  const log = { error: vi.fn(), warn: vi.fn() };
  const direct = makeDirectChats({
    db: {} as Db,
    store: store as ChatsStore,
    clock: new FakeClock(Date.now()),
    messages: {} as MessagesService,
    realtime: { emitTo, io: {} as never, leaveChat: vi.fn() },
    mustGet: async () => {
      throw new Error('not used');
    },
    removedChats: vi.fn(),
    archivedChats,
    log,
  });
  return { direct, archivedChats, emitTo, log };
}

describe('sweepDirect', () => {
  it('runs the remove and purge steps when the archive step fails, logging the failure with its name', async () => {
    const calls: string[] = [];
    const store = {
      archiveDue: async () => {
        calls.push('archive');
        throw new Error('archive broke');
      },
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

  it('clears the other tables and purges the chats already empty when one table’s clear fails, logging that table', async () => {
    const calls: string[] = [];
    const store = {
      archiveDue: async () => [],
      removeDue: async () => ({ removed: [], members: [] }),
      clearDeleted: async (table: string) => {
        calls.push(`clear ${table}`);
        if (table === 'messages') throw new Error('messages broke');
        return 1;
      },
      purgeDeleted: async () => {
        calls.push('purge');
        return 1;
      },
    } as unknown as ChatsStore;
    const { direct, log } = sweeper(store);
    expect(await direct.sweepDirect()).toEqual({
      archived: 0,
      removed: 0,
      cleared: CHAT_ROWS_TABLES.length - 1,
      purged: 1,
    });
    expect(calls).toEqual([...CHAT_ROWS_TABLES.map((t) => `clear ${t}`), 'purge']);
    expect(log.error).toHaveBeenCalledTimes(1);
    expect(log.error.mock.calls[0]?.[0]).toMatchObject({ task: 'direct-chat-lifecycle', step: 'clear messages' });
  });

  it('sends chat:updated for each archived chat with the members its archive statement read, reading nothing after it', async () => {
    const chat = (id: number) => ({
      id,
      type: 'direct',
      name: 'a & b',
      ownerUserId: null,
      epoch: 1,
      msgMs: 0,
      msgSeq: 0,
      restrictionsSeq: 0,
      expiresAt: new Date(0),
      matchToken: 't',
      archivedAt: new Date(0),
      createdAt: new Date(0),
      updatedAt: new Date(0),
      deletedAt: null,
      memberCount: 2,
    });
    const store = {
      archiveDue: async () => [chat(7), chat(8)],
      removeDue: async () => ({ removed: [], members: [] }),
      clearDeleted: async () => 0,
      purgeDeleted: async () => 0,
    } as unknown as ChatsStore;
    const { direct, archivedChats, emitTo, log } = sweeper(store);
    expect(await direct.sweepDirect()).toMatchObject({ archived: 2 });
    expect(archivedChats).toHaveBeenCalledWith([7, 8]);
    expect(log.error).not.toHaveBeenCalled();
    expect(emitTo.mock.calls.map(([room, event, payload]) => [room, event, payload.chat.member_count])).toEqual([
      ['chat:7', 'chat:updated', 2],
      ['chat:8', 'chat:updated', 2],
    ]);
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
