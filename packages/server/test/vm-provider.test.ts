import { lookup } from 'node:dns/promises';
import { readFileSync, statSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { AppError } from '../src/platform/errors.js';
import { LocalChromiumProvider } from '../src/platform/vm/local-provider.js';
import { makeNetworkGuard } from '../src/platform/vm/network-guard.js';
import type { VmFrame, VmProvider, VmStartSpec } from '../src/platform/vm/provider.js';
import {
  BROWSER_TEST_TIMEOUT_MS,
  CHROMIUM,
  describeProvider,
  eventually,
  jpegSize,
  roomSpec,
  startTestSite,
  testEgressNetwork,
  WAIT_MS,
} from './support/vm-browser.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/**
 * The VM provider port's contract (CONVENTIONS 7): every provider passes `providerContract`.
 * Today that is the local Chromium provider; a remote browser-host provider will run the same
 * suite. The provider does not depend on the storage mode, so this file runs on the embedded
 * project only.
 */
const describeLocal = describeProvider;

let site: Awaited<ReturnType<typeof startTestSite>>;
beforeAll(async () => {
  site = await startTestSite();
});
afterAll(async () => {
  await site?.close();
});

const spec = (over: Partial<VmStartSpec> = {}) => roomSpec({ allowPrivateNetworks: true, ...over });

async function rejectsWith(p: Promise<unknown>, code: string, message?: RegExp) {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  expect((err as AppError).code).toBe(code);
  if (message) expect((err as AppError).message).toMatch(message);
}

/** What every VM provider must do; `make(maxRooms)` builds one whose rooms may reach 127.0.0.1. */
function providerContract(name: string, make: (maxRooms: number) => VmProvider) {
  describe(`VM provider contract: ${name}`, () => {
    let provider: VmProvider;
    beforeAll(() => {
      provider = make(1);
    });
    afterAll(async () => {
      await provider?.close();
    });

    it('starts a room once: a second start answers the same run', async () => {
      const info = await provider.start('one', spec({ startUrl: site.url('/button') }));
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
      await provider.navigate('one', { url: site.url('/page2') });
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

describeLocal('local Chromium provider', () => {
  providerContract('local chromium', (maxRooms) => new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms }));

  it('answers ERR_ROOM_START_FAILED when the binary is missing', async () => {
    const missing = new LocalChromiumProvider({ chromiumPath: '/nonexistent/chromium', maxRooms: 1 });
    await rejectsWith(missing.start('x', spec()), 'ERR_ROOM_START_FAILED', /CHROMIUM_PATH/);
    expect(missing.list()).toEqual([]);
  });

  it('runs a server-as-root’s browsers as VM_BROWSER_USER inside the sandbox; refuses an unknown account', async () => {
    const root = process.getuid?.() === 0;
    const provider = new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms: 1 });
    try {
      await provider.start('who', spec({ startUrl: site.url('/button') }));
      const pid = provider.pidOf('who') as number;
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const uids = /^Uid:\s+(\d+)\s+(\d+)/m.exec(status);
      // The default account is `nobody`; a server that is not root starts browsers as itself.
      const expected = root
        ? Number(/^nobody:[^:]*:(\d+):/m.exec(readFileSync('/etc/passwd', 'utf8'))?.[1])
        : process.getuid?.();
      expect([Number(uids?.[1]), Number(uids?.[2])]).toEqual([expected, expected]);
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      expect(cmdline).not.toContain('--no-sandbox');
      // The profile is the browser's own, and nobody else's.
      const profile = cmdline.find((a) => a.startsWith('--user-data-dir='))?.slice('--user-data-dir='.length) as string;
      const st = statSync(profile);
      expect([st.uid, st.mode & 0o077]).toEqual([expected, 0]);
    } finally {
      await provider.close();
    }
    if (!root) return;
    const unknown = new LocalChromiumProvider({
      chromiumPath: CHROMIUM,
      maxRooms: 1,
      browserUser: 'no-such-user-here',
    });
    await rejectsWith(unknown.start('x', spec()), 'ERR_ROOM_START_FAILED', /VM_BROWSER_USER/);
    expect(unknown.list()).toEqual([]);
    await unknown.close();
  });

  it.runIf(process.getuid?.() === 0)(
    'gives each room its own uid from VM_BROWSER_UIDS, and its profile to it',
    async () => {
      const provider = new LocalChromiumProvider({
        chromiumPath: CHROMIUM,
        maxRooms: 2,
        browserUids: { first: 200100, last: 200101 },
      });
      try {
        await Promise.all(['u1', 'u2'].map((id) => provider.start(id, spec({ startUrl: site.url('/button') }))));
        const owners = ['u1', 'u2'].map((id) => {
          const pid = provider.pidOf(id) as number;
          const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
          const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
          const profile = cmdline
            .find((a) => a.startsWith('--user-data-dir='))
            ?.slice('--user-data-dir='.length) as string;
          expect(cmdline).not.toContain('--no-sandbox');
          expect(statSync(profile).uid).toBe(uid);
          return uid;
        });
        expect([...owners].sort()).toEqual([200100, 200101]);
        // A room started after one stopped takes the uid that is free.
        const freed = owners[0] as number;
        await provider.stop('u1');
        await provider.start('u3', spec({ startUrl: site.url('/button') }));
        const pid = provider.pidOf('u3') as number;
        expect(Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1])).toBe(freed);
      } finally {
        await provider.close();
      }
    },
  );

  it('shows a tab the page opens (target=_blank) in the room’s own tab', async () => {
    const provider = new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms: 1 });
    try {
      await provider.start('popup', spec({ startUrl: site.url('/popup') }));
      const laidOut = "document.elementFromPoint(50, 50)?.id === 'out'";
      await eventually(async () => (await provider.evaluate('popup', laidOut)) === true, WAIT_MS, 'the link');
      for (const type of ['down', 'up'] as const) await provider.input('popup', { kind: 'mouse', type, x: 50, y: 50 });
      // The click navigates the tab: an evaluation that lands mid-navigation is "not yet", not a failure.
      const pathname = () =>
        provider
          .evaluate('popup', 'location.pathname')
          .catch((e: Error) => (/navigated or closed/.test(e.message) ? null : Promise.reject(e)));
      await eventually(async () => (await pathname()) === '/page2', WAIT_MS, 'page2');
    } finally {
      await provider.close();
    }
  });

  it('keeps the room browser off loopback and private addresses, redirects included (DESIGN.md 9)', async () => {
    // public.test passes the guard as a public host; the egress proxy's stand-in network takes it
    // to the test site, which redirects to 127.0.0.1: the redirect hop must be refused.
    const guard = makeNetworkGuard({
      lookup: async (host) =>
        host === 'public.test' ? ['93.184.216.34'] : (await lookup(host, { all: true })).map((a) => a.address),
    });
    const provider = new LocalChromiumProvider({
      chromiumPath: CHROMIUM,
      maxRooms: 1,
      guard,
      testOnlyEgressNetwork: testEgressNetwork({ 'public.test': ['93.184.216.34'] }).network,
    });
    try {
      const secret = site.url('/secret');
      await provider.start('guarded', spec({ allowPrivateNetworks: false, startUrl: secret }));
      const href = () => provider.evaluate('guarded', 'location.href') as Promise<string>;
      await eventually(async () => (await href()).startsWith('chrome-error://'), WAIT_MS, 'the blocked start page');
      for (const url of [`http://localhost:${site.port}/secret`, `http://[::1]:${site.port}/secret`]) {
        await provider.navigate('guarded', { url });
        await eventually(async () => (await href()).startsWith('chrome-error://'), WAIT_MS, `blocked ${url}`);
      }
      const redirect = `http://public.test:${site.port}/redirect?to=${encodeURIComponent(secret)}`;
      await provider.navigate('guarded', { url: redirect });
      await eventually(() => site.hits.some((h) => h.startsWith('/redirect')), WAIT_MS, 'the public hop');
      await eventually(async () => (await href()).startsWith('chrome-error://'), WAIT_MS, 'the blocked redirect');
      expect(site.hits).not.toContain('/secret');
    } finally {
      await provider.close();
    }
  });
});
