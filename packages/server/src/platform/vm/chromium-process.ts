import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { access, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { appError } from '../errors.js';
import { type BrowserIdentity, handOver } from './browser-account.js';
import { CdpPipe } from './cdp.js';
import { PROFILE_PREFIX, tmpDirFor, writeProfilePreferences } from './chromium-profile.js';

/**
 * Flags of every room browser. The first group is the headless, quiet base; "brave" (spec 2.4's
 * browser value) adds the hardening: no extensions, no background traffic to Google services, no
 * crash uploads, no permission prompts, downloads denied (set over CDP), and WebRTC limited to
 * proxied UDP so a page cannot reach addresses the request interception never sees.
 * `--no-sandbox` only when the browser runs as root or VM_SANDBOX is off (browser-account.ts).
 */
export function chromiumArgs(
  userDataDir: string,
  size: { width: number; height: number },
  upstream: RoomUpstream | null = null,
  sandbox = true,
): string[] {
  return [
    '--headless',
    ...(sandbox ? [] : ['--no-sandbox']),
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--no-default-browser-check',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--disable-extensions',
    '--disable-default-apps',
    '--disable-breakpad',
    '--disable-client-side-phishing-detection',
    '--disable-domain-reliability',
    '--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,NetworkTimeServiceQuerying',
    // What the flags above leave on still calls Google at start (the account list and the
    // component updater): point both at reserved names that never resolve.
    '--gaia-url=https://gaia.invalid',
    '--component-updater=url-source=https://update.invalid',
    '--deny-permission-prompts',
    '--force-webrtc-ip-handling-policy=disable_non_proxied_udp',
    '--webrtc-ip-handling-policy=disable_non_proxied_udp',
    '--password-store=basic',
    '--use-mock-keychain',
    '--mute-audio',
    '--renderer-process-limit=4',
    `--window-size=${size.width},${size.height}`,
    ...proxyArgs(upstream),
    `--user-data-dir=${userDataDir}`,
    '--remote-debugging-pipe',
    'about:blank',
  ];
}

/**
 * The proxy a room's browser goes through: Tor or the room's region (the room's settings and this
 * node's proxy URLs), or the node's egress proxy for a direct room (egress-proxy.ts).
 */
export interface RoomUpstream {
  /** `scheme://host:port` (http, https or socks5), as --proxy-server takes it. */
  server: string;
  /**
   * True for Tor: host names are resolved by the proxy only. Chromium already hands SOCKS5 proxies
   * the name, not an address; this also maps every local lookup (DNS prefetch and the like) to
   * "not found" except the proxy's own host, and the network guard looks nothing up either.
   */
  remoteDns: boolean;
}

/**
 * Flags sending every request through the room's proxy. `<-loopback>` removes Chromium's implicit
 * bypass of localhost and loopback addresses, so those go to the proxy too and never reach this
 * host's own services directly (docs/security.md). For Tor, the host-resolver rules follow
 * Chromium's SOCKS guide: no name is resolved here at all.
 */
export function proxyArgs(upstream: RoomUpstream | null): string[] {
  if (!upstream) return [];
  const args = [`--proxy-server=${upstream.server}`, '--proxy-bypass-list=<-loopback>'];
  if (upstream.remoteDns) {
    const host = new URL(upstream.server).hostname;
    const bare = host.startsWith('[') ? host.slice(1, -1) : host;
    args.push(`--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE ${bare}`);
  }
  return args;
}

/** A start called off before the browser was ready (its room stopped, or the node shuts down). */
export function calledOff() {
  return appError(
    'ERR_ROOM_START_FAILED',
    'The room start was called off: the room was stopped or this node is shutting down.',
  );
}

/** How long a browser may take to answer its first DevTools command. */
const READY_TIMEOUT_MS = 20_000;

/**
 * One browser process: a fresh profile directory (its home and temporary folder too), its own
 * process group (so the whole tree can be killed at once), a minimal environment (no server
 * secrets), and the DevTools pipe.
 */
export class ChromiumProcess {
  private stderrTail = '';
  private exited = false;
  private readonly exitWaiters: (() => void)[] = [];
  /** Called once when the process exits, whoever caused it. */
  onExit: (code: number | null, signal: NodeJS.Signals | null) => void = () => {};

  private constructor(
    readonly child: ChildProcess,
    readonly cdp: CdpPipe,
    readonly userDataDir: string,
  ) {
    child.stderr?.on('data', (d: Buffer) => {
      this.stderrTail = (this.stderrTail + d.toString('utf8')).slice(-4000);
    });
    child.once('exit', (code, signal) => {
      this.exited = true;
      cdp.fail(new Error('the browser exited'));
      for (const w of this.exitWaiters.splice(0)) w();
      this.onExit(code, signal);
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return !this.exited;
  }

  /** The last lines the browser wrote to stderr (for the log when it fails). */
  get diagnostics(): string {
    return this.stderrTail.split('\n').slice(-8).join('\n');
  }

  /** Starts the browser and waits until it answers over DevTools; 503 ERR_ROOM_START_FAILED otherwise. */
  static async launch(
    binary: string,
    size: { width: number; height: number },
    opts: {
      log?: (message: string) => void;
      extraArgs?: string[];
      upstream?: RoomUpstream | null;
      /** As whom, and whether sandboxed (default: the server's user, sandboxed unless it is root). */
      identity?: BrowserIdentity;
      /** Calls the start off (the room stopped, the node shuts down): the browser is killed at once. */
      signal?: AbortSignal;
    } = {},
  ): Promise<ChromiumProcess> {
    const { log = () => {}, extraArgs = [], upstream = null } = opts;
    const { account, sandbox } = opts.identity ?? { account: null, sandbox: process.getuid?.() !== 0 };
    try {
      await access(binary, constants.X_OK);
    } catch {
      throw appError(
        'ERR_ROOM_START_FAILED',
        `The room browser is not installed: ${binary} is missing or not executable (CHROMIUM_PATH).`,
      );
    }
    if (opts.signal?.aborted) throw calledOff();
    const userDataDir = await mkdtemp(path.join(tmpdir(), `${PROFILE_PREFIX}${process.pid}-`));
    await writeProfilePreferences(userDataDir);
    if (account) await handOver(userDataDir, account);
    const args = chromiumArgs(userDataDir, size, upstream, sandbox);
    // Extra flags go before the start page (the last argument).
    args.splice(-1, 0, ...extraArgs);
    const child = spawn(binary, args, {
      stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
      detached: true,
      // TMPDIR too: Chromium's own folder (org.chromium.Chromium.*, its single-instance lock) goes
      // in the profile, and with it when the profile is removed, even after a SIGKILL; unless its
      // socket's path would not fit there (tmpDirFor).
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: userDataDir, ...tmpDirFor(userDataDir), LANG: 'C.UTF-8' },
      // Node drops the supplementary groups too when it switches the account.
      ...(account ? { uid: account.uid, gid: account.gid } : {}),
    });
    const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
    const cdp = new CdpPipe(child.stdio[3] as Writable, child.stdio[4] as Readable);
    const proc = new ChromiumProcess(child, cdp, userDataDir);
    try {
      const ready = cdp.send('Browser.getVersion');
      const timeout = new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error('no answer in time')), READY_TIMEOUT_MS).unref(),
      );
      const abort = new Promise<never>((_, reject) => {
        if (opts.signal?.aborted) reject(calledOff());
        opts.signal?.addEventListener('abort', () => reject(calledOff()), { once: true });
      });
      await Promise.race([ready, timeout, abort, spawnError.then((e) => Promise.reject(e))]);
      return proc;
    } catch (err) {
      if (opts.signal?.aborted) {
        await proc.kill(0);
        throw calledOff();
      }
      const why = err instanceof Error ? err.message : String(err);
      log(`room browser failed to start: ${why}\n${proc.diagnostics}`);
      await proc.kill();
      throw appError('ERR_ROOM_START_FAILED', `The room browser failed to start (${why}).`);
    }
  }

  /** Asks the browser to close, then kills its whole process group; removes the profile. */
  async kill(graceMs = 1500): Promise<void> {
    if (!this.exited) {
      this.cdp.send('Browser.close').catch(() => {});
      await this.waitExit(graceMs);
    }
    this.killGroup();
    if (!this.exited) await this.waitExit(2000);
    await rm(this.userDataDir, { recursive: true, force: true }).catch(() => {});
  }

  /** SIGKILL to the browser's process group (its renderers, GPU and utility processes too). */
  killGroup(): void {
    const pid = this.child.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }

  /**
   * Memory of the whole process tree in bytes: the sum of each process's proportional set size
   * (shared pages split between the processes that map them, so the total is not inflated).
   */
  async memoryBytes(): Promise<number> {
    const pid = this.child.pid;
    if (pid === undefined || this.exited) return 0;
    const pids = await new Promise<string[]>((resolve) => {
      execFile('ps', ['-o', 'pid=', '-s', String(pid)], (err, stdout) =>
        resolve(
          err
            ? []
            : stdout
                .split('\n')
                .map((l) => l.trim())
                .filter(Boolean),
        ),
      );
    });
    let kb = 0;
    for (const p of pids) {
      const rollup = await readFile(`/proc/${p}/smaps_rollup`, 'utf8').catch(() => '');
      kb += Number(/^Pss:\s+(\d+) kB/m.exec(rollup)?.[1] ?? 0);
    }
    return kb * 1024;
  }

  private waitExit(ms: number): Promise<void> {
    if (this.exited) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      timer.unref();
      this.exitWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
