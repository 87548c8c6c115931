/**
 * vm: the shared browser (room VM). Start latency, frames per second delivered to 1, 5 and 20
 * viewers, input-to-frame latency, and memory and CPU per room, against the DevTools screencast
 * read directly (no server) in the same run.
 *
 *   - Parlor: the real app (in this process) runs the room; viewers are SDK clients (ParlorClient,
 *     connect, joinRoom, RoomVm acknowledging every frame) in a child process (lib/vm-viewers.mjs).
 *     The room shows lib/vm-site.mjs's page: a full-viewport gradient animated every frame.
 *   - baseline: the same browser build, flags and screencast settings, started through the local
 *     provider (packages/server/dist/platform/vm/local-provider.js) with no server at all; frames
 *     are counted where the DevTools pipe delivers them, and input goes straight over the pipe.
 * Both browsers stay up; only one animates and streams at a time (the other's page is paused and
 * unwatched), alternating rounds of `--duration` seconds, `--rounds` per side and viewer count.
 * fps: frames received per viewer per second (Parlor: the mean over viewers). Input to frame: a key
 * press on a still page (it repaints once), from sending the input to receiving the next frame
 * (Parlor: the controller's socket, a viewer itself). Memory: PSS of the browser process tree.
 * CPU: user+system seconds of the browser tree, and of this process (the server), per second.
 *
 * With `--provider remote`, the app runs its room on a browser host (VM_HOSTS) served from this
 * process on a port of its own: frames and input take the extra hop node ↔ host over Socket.IO,
 * as in a deployment with browser machines (the host's CPU counts as the server's here).
 *
 * Options: --mode, --duration S (5), --rounds N (3), --viewers 1,5,20, --samples N (30), --starts N (5),
 *          --provider local|remote (local), --viewers-nice N (0).
 */
import os from 'node:os';
import { createBots, loginUsers, setLevel, userClient } from './lib/accounts.mjs';
import { startChild } from './lib/child.mjs';
import { machineLine } from './lib/machine.mjs';
import { loadServer, startModeOrSkip } from './lib/modes.mjs';
import { intOpt } from './lib/options.mjs';
import { summarize } from './lib/stats.mjs';
import { fmt } from './lib/table.mjs';
import { report } from './lib/vm-report.mjs';
import { startVmSite, treeCpuSeconds } from './lib/vm-site.mjs';

export const description = 'room VM: start latency, fps to 1/5/20 viewers, input→frame, memory vs the raw screencast';
export const defaults = { duration: 5 };
export const usage = `options:
  --mode embedded|cluster|both   (both)
  --duration S                   seconds per fps round and side (5)
  --rounds N                     fps rounds per side and viewer count, alternating (3)
  --viewers LIST                 viewer counts (1,5,20)
  --samples N                    input→frame samples per side and viewer count (30)
  --starts N                     room starts timed, each after a stop (5)
  --provider local|remote        the app's browsers on its own machine, or on a browser host (local)
  --viewers-nice N               run the viewers' process at this nice level, 0-19 (0): an
                                 experiment standing in for viewers on other machines
  --json                         also print the results as one BENCH_JSON line`;

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function loadProvider() {
  await loadServer();
  return import('../packages/server/dist/platform/vm/local-provider.js');
}

/** A browser host on 127.0.0.1 (the app reaches it through VM_HOSTS); its provider runs the browsers. */
async function startHost(LocalChromiumProvider, { browserUser, sandbox }) {
  const { createServer } = await import('node:http');
  const { randomBytes } = await import('node:crypto');
  const { createBrowserHost } = await import('../packages/server/dist/platform/vm/browser-host.js');
  const provider = new LocalChromiumProvider({ chromiumPath: CHROMIUM, maxRooms: 2, browserUser, sandbox });
  const token = randomBytes(24).toString('hex');
  const server = createServer();
  const host = createBrowserHost(server, { provider, token });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { provider, token, url: `http://127.0.0.1:${server.address().port}`, close: () => host.close() };
}

export async function run({ modes, duration, options }) {
  const rounds = intOpt(options.rounds, 3, 1, 20);
  const samples = intOpt(options.samples, 30, 1, 500);
  const starts = intOpt(options.starts, 5, 1, 50);
  const counts = String(options.viewers ?? '1,5,20')
    .split(',')
    .map((v) => intOpt(v, 1, 1, 200));
  const most = Math.max(...counts);
  const viewersNice = intOpt(options['viewers-nice'], 0, 0, 19);
  /** What every mode measures (measure's options). */
  const plan = { counts, most, rounds, duration, samples, starts, viewersNice };
  const remote = options.provider === 'remote';
  if (options.provider !== undefined && !['local', 'remote'].includes(options.provider))
    throw new Error('--provider must be local or remote');
  console.log(`[vm] ${machineLine()}`);
  console.log(
    `[vm] viewers ${counts.join('/')}${viewersNice ? ` (at nice ${viewersNice})` : ''}, ${rounds} rounds × ${duration} s per side, ${samples} input samples, ${starts} starts; browser ${CHROMIUM}`,
  );
  const site = await startVmSite();
  const { LocalChromiumProvider } = await loadProvider();
  const results = {};
  const browserUser = process.env.VM_BROWSER_USER || 'nobody';
  const sandbox = !['0', 'false', 'no', 'off'].includes(String(process.env.VM_SANDBOX ?? '').toLowerCase());
  try {
    for (const mode of modes) {
      const host = remote ? await startHost(LocalChromiumProvider, { browserUser, sandbox }) : null;
      const started = await startModeOrSkip(
        'vm',
        mode,
        {
          config: {
            vmAllowPrivateNetworks: true,
            vmMaxPerNode: 2,
            vmIdleTimeoutSeconds: 3600,
            chromiumPath: CHROMIUM,
            // How browsers run, as the app's configuration says (both sides use it).
            vmBrowserUser: browserUser,
            vmSandbox: sandbox,
            ...(host ? { vmHosts: [host.url], vmHostToken: host.token } : {}),
          },
        },
        results,
      );
      if (!started) {
        await host?.close();
        continue;
      }
      // The same browser account and sandbox as the app's provider (VM_BROWSER_USER, VM_SANDBOX).
      const { vmBrowserUser, vmSandbox } = started.config;
      const raw = new LocalChromiumProvider({
        chromiumPath: CHROMIUM,
        maxRooms: 1,
        browserUser: vmBrowserUser,
        sandbox: vmSandbox,
      });
      let viewers;
      try {
        console.log(
          `\n[vm] ${started.label}${host ? `; rooms on a browser host at ${host.url}` : ''}; app up in ${fmt.ms(started.startMs)}; load ${os.loadavg()[0].toFixed(2)}`,
        );
        results[mode] = await measure({
          started,
          // Where the app's room browser runs: its own provider, or the host's.
          browsers: host ? host.provider : started.built.vmProvider,
          raw,
          site,
          plan,
          setViewers: (v) => {
            viewers = v;
          },
        });
      } finally {
        await viewers?.close();
        await raw.close();
        await started.close();
        await host?.close();
      }
    }
  } finally {
    await site.close();
  }
  return results;
}

async function measure({ started, browsers, raw, site, plan, setViewers }) {
  const { counts, most, rounds, duration, samples, starts, viewersNice } = plan;
  const { url, built } = started;
  built.services.vm.useSettings(async () => ({ start_url: site.url }));
  const botKeys = await createBots(url, 2);
  const logged = await loginUsers(started, most, { botKeys, concurrency: 8 });
  const ownerHttp = userClient(url, logged.users[0]);
  const me = (await ownerHttp.ok('GET', '/v1/users/me')).user;
  await setLevel(url, me.id, 2);
  const chatId = (await ownerHttp.ok('POST', '/v1/portal/chats/create', { name: 'vm bench', type: 'public' })).chat.id;
  ownerHttp.close();
  const viewers = await startChild(new URL('./lib/vm-viewers.mjs', import.meta.url), {
    name: 'vm viewers',
    nice: viewersNice,
  });
  setViewers(viewers);
  await viewers.call('join', { url, publicKey: built.publicApiKey, users: logged.users, chatId });
  const roomId = String(chatId);
  const spec = {
    browser: 'brave',
    proxy: 'none',
    startUrl: site.url,
    allowPrivateNetworks: true,
    width: 1280,
    height: 720,
  };

  // 1. Start latency: Parlor (REST start → 200, → the first frame at the owner) vs the provider alone.
  const parlorStarts = [];
  const firstFrames = [];
  const rawStarts = [];
  for (let i = 0; i < starts; i++) {
    const s = await viewers.call('startRoom');
    parlorStarts.push(s.startMs);
    firstFrames.push(s.firstFrameMs);
    await viewers.call('stopRoom');
    const t0 = performance.now();
    await raw.start('raw', spec);
    rawStarts.push(performance.now() - t0);
    await raw.stop('raw');
  }
  await viewers.call('startRoom');
  await viewers.call('unwatch');
  await raw.start('raw', spec);
  await sleep(1000);
  const pause = (side, p) =>
    side === 'parlor' ? browsers.evaluate(roomId, `window.__pause(${p})`) : raw.evaluate('raw', `window.__pause(${p})`);
  await pause('parlor', true);
  await pause('raw', true);
  const idleMemory = { parlor: await browsers.memoryBytes(roomId), raw: await raw.memoryBytes('raw') };

  // BENCH_PROFILE_DIR=dir: CPU profiles of this process (the server) in Parlor's rounds at the
  // largest viewer count (vm-<mode>-parlor.json; read with bench/tools/profile-summary.mjs).
  const profileDir = process.env.BENCH_PROFILE_DIR;
  const profiles = [];
  let profiler = null;
  if (profileDir) {
    const { Session } = await import('node:inspector/promises');
    profiler = new Session();
    profiler.connect();
    await profiler.post('Profiler.enable');
    await profiler.post('Profiler.setSamplingInterval', { interval: 500 });
  }

  // 2. fps per viewer count, alternating rounds; CPU of the browser tree and of this process.
  const cpu = (side) => treeCpuSeconds(side === 'parlor' ? browsers.pidOf(roomId) : raw.pidOf('raw'));
  const fps = {};
  let streamingMemory = 0;
  for (const n of counts) {
    const side = { parlor: [], raw: [] };
    for (let r = 0; r < rounds; r++) {
      for (const s of ['raw', 'parlor']) {
        await pause(s, false);
        let rawFrames = 0;
        let rawBytes = 0;
        const unsubscribe =
          s === 'raw'
            ? raw.subscribe('raw', (f) => {
                rawFrames += 1;
                rawBytes += f.data.length;
              })
            : null;
        // Parlor rounds also count the frames its browser produced (what the viewers could get at most).
        let produced = 0;
        const counter = s === 'parlor' ? browsers.subscribe(roomId, () => produced++) : null;
        if (s === 'parlor') await viewers.call('watch', { n });
        await sleep(700); // the screencast settles
        rawFrames = 0;
        rawBytes = 0;
        produced = 0;
        const c0 = cpu(s);
        const p0 = process.cpuUsage();
        const t0 = performance.now();
        const profiled = profiler && s === 'parlor' && n === Math.max(...counts);
        if (profiled) await profiler.post('Profiler.start');
        const counted =
          s === 'parlor'
            ? await viewers.call('count', { ms: duration * 1000 })
            : await sleep(duration * 1000).then(() => null);
        if (profiled) profiles.push((await profiler.post('Profiler.stop')).profile);
        const secs = (performance.now() - t0) / 1000;
        const p1 = process.cpuUsage(p0);
        const browserCpu = (cpu(s) - c0) / secs;
        const serverCpu = (p1.user + p1.system) / 1e6 / secs;
        if (s === 'parlor') {
          if (n === Math.max(...counts))
            streamingMemory = Math.max(streamingMemory, await browsers.memoryBytes(roomId));
          const perViewer = counted.frames.map((f) => f / secs);
          side.parlor.push({
            fps: perViewer.reduce((a, b) => a + b, 0) / perViewer.length,
            minFps: Math.min(...perViewer),
            bytes: counted.bytes.reduce((a, b) => a + b, 0) / secs,
            browserCpu,
            serverCpu,
            clientCpu: counted.cpu,
            producedFps: produced / secs,
          });
          counter();
          await viewers.call('unwatch');
        } else {
          unsubscribe();
          side.raw.push({
            fps: rawFrames / secs,
            minFps: rawFrames / secs,
            bytes: rawBytes / secs,
            browserCpu,
            serverCpu,
            clientCpu: 0,
            producedFps: rawFrames / secs,
          });
        }
        await pause(s, true);
        await sleep(300);
      }
    }
    const mean = (arr, k) => arr.reduce((a, x) => a + x[k], 0) / arr.length;
    fps[n] = Object.fromEntries(
      ['parlor', 'raw'].map((s) => [
        s,
        {
          fps: mean(side[s], 'fps'),
          minFps: Math.min(...side[s].map((x) => x.minFps)),
          bytesPerSec: mean(side[s], 'bytes'),
          browserCpu: mean(side[s], 'browserCpu'),
          serverCpu: mean(side[s], 'serverCpu'),
          clientCpu: mean(side[s], 'clientCpu'),
          producedFps: mean(side[s], 'producedFps'),
        },
      ]),
    );
  }
  if (profiler) {
    const { writeFileSync } = await import('node:fs');
    const file = `${profileDir}/vm-${started.mode}-parlor.json`;
    writeFileSync(file, JSON.stringify(profiles));
    profiler.disconnect();
    console.log(`[vm] CPU profiles of the server in Parlor's ${Math.max(...counts)}-viewer rounds: ${file}`);
  }

  // 3. Input → frame on a still page, with n viewers watching (Parlor) vs the pipe alone.
  await viewers.call('control');
  const latency = {};
  for (const n of counts) {
    await viewers.call('watch', { n });
    await sleep(500);
    const parlor = summarize((await viewers.call('latency', { samples, gapMs: 200 })).samples);
    await viewers.call('unwatch');
    const rawSamples = [];
    let resolveFrame = null;
    const unsubscribe = raw.subscribe('raw', () => resolveFrame?.());
    await sleep(500);
    for (let i = 0; i < samples; i++) {
      await sleep(200);
      const next = new Promise((r) => {
        resolveFrame = r;
      });
      const t0 = performance.now();
      await raw.input('raw', { kind: 'key', type: 'down', key: 'a', code: 'KeyA' });
      await next;
      rawSamples.push(performance.now() - t0);
      resolveFrame = null;
      await raw.input('raw', { kind: 'key', type: 'up', key: 'a', code: 'KeyA' });
    }
    unsubscribe();
    latency[n] = { parlor, raw: summarize(rawSamples) };
  }
  return report(started.label, {
    counts,
    parlorStarts,
    firstFrames,
    rawStarts,
    fps,
    latency,
    idleMemory,
    streamingMemory,
  });
}
