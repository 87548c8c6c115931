import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { LocalChromiumProvider } from '../src/platform/vm/local-provider.js';
import { makeNetworkGuard } from '../src/platform/vm/network-guard.js';
import {
  BROWSER_TEST_TIMEOUT_MS,
  CHROMIUM,
  describeProvider,
  eventually,
  roomSpec,
  startTestSite,
  startWebSocketServer,
  testEgressNetwork,
  WAIT_MS,
} from './support/vm-browser.js';

vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });

/**
 * Rooms without an upstream proxy go out through the node's egress proxy
 * (platform/vm/egress-proxy.ts, docs/security.md "Room browsers and the private network"), against
 * real Chromium. `public.test` stands for a public host: the guard's lookup and the proxy's
 * stand-in network answer 93.184.216.34, which the proxy reaches on 127.0.0.1. Everything stays
 * on 127.0.0.1.
 */
const describeLocal = describeProvider;

const PUBLIC = '93.184.216.34';

const spec = roomSpec;

/** A guard whose lookups answer from `names` only (anything else is not found). */
const guardFor = (names: Record<string, string[]>) =>
  makeNetworkGuard({
    lookup: async (host) => {
      const found = names[host];
      if (!found) throw new Error(`ENOTFOUND ${host}`);
      return found;
    },
  });

describeLocal('room browsers without an upstream proxy: the egress proxy', () => {
  let site: Awaited<ReturnType<typeof startTestSite>>;
  let ws: Awaited<ReturnType<typeof startWebSocketServer>>;
  beforeAll(async () => {
    [site, ws] = await Promise.all([startTestSite(), startWebSocketServer()]);
  });
  afterAll(async () => {
    await Promise.all([site?.close(), ws?.close()]);
  });

  const title = (provider: LocalChromiumProvider, room: string) =>
    provider.evaluate(room, 'document.title').catch(() => null);
  /** Opens a WebSocket in the page; `socketState` then reads pending, open or error. */
  const openSocket = (provider: LocalChromiumProvider, room: string, url: string) =>
    provider.evaluate(
      room,
      `(() => { const s = (window.sockets ??= {}); s[${JSON.stringify(url)}] = 'pending';
        const ws = new WebSocket(${JSON.stringify(url)});
        ws.onopen = () => { s[${JSON.stringify(url)}] = 'open'; };
        ws.onerror = () => { s[${JSON.stringify(url)}] = 'error'; }; })()`,
    );
  const socketState = (provider: LocalChromiumProvider, room: string, url: string) =>
    provider.evaluate(room, `window.sockets?.[${JSON.stringify(url)}]`) as Promise<string | undefined>;

  it('refuses a page’s WebSocket to loopback before it connects, and tunnels one to a public host (CONNECT)', async () => {
    const egress = testEgressNetwork({ 'public.test': [PUBLIC] });
    const provider = new LocalChromiumProvider({
      chromiumPath: CHROMIUM,
      maxRooms: 1,
      guard: guardFor({ 'public.test': [PUBLIC] }),
      testOnlyEgressNetwork: egress.network,
      // Unused while the proxy resolves names; without the proxy the page would still load, and
      // the loopback WebSocket below would connect (the gap this proxy closes).
      extraArgs: ['--host-resolver-rules=MAP public.test 127.0.0.1'],
    });
    try {
      await provider.start('direct', spec({ startUrl: `http://public.test:${site.port}/page2` }));
      await eventually(async () => (await title(provider, 'direct')) === 'page2', WAIT_MS, 'page2 through the proxy');

      // The guard never sees WebSocket handshakes (docs/security.md, gap 1); the proxy does.
      for (const url of [`ws://127.0.0.1:${ws.port}/private`, `ws://localhost:${ws.port}/private`]) {
        await openSocket(provider, 'direct', url);
        await eventually(async () => (await socketState(provider, 'direct', url)) === 'error', WAIT_MS, url);
      }
      expect(ws.connections()).toBe(0);
      expect(egress.dials).toContain(`${PUBLIC}:${site.port}`);

      // A forwarded request loses its Upgrade header (hop-by-hop), so this handshake can only
      // succeed through a CONNECT tunnel: Chromium tunnels ws:// through an HTTP proxy.
      const url = `ws://public.test:${ws.port}/public`;
      await openSocket(provider, 'direct', url);
      await eventually(async () => (await socketState(provider, 'direct', url)) === 'open', WAIT_MS, url);
      expect(ws.upgrades).toEqual(['/public']);
      expect(ws.connections()).toBe(1);
      expect(egress.dials).toContain(`${PUBLIC}:${ws.port}`);
      // localhost is refused by name; no lookup asks what it is.
      expect(egress.lookups).not.toContain('localhost');
    } finally {
      await provider.close();
    }
  });

  it('refuses a name that answered public to the guard and loopback to the proxy (DNS rebinding)', async () => {
    // The guard's lookup and the proxy's disagree, as a name with a short TTL would between them.
    const egress = testEgressNetwork({ 'public.test': [PUBLIC], 'rebind.test': ['127.0.0.1'] });
    const provider = new LocalChromiumProvider({
      chromiumPath: CHROMIUM,
      maxRooms: 1,
      guard: guardFor({ 'public.test': [PUBLIC], 'rebind.test': [PUBLIC] }),
      testOnlyEgressNetwork: egress.network,
    });
    try {
      await provider.start('rebind', spec({ startUrl: `http://rebind.test:${site.port}/secret` }));
      const text = () => provider.evaluate('rebind', 'document.body?.innerText ?? ""').catch(() => '');
      await eventually(async () => /Refused: rebind\.test/.test(String(await text())), WAIT_MS, 'the proxy’s 403');
      expect(site.hits).not.toContain('/secret');
      expect(egress.lookups).toContain('rebind.test');
      expect(egress.dials).toEqual([]);
    } finally {
      await provider.close();
    }
  });

  it('is not used when private networks are allowed: such a room reaches 127.0.0.1 directly', async () => {
    const egress = testEgressNetwork({});
    const provider = new LocalChromiumProvider({
      chromiumPath: CHROMIUM,
      maxRooms: 1,
      testOnlyEgressNetwork: egress.network,
    });
    const before = ws.connections();
    try {
      await provider.start('open', spec({ allowPrivateNetworks: true, startUrl: site.url('/page2') }));
      await eventually(async () => (await title(provider, 'open')) === 'page2', WAIT_MS, 'page2');
      const url = `ws://127.0.0.1:${ws.port}/direct`;
      await openSocket(provider, 'open', url);
      await eventually(async () => (await socketState(provider, 'open', url)) === 'open', WAIT_MS, url);
      expect(ws.connections()).toBe(before + 1);
      expect([...egress.lookups, ...egress.dials]).toEqual([]);
    } finally {
      await provider.close();
    }
  });
});
