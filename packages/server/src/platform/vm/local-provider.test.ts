import { afterAll, describe, expect, it } from 'vitest';
import { stalledBrowser } from '../../../test/support/stalled-browser.js';
import { alive, eventually } from '../../../test/support/vm-browser.js';
import { LocalChromiumProvider } from './local-provider.js';

const browser = stalledBrowser();
afterAll(() => browser.remove());

const spec = {
  browser: 'brave',
  proxy: 'none',
  startUrl: 'about:blank',
  allowPrivateNetworks: true,
  width: 640,
  height: 360,
} as const;

/** The outcome of a start so far. */
function track(p: Promise<unknown>) {
  const state: { settled: boolean; error?: unknown } = { settled: false };
  p.then(
    () => Object.assign(state, { settled: true }),
    (error: unknown) => Object.assign(state, { settled: true, error }),
  );
  return state;
}

describe('LocalChromiumProvider, a browser still starting', () => {
  it('is called off by close: killed at once, its start failing with ERR_ROOM_START_FAILED, not awaited to its ready timeout', async () => {
    const provider = new LocalChromiumProvider({ chromiumPath: browser.path, maxRooms: 2 });
    const start = track(provider.start('room-1', spec));
    const pid = (await eventually(() => browser.pid(), 10_000, 'the browser to start')) as number;
    expect(provider.status('room-1')?.state).toBe('starting');
    expect(start.settled).toBe(false);

    await provider.close();
    expect(start.settled).toBe(true);
    expect(start.error).toMatchObject({
      code: 'ERR_ROOM_START_FAILED',
      message: 'The room start was called off: the room was stopped or this node is shutting down.',
    });
    expect(alive(pid)).toBe(false);
  });
});
