import { lookup } from 'node:dns/promises';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
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

  it('calls off a start stopped before its browser launched (getting its account or network proxy): no browser runs', async () => {
    const provider = new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms: 1 });
    try {
      // Direct and with private networks off: the start waits for the account and the egress proxy.
      const starting = provider.start('early', spec({ startUrl: site.url('/button'), allowPrivateNetworks: false }));
      const failed = rejectsWith(starting, 'ERR_ROOM_START_FAILED', /called off/);
      await provider.stop('early');
      await failed;
      expect(provider.list()).toEqual([]);
      expect(provider.pidOf('early')).toBeUndefined();
      // The room starts again afterwards.
      await provider.start('early', spec({ startUrl: site.url('/button') }));
      expect(provider.status('early')?.state).toBe('running');
    } finally {
      await provider.close();
    }
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

  itAsRoot('keeps Chromium’s temporary folder in the profile: none left in /tmp after a crash and a stop', async () => {
    // Chromium's ProcessSingleton folder (org.chromium.Chromium.XXXXXX) goes to $TMPDIR; a browser
    // killed (a crash, its tab closed, a start called off) never removes it. This room's uid is its own.
    const uid = 231_777;
    const singletons = (dir: string) =>
      readdirSync(dir).filter(
        (n) => /^\.?org\.chromium\.Chromium\./.test(n) && statSync(path.join(dir, n)).uid === uid,
      );
    const provider = new LocalChromiumProvider({
      chromiumPath: CHROMIUM,
      maxRooms: 1,
      browserUids: { first: uid, last: uid },
    });
    try {
      await provider.start('tmp', spec());
      const pid = provider.pidOf('tmp') as number;
      const profile = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
        .split('\0')
        .find((a) => a.startsWith('--user-data-dir='))
        ?.slice('--user-data-dir='.length) as string;
      // Made before the browser answers DevTools (it is the browser's first step).
      expect(singletons(profile)).toHaveLength(1);
      expect(singletons('/tmp')).toEqual([]);
      // A crash: the whole group goes at once, as an OOM kill takes it; the room's browser restarts.
      process.kill(-pid, 'SIGKILL');
      await eventually(
        () => provider.status('tmp')?.state === 'running' && provider.pidOf('tmp') !== pid,
        WAIT_MS,
        'the restart',
      );
      await provider.stop('tmp');
      expect(singletons('/tmp')).toEqual([]);
      expect(existsSync(profile)).toBe(false);
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

  /** The room's page tabs (DevTools targets), as URLs. */
  const tabs = async (provider: LocalChromiumProvider, roomId: string) => {
    const { targetInfos } = (await provider.devtools(roomId, 'Target.getTargets')) as {
      targetInfos: { targetId: string; type: string; url: string }[];
    };
    return targetInfos.filter((t) => t.type === 'page');
  };
  /** Location of the room's page; null while it is between two documents or the browser restarts. */
  const pathOf = (provider: LocalChromiumProvider, roomId: string) =>
    provider.evaluate(roomId, 'location.pathname').catch(() => null);
  const press = async (provider: LocalChromiumProvider, roomId: string, held: string[], key: string, code: string) => {
    const send = (type: 'down' | 'up', k: string, c: string) =>
      provider.input(roomId, { kind: 'key', type, key: k, code: c });
    for (const h of held) await send('down', h, `${h}Left`);
    const outcome = await send('down', key, code).then(
      () => 'sent',
      (err: { code?: string }) => err.code,
    );
    await send('up', key, code).catch(() => {});
    for (const h of [...held].reverse()) await send('up', h, `${h}Left`);
    return outcome;
  };

  it('keeps browser shortcuts from the room browser: the tab stays, history and reload keys do nothing', async () => {
    const provider = new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms: 1 });
    try {
      await provider.start('keys', spec({ allowPrivateNetworks: true, startUrl: site.url('/button') }));
      await eventually(async () => (await pathOf(provider, 'keys')) === '/button', WAIT_MS, 'the start page');
      await provider.navigate('keys', { url: site.url('/page2') });
      await eventually(async () => (await pathOf(provider, 'keys')) === '/page2', WAIT_MS, 'page2');
      const served = site.hits.length;
      for (const [held, key, code] of [
        [['Alt'], 'ArrowLeft', 'ArrowLeft'],
        [['Alt'], 'Home', 'Home'],
        [['Control'], 'r', 'KeyR'],
        [['Control'], 'w', 'KeyW'],
        [['Control', 'Shift'], 'W', 'KeyW'],
        [['Control'], 't', 'KeyT'],
        [[], 'BrowserBack', 'BrowserBack'],
      ] as const)
        expect(await press(provider, 'keys', [...held], key, code), `${held.join('+')}+${key}`).toBe('ERR_FORBIDDEN');
      // A key the filter does not know goes with virtual key code 0, whatever its `code` names:
      // Chromium's shortcuts match the virtual key code, so Alt+(ArrowLeft by code only) is no back.
      expect(await press(provider, 'keys', ['Alt'], 'Unidentified', 'ArrowLeft')).toBe('sent');
      // Keys are answered in order: a navigation or a closed tab would show by now.
      expect(await provider.evaluate('keys', 'location.pathname')).toBe('/page2');
      expect((await tabs(provider, 'keys')).map((t) => t.url)).toEqual([site.url('/page2')]);
      expect(site.hits.slice(served).filter((h) => h !== '/favicon.ico')).toEqual([]);
      expect(provider.status('keys')).toMatchObject({ state: 'running', restarts: 0 });
      await provider.input('keys', { kind: 'text', text: 'x' });
    } finally {
      await provider.close();
    }
  });

  it('closes the tabs the room did not open (browser pages a shortcut opens), at once', async () => {
    const provider = new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms: 1 });
    try {
      await provider.start('tabs', spec({ allowPrivateNetworks: true, startUrl: site.url('/button') }));
      await eventually(async () => (await pathOf(provider, 'tabs')) === '/button', WAIT_MS, 'the start page');
      // Ctrl+H (history) and Ctrl+U (view source) are pages' shortcuts too (find and replace, underline).
      expect(await press(provider, 'tabs', ['Control'], 'h', 'KeyH')).toBe('sent');
      expect(await press(provider, 'tabs', ['Control'], 'u', 'KeyU')).toBe('sent');
      const opened = await provider.devtools('tabs', 'Target.createTarget', { url: 'about:blank' });
      expect(opened.targetId).toEqual(expect.any(String));
      await eventually(
        async () => (await tabs(provider, 'tabs')).map((t) => t.url).join() === site.url('/button'),
        WAIT_MS,
        'only the room’s tab left',
      );
      expect(provider.status('tabs')).toMatchObject({ state: 'running', restarts: 0 });
    } finally {
      await provider.close();
    }
  });

  it('restarts the browser when the room’s tab is closed anyway, as after a crash', async () => {
    const provider = new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms: 1 });
    try {
      await provider.start('closed', spec({ allowPrivateNetworks: true, startUrl: site.url('/anim') }));
      await eventually(async () => (await pathOf(provider, 'closed')) === '/anim', WAIT_MS, 'the start page');
      const frames: number[] = [];
      const unsubscribe = provider.subscribe('closed', (f) => frames.push(f.seq));
      const first = provider.pidOf('closed');
      const [tab] = await tabs(provider, 'closed');
      await provider.devtools('closed', 'Target.closeTarget', { targetId: tab?.targetId });
      await eventually(
        () => provider.status('closed')?.state === 'running' && provider.pidOf('closed') !== first,
        WAIT_MS,
        'a new browser',
      );
      expect(provider.status('closed')?.restarts).toBe(1);
      await eventually(async () => (await pathOf(provider, 'closed')) === '/anim', WAIT_MS, 'the start page again');
      await provider.input('closed', { kind: 'text', text: 'x' });
      const seen = frames.length;
      await eventually(() => frames.length > seen, WAIT_MS, 'frames of the new browser');
      unsubscribe();
    } finally {
      await provider.close();
    }
  });

  /**
   * A stand-in browser binary: it answers the DevTools pipe as Chromium would for a room's set-up
   * (an empty result to anything else), after `handle` had its say on each message (`msg`, and
   * `answer(result)` / `fail(message)` to answer it; returning true means handled). Each run
   * appends a line to `runs`. Runs as `nobody` when the tests run as root, hence the modes.
   */
  const standIn = (handle: string) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'parlor-stand-in-browser-'));
    chmodSync(dir, 0o777);
    const binary = path.join(dir, 'browser');
    const runs = path.join(dir, 'runs');
    writeFileSync(
      binary,
      `#!${process.execPath}
const fs = require('fs');
fs.appendFileSync(${JSON.stringify(runs)}, 'run\\n');
const out = fs.createWriteStream(null, { fd: 4 });
const send = (m) => out.write(JSON.stringify(m) + '\\0');
const defaults = {
  'Target.getTargets': { targetInfos: [] },
  'Target.createTarget': { targetId: 'T1' },
  'Target.attachToTarget': { sessionId: 'S1' },
};
let buf = '';
fs.createReadStream(null, { fd: 3 }).on('data', (d) => {
  buf += d.toString();
  for (let i = buf.indexOf('\\0'); i >= 0; i = buf.indexOf('\\0')) {
    const msg = JSON.parse(buf.slice(0, i));
    buf = buf.slice(i + 1);
    const answer = (result) => send({ id: msg.id, result });
    const fail = (message) => send({ id: msg.id, error: { code: -32000, message } });
    if ((() => { ${handle} })()) continue;
    answer(defaults[msg.method] ?? {});
  }
});
setInterval(() => {}, 1 << 30);
`,
      { mode: 0o755 },
    );
    return {
      binary,
      runs: () => readFileSync(runs, 'utf8').split('\n').filter(Boolean).length,
      remove: () => rmSync(dir, { recursive: true, force: true }),
    };
  };

  it('fails a start whose browser exits during its set-up, and launches no other browser for it', async () => {
    // It exits (as a crash does) when asked for the tabs, while a helper holds the pipe open a
    // moment: the exit is seen before the pipe closes.
    const browser = standIn(`
      if (msg.method !== 'Target.getTargets') return false;
      require('child_process').spawn('/bin/sleep', ['1'], { stdio: ['ignore', 'ignore', 'ignore', 3, 4], detached: true }).unref();
      process.exit(1);`);
    const logs: string[] = [];
    const provider = new LocalChromiumProvider({ chromiumPath: browser.binary, maxRooms: 1, log: (m) => logs.push(m) });
    try {
      await rejectsWith(provider.start('r', spec()), 'ERR_ROOM_START_FAILED');
      expect(provider.list()).toEqual([]);
      expect(browser.runs()).toBe(1);
      // A restart would have been decided on the exit, before the start failed.
      expect(logs.filter((l) => /crash|restart/i.test(l))).toEqual([]);
      expect(logs.some((l) => /set-up failed/.test(l))).toBe(true);
    } finally {
      await provider.close();
      browser.remove();
    }
  });

  it('answers ERR_ROOM_NOT_RUNNING (not a bare error) when the browser refuses input or navigation', async () => {
    // Up and running; then its page session is gone, as it is for a closed or crashed tab.
    const browser = standIn(`
      if (!/^Input\\./.test(msg.method) && msg.method !== 'Page.reload') return false;
      fail('Session with given id not found.');
      return true;`);
    const provider = new LocalChromiumProvider({ chromiumPath: browser.binary, maxRooms: 1 });
    try {
      await provider.start('r', spec());
      await rejectsWith(provider.input('r', { kind: 'text', text: 'x' }), 'ERR_ROOM_NOT_RUNNING');
      await rejectsWith(provider.input('r', { kind: 'mouse', type: 'down', x: 1, y: 1 }), 'ERR_ROOM_NOT_RUNNING');
      await rejectsWith(provider.navigate('r', { action: 'reload' }), 'ERR_ROOM_NOT_RUNNING');
      expect(provider.status('r')?.state).toBe('running');
    } finally {
      await provider.close();
      browser.remove();
    }
  });
});
