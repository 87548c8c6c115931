import { describe, expect, it } from 'vitest';
import type { VmFrame } from '../../platform/vm/provider.js';
import { type Audience, makeAudiences } from './vm.audience.js';
import type { VmCluster } from './vm.cluster.js';
import { FRAME_WINDOW, RoomViewers } from './vm.viewers.js';

const frame = (seq: number): VmFrame => ({ seq, mime: 'image/jpeg', data: Buffer.from([seq]), width: 4, height: 3 });

function setUp(window = 1) {
  let t = 0;
  const sent: [string, number][] = [];
  const viewers = new RoomViewers(
    (ids, f) => {
      for (const id of ids) sent.push([id, f.seq]);
      return [];
    },
    () => t,
    window,
  );
  return { viewers, sent, advance: (ms: number) => (t += ms) };
}

describe('RoomViewers', () => {
  it('sends the next frame only after the one in flight is acknowledged, skipping the ones between', () => {
    const { viewers, sent } = setUp();
    viewers.add('a', 1);
    viewers.frame(frame(1));
    viewers.frame(frame(2));
    viewers.frame(frame(3));
    expect(sent).toEqual([['a', 1]]);
    viewers.ack('a', 1);
    expect(sent).toEqual([
      ['a', 1],
      ['a', 3],
    ]);
    viewers.ack('a', 3);
    expect(sent).toHaveLength(2);
    viewers.frame(frame(4));
    expect(sent.at(-1)).toEqual(['a', 4]);
  });

  it('lets a slow viewer lag without holding back a fast one', () => {
    const { viewers, sent } = setUp();
    viewers.add('slow', 1);
    viewers.add('fast', 2);
    for (let seq = 1; seq <= 5; seq++) {
      viewers.frame(frame(seq));
      viewers.ack('fast', seq);
    }
    expect(sent.filter(([id]) => id === 'fast').map(([, s]) => s)).toEqual([1, 2, 3, 4, 5]);
    expect(sent.filter(([id]) => id === 'slow').map(([, s]) => s)).toEqual([1]);
  });

  it('gives a new viewer the latest frame at once, and ignores stale or foreign acks', () => {
    const { viewers, sent } = setUp();
    viewers.frame(frame(7));
    viewers.add('late', 3);
    expect(sent).toEqual([['late', 7]]);
    expect(viewers.ack('late', 6)).toBe(true);
    viewers.frame(frame(8));
    expect(sent).toHaveLength(1);
    expect(viewers.ack('nobody', 7)).toBe(false);
  });

  it('resends the newest frame when an acknowledgement never comes', () => {
    const { viewers, sent, advance } = setUp();
    viewers.add('a', 1);
    viewers.frame(frame(1));
    viewers.frame(frame(2));
    advance(1000);
    viewers.resendStale(3000);
    expect(sent).toHaveLength(1);
    advance(2500);
    viewers.resendStale(3000);
    expect(sent).toEqual([
      ['a', 1],
      ['a', 2],
    ]);
  });

  it('with a window of two, keeps two frames in flight; an ack covers the frames before it', () => {
    const { viewers, sent } = setUp(FRAME_WINDOW);
    viewers.add('a', 1);
    for (let seq = 1; seq <= 5; seq++) viewers.frame(frame(seq));
    expect(sent).toEqual([
      ['a', 1],
      ['a', 2],
    ]);
    viewers.ack('a', 1);
    expect(sent.at(-1)).toEqual(['a', 5]);
    viewers.frame(frame(6));
    expect(sent).toHaveLength(3);
    viewers.ack('a', 5); // covers 2 as well: the window is empty, the pending frame goes out
    expect(sent.at(-1)).toEqual(['a', 6]);
    viewers.frame(frame(7));
    expect(sent.at(-1)).toEqual(['a', 7]);
    viewers.frame(frame(8));
    expect(sent).toHaveLength(5);
  });

  it('counts distinct users, not sockets', () => {
    const { viewers } = setUp();
    viewers.add('a1', 1);
    viewers.add('a2', 1);
    viewers.add('b', 2);
    expect(viewers.size).toBe(3);
    expect(viewers.users()).toEqual(new Set([1, 2]));
    viewers.remove('a1');
    expect(viewers.users()).toEqual(new Set([1, 2]));
  });

  it('sends a frame to every ready viewer in one call, leaving out the ones with a full window', () => {
    const calls: [string[], number][] = [];
    const viewers = new RoomViewers(
      (ids, f) => {
        calls.push([ids, f.seq]);
        return [];
      },
      () => 0,
      1,
    );
    viewers.add('a', 1);
    viewers.add('b', 2);
    viewers.add('c', 3);
    viewers.frame(frame(1));
    expect(calls).toEqual([[['a', 'b', 'c'], 1]]);
    viewers.ack('a', 1);
    viewers.ack('c', 1);
    viewers.frame(frame(2));
    expect(calls.at(-1)).toEqual([['a', 'c'], 2]);
  });

  it('a viewer whose connection is still writing keeps the frame pending, and gets it on its next ack or sweep', () => {
    const busy = new Set<string>(['b']);
    const sent: [string, number][] = [];
    let t = 0;
    const viewers = new RoomViewers(
      (ids, f) => {
        for (const id of ids) if (!busy.has(id)) sent.push([id, f.seq]);
        return ids.filter((id) => busy.has(id));
      },
      () => t,
      2,
    );
    viewers.add('a', 1);
    viewers.add('b', 2);
    viewers.frame(frame(1));
    expect(sent).toEqual([['a', 1]]);
    // Still busy at the sweep: nothing goes, nothing is counted in flight.
    viewers.resendStale(3000);
    expect(sent).toEqual([['a', 1]]);
    viewers.frame(frame(2));
    busy.clear();
    // At the next sweep (no timeout to wait for) it gets the newest frame, once.
    t += 1000;
    viewers.resendStale(3000);
    expect(sent).toEqual([
      ['a', 1],
      ['a', 2],
      ['b', 2],
    ]);
    viewers.resendStale(3000);
    expect(sent).toHaveLength(3);
    viewers.ack('b', 2);
    viewers.frame(frame(3));
    expect(sent.at(-1)).toEqual(['b', 3]);
  });
});

describe('audiences of a room on another node', () => {
  it('opens again an audience ended while its frame subscription was made, and ends that subscription', async () => {
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const subscriptions = { made: 0, ended: 0 };
    const cluster = {
      nodeId: 'here',
      // The first subscription takes a while (a Redis SUBSCRIBE round trip).
      async subscribeFrames() {
        subscriptions.made += 1;
        if (subscriptions.made === 1) await gate;
        return async () => {
          subscriptions.ended += 1;
        };
      },
      call: async () => ({ width: 4, height: 3, controller_user_id: null, last: null }),
    } as unknown as VmCluster;
    const audiences = makeAudiences({ realtime: { io: {} } as never, cluster, now: () => 0 });

    const opening = audiences.open(7, 'there');
    // Meanwhile another watcher of the room finds the audience empty (its socket left): it ends.
    const ended = audiences.get(7) as Audience;
    await audiences.report(ended);
    expect(audiences.get(7)).toBeUndefined();
    release();

    const a = await opening;
    expect(a).not.toBe(ended);
    expect(audiences.get(7)).toBe(a);
    expect(subscriptions).toEqual({ made: 2, ended: 1 });
  });
});
