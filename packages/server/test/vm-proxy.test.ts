import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../src/platform/config.js';
import { AppError } from '../src/platform/errors.js';
import { LocalChromiumProvider, type LocalProviderOptions } from '../src/platform/vm/local-provider.js';
import { makeNetworkGuard } from '../src/platform/vm/network-guard.js';
import { MODE } from './support/app.js';
import { startHttpProxy } from './support/http-proxy.js';
import { startSocksServer } from './support/socks-server.js';
import {
  BROWSER_TEST_TIMEOUT_MS,
  CHROMIUM,
  describeProvider,
  eventually,
  roomSpec,
  startTestSite,
  WAIT_MS,
} from './support/vm-browser.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/**
 * Room settings `browser: "tor"` and `proxy: "us"|"eu"` (spec 2.4) against real Chromium: the
 * proxies are a tiny HTTP forward proxy and a tiny SOCKS5 server standing in for Tor, both on
 * 127.0.0.1, and the proxy URLs come from the environment through loadConfig as in the server.
 */
const describeLocal = describeProvider;

const spec = roomSpec;

/** A provider configured from environment variables, wired as packages/server/src/wiring/services.ts does. */
function providerFrom(env: Record<string, string>, more: Partial<LocalProviderOptions> = {}) {
  const config = loadConfig({ SOURCE_HASH: 'test', ...env });
  return new LocalChromiumProvider({
    chromiumPath: CHROMIUM,
    maxRooms: 1,
    torProxy: config.vmTorProxy,
    regionProxies: { us: config.vmProxyUs, eu: config.vmProxyEu },
    ...more,
  });
}

/** A guard whose host lookups are recorded; `answers` stand in for DNS, anything else is not found. */
function recordingGuard(answers: Record<string, string[]> = {}) {
  const lookups: string[] = [];
  const guard = makeNetworkGuard({
    lookup: async (host) => {
      lookups.push(host);
      const found = answers[host];
      if (!found) throw new Error(`ENOTFOUND ${host}`);
      return found;
    },
  });
  return { guard, lookups };
}

async function startFailure(p: Promise<unknown>): Promise<AppError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  expect((err as AppError).code).toBe('ERR_ROOM_START_FAILED');
  return err as AppError;
}

describeLocal('room browsers behind a proxy (VM_TOR_PROXY, VM_PROXY_US, VM_PROXY_EU)', () => {
  let site: Awaited<ReturnType<typeof startTestSite>>;
  let proxy: Awaited<ReturnType<typeof startHttpProxy>>;
  let tor: Awaited<ReturnType<typeof startSocksServer>>;
  beforeAll(async () => {
    site = await startTestSite();
    proxy = await startHttpProxy(site);
    tor = await startSocksServer({ 'parlor-test.onion': site.port });
  });
  afterAll(async () => {
    await Promise.all([site?.close(), proxy?.close(), tor?.close()]);
  });

  /** The room's page once it shows `title` (an evaluation that lands mid-navigation is "not yet"). */
  const page = (provider: LocalChromiumProvider, room: string) => async () =>
    (await provider
      .evaluate(room, '({ href: location.href, title: document.title, text: document.body?.innerText ?? "" })')
      .catch(() => null)) as { href: string; title: string; text: string } | null;
  const blocked = async (provider: LocalChromiumProvider, room: string, url: string) => {
    await provider.navigate(room, { url });
    await eventually(async () => (await page(provider, room)())?.href.startsWith('chrome-error://'), WAIT_MS, url);
  };

  it('loads a "us" room’s pages through VM_PROXY_US; the guard still checks names here and refuses private addresses', async () => {
    // parlor-us.test exists only at the proxy (it serves the test site for every host) and, for
    // the guard's lookup, as a public address.
    const { guard, lookups } = recordingGuard({ 'parlor-us.test': ['93.184.216.34'], localhost: ['127.0.0.1'] });
    const provider = providerFrom({ VM_PROXY_US: proxy.url }, { guard });
    try {
      await provider.start('us', spec({ proxy: 'us', startUrl: 'http://parlor-us.test/page2' }));
      const shown = await eventually(async () => {
        const p = await page(provider, 'us')();
        return p?.title === 'page2' ? p : null;
      });
      expect(shown).toMatchObject({ href: 'http://parlor-us.test/page2', text: 'two' });
      expect(proxy.hosts).toContain('parlor-us.test');
      expect(lookups).toContain('parlor-us.test');

      await blocked(provider, 'us', site.url('/secret'));
      await blocked(provider, 'us', `http://localhost:${site.port}/secret`);
      expect(proxy.urls.filter((u) => u.endsWith('/secret'))).toEqual([]);
      expect(site.hits).not.toContain('/secret');
    } finally {
      await provider.close();
    }
  });

  it('makes the browser’s own background calls to reserved names only, never to Google', async () => {
    const provider = providerFrom({ VM_PROXY_US: proxy.url });
    try {
      await provider.start('quiet', spec({ proxy: 'us', startUrl: 'http://parlor-us.test/page2' }));
      // Chromium still asks for its account list and component updates at start; both go to
      // `.invalid` names (chromium-process.ts), which no resolver answers.
      await eventually(() => proxy.tunnels.some((t) => /\.invalid:443$/.test(t)), WAIT_MS, 'the background calls');
      const all = [...proxy.hosts, ...proxy.tunnels];
      expect(all.filter((h) => /google|gstatic|gvt1/.test(h))).toEqual([]);
    } finally {
      await provider.close();
    }
  });

  it('sends loopback through the proxy too (<-loopback>): an "eu" room never reaches 127.0.0.1 directly', async () => {
    const provider = providerFrom({ VM_PROXY_EU: proxy.url });
    try {
      await provider.start('eu', spec({ proxy: 'eu', allowPrivateNetworks: true, startUrl: site.url('/page2') }));
      await eventually(async () => (await page(provider, 'eu')())?.title === 'page2', WAIT_MS, 'page2');
      expect(proxy.hosts).toContain(`127.0.0.1:${site.port}`);
    } finally {
      await provider.close();
    }
  });

  it('loads a Tor room’s .onion page that only the SOCKS proxy resolves: no name is looked up here, and Tor wins over the region', async () => {
    const { guard, lookups } = recordingGuard();
    const provider = providerFrom({ VM_TOR_PROXY: tor.url, VM_PROXY_US: proxy.url }, { guard });
    const proxied = proxy.hosts.length;
    try {
      await provider.start('tor', spec({ browser: 'tor', proxy: 'us', startUrl: 'http://parlor-test.onion/page2' }));
      const shown = await eventually(async () => {
        const p = await page(provider, 'tor')();
        return p?.title === 'page2' ? p : null;
      });
      expect(shown).toMatchObject({ href: 'http://parlor-test.onion/page2', text: 'two' });
      expect(tor.hosts).toContain('parlor-test.onion');
      expect(proxy.hosts.slice(proxied)).toEqual([]);

      // Literal private addresses and localhost need no lookup: still refused, and the proxy is
      // not even asked for a tunnel (no preconnect: network prediction is off in room profiles).
      await blocked(provider, 'tor', site.url('/secret'));
      await blocked(provider, 'tor', `http://localhost:${site.port}/secret`);
      await blocked(provider, 'tor', 'file:///etc/passwd');
      expect(tor.hosts.filter((h) => h === '127.0.0.1' || h === 'localhost')).toEqual([]);
      expect(site.hits).not.toContain('/secret');
      expect(lookups).toEqual([]);

      // WebSockets escape the guard (docs/security.md, gap 1), but not the proxy: loopback included.
      await provider.navigate('tor', { url: 'http://parlor-test.onion/page2' });
      await eventually(async () => (await page(provider, 'tor')())?.title === 'page2', WAIT_MS, 'page2 again');
      await provider.evaluate('tor', `void new WebSocket('ws://127.0.0.1:${site.port}/ws-probe')`);
      await eventually(() => tor.hosts.includes('127.0.0.1'), WAIT_MS, 'the WebSocket at the proxy');
      expect(site.hits).not.toContain('/ws-probe');
    } finally {
      await provider.close();
    }
  });
});

describe.skipIf(MODE === 'cluster')('room proxies that are not configured', () => {
  it('answers 503 ERR_ROOM_START_FAILED naming the missing variable, before any browser starts', async () => {
    const torOnly = providerFrom({ VM_TOR_PROXY: 'socks5://127.0.0.1:9' });
    const usOnly = providerFrom({ VM_PROXY_US: 'http://127.0.0.1:9' });
    try {
      expect((await startFailure(torOnly.start('us', spec({ proxy: 'us' })))).message).toMatch(/us proxy.*VM_PROXY_US/);
      expect((await startFailure(usOnly.start('eu', spec({ proxy: 'eu' })))).message).toMatch(/eu proxy.*VM_PROXY_EU/);
      expect((await startFailure(usOnly.start('tor', spec({ browser: 'tor' })))).message).toMatch(/Tor.*VM_TOR_PROXY/);
      expect([...torOnly.list(), ...usOnly.list()]).toEqual([]);
    } finally {
      await Promise.all([torOnly.close(), usOnly.close()]);
    }
  });
});
