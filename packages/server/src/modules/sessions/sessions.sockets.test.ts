import { describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import { rooms } from '../../platform/socket-rooms.js';
import type { LiveOwner } from './sessions.service.js';
import { watchSessionSockets } from './sessions.sockets.js';

/** A node's sockets as the watcher sees them: id → user, session; each in its user's room. */
function fakeNode(sockets: { id: string; userId: number; sessionId: number }[]) {
  const all = new Map(
    sockets.map((s) => [
      s.id,
      {
        id: s.id,
        disconnected: false,
        data: { userId: s.userId, sessionId: s.sessionId, permissionLevel: 0, username: `u${s.userId}` },
        disconnect: vi.fn(function (this: { disconnected: boolean }) {
          this.disconnected = true;
        }),
      },
    ]),
  );
  const byRoom = new Map<string, Set<string>>();
  for (const s of sockets) byRoom.set(rooms.user(s.userId), (byRoom.get(rooms.user(s.userId)) ?? new Set()).add(s.id));
  const realtime = {
    io: { on: () => {}, of: () => ({ sockets: all, adapter: { rooms: byRoom } }) },
    gateEvents: () => {},
  };
  return { realtime, all };
}

const owner = (userId: number): LiveOwner => ({
  expiresAt: new Date(Date.now() + 60_000),
  permissionLevel: 0,
  username: `u${userId}`,
});

describe('watchSessionSockets: user changes', () => {
  const setUp = (ended: Set<number>) => {
    const node = fakeNode([
      { id: 'a', userId: 1, sessionId: 11 },
      { id: 'b', userId: 1, sessionId: 12 },
      { id: 'c', userId: 2, sessionId: 21 },
    ]);
    const liveOwner = vi.fn(async (userId: number, sessionId: number) => (ended.has(sessionId) ? null : owner(userId)));
    const watcher = watchSessionSockets({
      realtime: node.realtime as never,
      sessions: { liveOwner, endExpired: async () => {} } as never,
      clock: new FakeClock(Date.now()),
      log: { warn: () => {} },
    });
    const dropped = () => [...node.all.values()].filter((s) => s.disconnected).map((s) => s.id);
    return { watcher, liveOwner, dropped };
  };

  it('checks the sockets here of the users a change names, and drops those of ended sessions', async () => {
    const { watcher, liveOwner, dropped } = setUp(new Set([12, 21]));
    watcher.changes.invalidate([1]);
    await vi.waitFor(() => expect(liveOwner).toHaveBeenCalledTimes(2));
    await vi.waitFor(() => expect(dropped()).toEqual(['b']));
    expect(liveOwner.mock.calls.map((c) => c[1]).sort()).toEqual([11, 12]);
  });

  it('checks every socket here once delivery is back after a loss, none when it is lost', async () => {
    const { watcher, liveOwner, dropped } = setUp(new Set([21]));
    watcher.changes.reset(false);
    expect(liveOwner).not.toHaveBeenCalled();
    watcher.changes.reset(true);
    await vi.waitFor(() => expect(liveOwner).toHaveBeenCalledTimes(3));
    await vi.waitFor(() => expect(dropped()).toEqual(['c']));
  });
});
