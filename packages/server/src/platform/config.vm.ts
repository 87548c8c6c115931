import type { EnvReaders } from './config.env.js';
import type { Config } from './config.js';
import { SECRET_MIN_LENGTH } from './config.secrets.js';

/** Proxy schemes Chromium speaks that a region proxy may use (socks4 resolves names locally: not offered). */
const REGION_PROXY_SCHEMES = ['http:', 'https:', 'socks5:'] as const;

/** Host names and bracketed IPv6 literals; nothing that could split Chromium's proxy rule list (`;`, `,`, `=`). */
const PROXY_HOST =
  /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])$/;

/**
 * A room browser's upstream proxy as Chromium's --proxy-server takes it (`scheme://host:port`,
 * nothing more), or why the value cannot be one. Chromium has no way to send a user name or
 * password given in that flag, so credentials are refused rather than dropped. SOCKS needs an
 * explicit port: Chromium's default (1080) is not Tor's (9050). The value is never echoed, since a
 * refused one may hold a password.
 */
export function parseProxyUrl(value: string, protocols: readonly string[]): { url: string } | { problem: string } {
  const form = protocols.map((p) => `${p}//host:port`).join(', ');
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return { problem: `must be a URL like ${form}` };
  }
  if (!protocols.includes(u.protocol))
    return { problem: `must be a URL like ${form} (scheme "${u.protocol}" refused)` };
  if (u.username !== '' || u.password !== '')
    return {
      problem: `must not carry a user name or password: Chromium's --proxy-server cannot send them (let the proxy allow this host by address instead)`,
    };
  if (!PROXY_HOST.test(u.hostname)) return { problem: `must name the proxy's host, like ${form}` };
  if (u.protocol === 'socks5:' && u.port === '')
    return { problem: 'must give the SOCKS port, like socks5://host:9050' };
  if (!['', '/'].includes(u.pathname) || u.search !== '' || u.hash !== '')
    return { problem: `must be only ${form}: no path, query or fragment` };
  return { url: `${u.protocol}//${u.host}` };
}

/**
 * VM_HOSTS: the browser hosts' http(s) origins, comma-separated; each is read as its origin. A
 * refused entry is named by its position, never echoed, since it may hold a password. A user name
 * or password is refused rather than dropped: the Socket.IO client connects by host and port and
 * never sends them (a node authenticates with VM_HOST_TOKEN alone), so they could only leak, in
 * errors and log lines. A path is refused too: the client would take it for a namespace, which the
 * host does not serve, and no host would ever be reachable; a query or fragment has no use.
 */
function browserHostUrls(value: string, problems: string[]): string[] {
  const hosts: string[] = [];
  for (const [i, entry] of value.split(',').entries()) {
    const h = entry.trim();
    if (h === '') continue;
    const u = URL.canParse(h) ? new URL(h) : null;
    if (u === null || !['http:', 'https:'].includes(u.protocol))
      problems.push(`VM_HOSTS entry ${i + 1} is not an http(s) URL of a browser host`);
    else if (u.username !== '' || u.password !== '')
      problems.push(
        `VM_HOSTS entry ${i + 1} must not carry a user name or password: nodes authenticate with VM_HOST_TOKEN`,
      );
    else if (u.pathname !== '/' || u.search !== '' || u.hash !== '')
      problems.push(
        `VM_HOSTS entry ${i + 1} must be only http(s)://host:port: no path, query or fragment (nodes connect to the path /browser-host themselves)`,
      );
    else hosts.push(u.origin);
  }
  return hosts;
}

/** `first-last`: uids from 1000 (past system accounts) up, at least `width` of them. */
function uidRangeReader(str: EnvReaders['str'], problems: string[]) {
  return (name: string, width: number) => {
    const v = str(name);
    if (v === null) return null;
    const m = /^(\d{1,10})-(\d{1,10})$/.exec(v);
    const first = Number(m?.[1]);
    const last = Number(m?.[2]);
    if (!m || first < 1000 || last > 2_147_483_646 || last < first) {
      problems.push(`${name} must be a uid range first-last, from 1000 up (got "${v}")`);
      return null;
    }
    if (last - first + 1 < width) {
      problems.push(`${name} must hold at least VM_MAX_PER_NODE (${width}) uids (got ${last - first + 1})`);
      return null;
    }
    return { first, last };
  };
}

/** A room's upstream proxy (parseProxyUrl), null when unset or refused. */
function proxyReader(str: EnvReaders['str'], problems: string[]) {
  return (name: string, protocols: readonly string[]) => {
    const v = str(name);
    if (v === null) return null;
    const parsed = parseProxyUrl(v, protocols);
    if ('url' in parsed) return parsed.url;
    problems.push(`${name} ${parsed.problem}`);
    return null;
  };
}

/** The room VM settings of Config. */
type VmSettings = Pick<
  Config,
  | 'chromiumPath'
  | 'vmMaxPerNode'
  | 'vmAllowPrivateNetworks'
  | 'vmIdleTimeoutSeconds'
  | 'vmTorProxy'
  | 'vmProxyUs'
  | 'vmProxyEu'
  | 'vmBrowserUser'
  | 'vmSandbox'
  | 'vmBrowserUids'
  | 'vmHosts'
  | 'vmHostToken'
  | 'vmHostStartTimeoutMs'
  | 'browserHostPort'
>;

/** The room VM settings (VM_*, CHROMIUM_PATH, BROWSER_HOST_PORT): browsers, proxies, accounts and hosts. */
export function readVmSettings({ str, int, bool }: EnvReaders, problems: string[]): VmSettings {
  const uidRange = uidRangeReader(str, problems);
  const proxy = proxyReader(str, problems);
  const vmMaxPerNode = int('VM_MAX_PER_NODE', 4, 0, 1000);
  const vmBrowserUser = str('VM_BROWSER_USER') ?? 'nobody';
  if (!/^([a-z_][a-z0-9_.-]{0,31}\$?|\d+(:\d+)?)$/i.test(vmBrowserUser))
    problems.push(`VM_BROWSER_USER must be a user name or uid[:gid] (got "${vmBrowserUser}")`);
  const vmBrowserUids = uidRange('VM_BROWSER_UIDS', vmMaxPerNode);
  const vmHosts = browserHostUrls(str('VM_HOSTS') ?? '', problems);
  const vmHostToken = str('VM_HOST_TOKEN');
  if (vmHostToken !== null && vmHostToken.length < SECRET_MIN_LENGTH.VM_HOST_TOKEN)
    problems.push(`VM_HOST_TOKEN must be at least ${SECRET_MIN_LENGTH.VM_HOST_TOKEN} characters`);
  if (vmHosts.length > 0 && vmHostToken === null)
    problems.push('VM_HOST_TOKEN must be set when VM_HOSTS names browser hosts (the token they share)');
  return {
    chromiumPath: str('CHROMIUM_PATH') ?? '/usr/bin/chromium',
    vmMaxPerNode,
    vmAllowPrivateNetworks: bool('VM_ALLOW_PRIVATE_NETWORKS'),
    vmIdleTimeoutSeconds: int('VM_IDLE_TIMEOUT_SECONDS', 300, 10, 86_400),
    vmTorProxy: proxy('VM_TOR_PROXY', ['socks5:']),
    vmProxyUs: proxy('VM_PROXY_US', REGION_PROXY_SCHEMES),
    vmProxyEu: proxy('VM_PROXY_EU', REGION_PROXY_SCHEMES),
    vmBrowserUser,
    vmSandbox: str('VM_SANDBOX') === null ? true : bool('VM_SANDBOX'),
    vmBrowserUids,
    vmHosts,
    vmHostToken,
    vmHostStartTimeoutMs: int('VM_HOST_START_TIMEOUT_MS', 30_000, 1_000, 300_000),
    browserHostPort: int('BROWSER_HOST_PORT', 8090, 0, 65535),
  };
}
