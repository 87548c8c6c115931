import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../../src/platform/errors.js';
import type { VmFrame, VmProvider, VmStartSpec } from '../../src/platform/vm/provider.js';
import { eventually, jpegSize, roomSpec, type startTestSite, WAIT_MS } from './vm-browser.js';

/** The VM provider port's contract suite (CONVENTIONS 7), run by vm-provider.test.ts and vm-remote.test.ts. */

type TestSite = Awaited<ReturnType<typeof startTestSite>>;

export const spec = (over: Partial<VmStartSpec> = {}) => roomSpec({ allowPrivateNetworks: true, ...over });

export async function rejectsWith(p: Promise<unknown>, code: string, message?: RegExp) {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  expect((err as AppError).code).toBe(code);
  if (message) expect((err as AppError).message).toMatch(message);
}

/**
 * What every VM provider must do; `make(maxRooms)` builds one whose rooms may reach 127.0.0.1,
 * `site` is the test site the suite browses (started by the calling file).
 */
export function providerContract(
  name: string,
  site: () => TestSite,
  make: (maxRooms: number) => VmProvider | Promise<VmProvider>,
) {
  describe(`VM provider contract: ${name}`, () => {
    let provider: VmProvider;
    beforeAll(async () => {
      provider = await make(1);
    });
    afterAll(async () => {
      await provider?.close();
    });

    it('starts a room once: a second start answers the same run', async () => {
      const info = await provider.start('one', spec({ startUrl: site().url('/button') }));
      expect(info).toMatchObject({ roomId: 'one', state: 'running', width: 640, height: 360, restarts: 0 });
      const again = await provider.start('one', spec());
      expect(again.startedAt).toEqual(info.startedAt);
      expect(provider.list()).toHaveLength(1);
      expect(provider.status('one')?.state).toBe('running');
      expect(provider.status('other')).toBeNull();
    });

    it('streams JPEG frames with increasing seq, and shows navigation in later frames', async () => {
      const frames: VmFrame[] = [];
      const unsubscribe = provider.subscribe('one', (f) => frames.push(f));
      await eventually(() => frames.length > 0, WAIT_MS, 'a first frame');
      expect(frames[0]?.mime).toBe('image/jpeg');
      expect(jpegSize(frames[0]?.data as Buffer)).toEqual({ width: 640, height: 360 });
      const before = frames.at(-1) as VmFrame;
      await provider.navigate('one', { url: site().url('/page2') });
      await eventually(
        () => frames.some((f) => f.seq > before.seq && !f.data.equals(before.data)),
        WAIT_MS,
        'a new frame',
      );
      const seqs = frames.map((f) => f.seq);
      expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
      await provider.input('one', { kind: 'mouse', type: 'move', x: 10, y: 10 });
      await provider.navigate('one', { action: 'back' });
      unsubscribe();
    });

    it('refuses a room beyond its capacity and settings it cannot serve with ERR_ROOM_START_FAILED', async () => {
      await rejectsWith(provider.start('two', spec()), 'ERR_ROOM_START_FAILED', /capacity/i);
      await provider.stop('one');
      await rejectsWith(provider.start('tor', spec({ browser: 'tor' })), 'ERR_ROOM_START_FAILED', /Tor/);
      await rejectsWith(provider.start('us', spec({ proxy: 'us' })), 'ERR_ROOM_START_FAILED', /proxy/);
    });

    it('stops rooms: nothing listed, input refused with ERR_ROOM_NOT_RUNNING, a second stop is a no-op', async () => {
      expect(provider.status('one')).toBeNull();
      expect(provider.list()).toEqual([]);
      await rejectsWith(provider.input('one', { kind: 'text', text: 'x' }), 'ERR_ROOM_NOT_RUNNING');
      await rejectsWith(provider.navigate('one', { action: 'reload' }), 'ERR_ROOM_NOT_RUNNING');
      expect(() => provider.subscribe('one', () => {})).toThrow();
      await provider.stop('one');
    });
  });
}
