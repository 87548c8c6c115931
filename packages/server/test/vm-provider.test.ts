import { lookup } from 'node:dns/promises';
import { readFileSync, statSync } from 'node:fs';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { LocalChromiumProvider } from '../src/platform/vm/local-provider.js';
import { makeNetworkGuard } from '../src/platform/vm/network-guard.js';
import {
  BROWSER_TEST_TIMEOUT_MS,
  CHROMIUM,
  describeProvider,
  eventually,
  rootOnly,
  startTestSite,
  testEgressNetwork,
  WAIT_MS,
} from './support/vm-browser.js';
import { providerContract, rejectsWith, spec } from './support/vm-contract.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/**
 * The VM provider port's contract (CONVENTIONS 7): every provider passes `providerContract`:
 * the local Chromium provider, and the remote one over a browser host (vm-remote.test.ts runs
 * it). The provider does not depend on the storage mode, so these files run on the embedded
 * project only.
 */
const describeLocal = describeProvider;
const itAsRoot = rootOnly('the browser account tests of vm-provider.test.ts (VM_BROWSER_USER, VM_BROWSER_UIDS)');

let site: Awaited<ReturnType<typeof startTestSite>>;
beforeAll(async () => {
  site = await startTestSite();
});
afterAll(async () => {
  await site?.close();
});

describeLocal('local Chromium provider', () => {
  providerContract(
    'local chromium',
    () => site,
    (maxRooms) => new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms }),
  );

  it('answers ERR_ROOM_START_FAILED when the binary is missing', async () => {
    const missing = new LocalChromiumProvider({ chromiumPath: '/nonexistent/chromium', maxRooms: 1 });
    await rejectsWith(missing.start('x', spec()), 'ERR_ROOM_START_FAILED', /CHROMIUM_PATH/);
    expect(missing.list()).toEqual([]);
  });

  it('runs a server-as-root’s browsers as VM_BROWSER_USER (else as the server’s own user) inside the sandbox', async () => {
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
  });

  itAsRoot('refuses an unknown VM_BROWSER_USER with ERR_ROOM_START_FAILED', async () => {
    const unknown = new LocalChromiumProvider({
      chromiumPath: CHROMIUM,
      maxRooms: 1,
      browserUser: 'no-such-user-here',
    });
    try {
      await rejectsWith(unknown.start('x', spec()), 'ERR_ROOM_START_FAILED', /VM_BROWSER_USER/);
      expect(unknown.list()).toEqual([]);
    } finally {
      await unknown.close();
    }
  });

  itAsRoot('gives each room its own uid from VM_BROWSER_UIDS, and its profile to it', async () => {
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
  });

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
