import { execFileSync } from 'node:child_process';
import { isIP } from 'node:net';
import path from 'node:path';
import { parseTrustProxy, type TrustProxy } from './client-address.js';

/** Validated configuration. Built once from the environment; nothing else reads process.env. */
export interface Config {
  /** TCP port to listen on (8080). 0 picks a free port (tests). */
  port: number;
  /**
   * Interface to bind (127.0.0.1: only this machine, put a proxy in front for the world): an IP
   * address or an RFC 1123 host name, checked here so a bad one is named at start, not by listen.
   */
  host: string;
  /**
   * Where the embedded database, the generated API key and the operator token live (./data); kept
   * at mode 0700 (secret-files.ts makePrivateDir).
   */
  dataDir: string;
  /** PostgreSQL URL; unset means the embedded PGlite store under dataDir. */
  databaseUrl: string | null;
  /**
   * Longest a statement may run on the PostgreSQL pool, in milliseconds (15000; 0: none set, the
   * database role's own statement_timeout applies).
   * A statement that hangs on a lock or a runaway plan then fails instead of holding a connection
   * and its request. Migrations run on a connection of their own, without it. PGlite: unused.
   */
  databaseStatementTimeoutMs: number;
  /** Redis URL; unset means in-process coordination (one node only). */
  redisUrl: string | null;
  /** Prefix of every Redis key, so several deployments (or test runs) can share one Redis. */
  redisPrefix: string;
  /** Public API key (K); null means generate once into dataDir (embedded only: REDIS_URL requires it). */
  publicApiKey: string | null;
  /**
   * Operator token for the CLI (headerSecretRule: 24-256 visible ASCII characters); null means
   * generate once into dataDir/operator-token (0600) (embedded only: REDIS_URL requires it, the
   * nodes' viewer-token key derives from it).
   */
  operatorToken: string | null;
  /**
   * The URL users reach the service at; used for links and the default allowed origin. An http(s)
   * origin with an optional path, without trailing slash, user name, password, query or fragment.
   */
  publicUrl: string;
  /** Base of the guild interface; defaults to publicUrl (same app). The same form as publicUrl. */
  guildApiUrl: string;
  /** Domain attribute of the session cookie (a domain name, checked here); null means a host-only cookie. */
  cookieDomain: string | null;
  /**
   * Whose X-Forwarded-For to believe (off): a hop count (the number of proxies in front, each
   * adding one entry; TRUST_PROXY=1/true is one) or the proxies' addresses and CIDR ranges. The
   * client address binds web login codes and keys the per-address limits (http.ts).
   */
  trustProxy: TrustProxy;
  /** Origins allowed for cookie-authenticated mutations and sockets. */
  allowedOrigins: string[];
  /** Browser binary for room VMs. */
  chromiumPath: string;
  /** Most room VMs one node runs at once. */
  vmMaxPerNode: number;
  /** Let room browsers reach private networks (tests, trusted intranets). */
  vmAllowPrivateNetworks: boolean;
  /** Seconds a room VM may run with nobody watching before it is stopped (300). */
  vmIdleTimeoutSeconds: number;
  /**
   * Tor's SOCKS proxy (`socks5://host:port`) for rooms whose browser is "tor"; null: such rooms
   * answer 503. Normalised to `scheme://host:port`, the form Chromium's --proxy-server takes.
   */
  vmTorProxy: string | null;
  /** Proxy (http, https or socks5 URL) for rooms with proxy region "us"; null: such rooms answer 503. */
  vmProxyUs: string | null;
  /** Proxy (http, https or socks5 URL) for rooms with proxy region "eu"; null: such rooms answer 503. */
  vmProxyEu: string | null;
  /** The account room browsers run as when the server runs as root: a user name or `uid[:gid]` (`nobody`). */
  vmBrowserUser: string;
  /** Chromium's sandbox for room browsers (on); off only for hosts without unprivileged user namespaces. */
  vmSandbox: boolean;
  /** When the server runs as root: a uid per room from this range (`first-last`), instead of vmBrowserUser. */
  vmBrowserUids: { first: number; last: number } | null;
  /** Browser hosts (http/https base URLs, no user or password) that run this node's room VMs; empty: browsers run here. */
  vmHosts: string[];
  /** The token browser hosts and nodes share (VM_HOST_TOKEN, at least 32 characters). */
  vmHostToken: string | null;
  /** A browser host's listening port (BROWSER_HOST_PORT, 8090); only the browser-host process reads it. */
  browserHostPort: number;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** Git commit of the running build, for GET /v1/health. */
  sourceHash: string;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
/** Proxy schemes Chromium speaks that a region proxy may use (socks4 resolves names locally: not offered). */
const REGION_PROXY_SCHEMES = ['http:', 'https:', 'socks5:'] as const;

type Env = Record<string, string | undefined>;

/**
 * Shortest value each secret may have, whether given in the environment or kept in DATA_DIR
 * (secret-files.ts checks a stored one against the same minimum).
 */
export const SECRET_MIN_LENGTH = { PUBLIC_API_KEY: 16, OPERATOR_TOKEN: 24, VM_HOST_TOKEN: 32 } as const;

/**
 * Longest public API key and operator token: the header checks (auth.ts apiKeyHeader, bearer)
 * treat a longer one as missing, so a server started with one would answer every request that
 * carries it 401.
 */
export const HEADER_SECRET_MAX_LENGTH = 256;

/** The secrets clients send in a request header: the public API key and the operator token. */
export type HeaderSecret = 'PUBLIC_API_KEY' | 'OPERATOR_TOKEN';

/**
 * A header secret's rule, for messages. Visible ASCII only: the CLI sends nothing else (anything
 * else cannot travel in a header as the same bytes), and Node and the Bearer check trim what they
 * receive, so a secret with spaces at either end could never match.
 */
export function headerSecretRule(variable: HeaderSecret): string {
  return `${SECRET_MIN_LENGTH[variable]}-${HEADER_SECRET_MAX_LENGTH} visible ASCII characters (0x21-0x7E, no spaces)`;
}

/**
 * What keeps `secret` from ever authenticating (its length, or the kind of character it holds), or
 * null when it keeps headerSecretRule. Never repeats the secret. Also checks a stored one
 * (secret-files.ts).
 */
export function headerSecretFault(variable: HeaderSecret, secret: string): string | null {
  if (secret.length < SECRET_MIN_LENGTH[variable] || secret.length > HEADER_SECRET_MAX_LENGTH)
    return `${secret.length} characters`;
  if (!/^[\x21-\x7e]+$/.test(secret)) return 'a space, a control or a non-ASCII character';
  return null;
}

/**
 * A cookie's Domain as the `cookie` package (behind @fastify/cookie) accepts it when it writes
 * Set-Cookie (its domainValueRegExp): labels of letters, digits and inner hyphens, up to 63
 * characters each, joined by dots, with an optional leading dot. A value it refuses would make
 * every login and logout throw after the session was written.
 */
const COOKIE_DOMAIN_RE = /^([.]?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)([.][a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i;

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration: ${problems.join('; ')}`);
  }
}

function gitHead(): string {
  try {
    return execFileSync('git', ['rev-parse', 'HEAD'], { stdio: ['ignore', 'pipe', 'ignore'], timeout: 2000 })
      .toString()
      .trim();
  } catch {
    return 'unknown';
  }
}

/** One label of a host name (RFC 1123): letters, digits and inner hyphens, 1-63 characters. */
const HOST_LABEL = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;

/**
 * A host name HOST may give (RFC 1123): dot-separated labels (no empty one, so no leading,
 * trailing or doubled dot), 253 characters at most, and not all digits in its last label, which a
 * top-level domain never is, so a mistyped address (256.0.0.1, 10.0.0) is refused here, naming
 * HOST, rather than failing at listen with a bare getaddrinfo ENOTFOUND.
 */
function isHostName(value: string): boolean {
  const labels = value.split('.');
  return (
    value.length <= 253 &&
    labels.every((label) => HOST_LABEL.test(label)) &&
    !/^[0-9]+$/.test(labels[labels.length - 1] ?? '')
  );
}

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
 * VM_HOSTS: the browser hosts' http(s) base URLs, comma-separated. A refused entry is named by its
 * position, never echoed, since it may hold a password. A user name or password is refused rather
 * than dropped: the Socket.IO client connects by host and port and never sends them (a node
 * authenticates with VM_HOST_TOKEN alone), so they could only leak, in errors and log lines.
 */
function browserHostUrls(value: string, problems: string[]): string[] {
  const hosts: string[] = [];
  for (const [i, entry] of value.split(',').entries()) {
    const h = entry.trim().replace(/\/$/, '');
    if (h === '') continue;
    const u = URL.canParse(h) ? new URL(h) : null;
    if (u === null || !['http:', 'https:'].includes(u.protocol))
      problems.push(`VM_HOSTS entry ${i + 1} is not an http(s) URL of a browser host`);
    else if (u.username !== '' || u.password !== '')
      problems.push(
        `VM_HOSTS entry ${i + 1} must not carry a user name or password: nodes authenticate with VM_HOST_TOKEN`,
      );
    else hosts.push(h);
  }
  return hosts;
}

/** Reads and validates the environment; every invalid variable is listed in one ConfigError. */
export function loadConfig(env: Env = process.env, overrides: Partial<Config> = {}): Readonly<Config> {
  const problems: string[] = [];
  const str = (name: string) => {
    const v = env[name];
    return v === undefined || v === '' ? null : v;
  };
  /**
   * A whole number in decimal digits and nothing else. Number() alone would read PORT=0x1F90 as
   * 8080, VM_MAX_PER_NODE=1e2 as 100, and take '8080.0', ' 8080 ' or '+8080': a value meaning
   * something other than what it looks like is refused, like any other invalid one. The value is
   * shown JSON-quoted, so the problem stays one line whatever it holds.
   */
  const int = (name: string, def: number, min: number, max: number) => {
    const v = str(name);
    if (v === null) return def;
    const n = /^[0-9]+$/.test(v) ? Number(v) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      problems.push(
        `${name} must be an integer from ${min} to ${max}, in decimal digits only (got ${JSON.stringify(v)})`,
      );
      return def;
    }
    return n;
  };
  const bool = (name: string) => {
    const v = str(name);
    if (v === null) return false;
    if (['1', 'true', 'yes', 'on'].includes(v.toLowerCase())) return true;
    if (['0', 'false', 'no', 'off'].includes(v.toLowerCase())) return false;
    problems.push(`${name} must be 1/0, true/false, yes/no or on/off (got "${v}")`);
    return false;
  };
  const url = (name: string, protocols: string[]) => {
    const v = str(name);
    if (v === null) return null;
    try {
      const u = new URL(v);
      if (!protocols.includes(u.protocol)) throw new Error();
      return v;
    } catch {
      problems.push(`${name} must be a ${protocols.join(' or ')} URL`);
      return null;
    }
  };
  /**
   * A base URL of this service (PUBLIC_URL, GUILD_API_URL): links are built by appending a path to
   * it (`${publicUrl}/avatars/…` in every avatar_url), so a user name or password would be handed
   * to every client, and a query or fragment would swallow the path appended after it. Both are
   * refused, never echoed (the value may hold a password). Answers the serialised origin and path,
   * without trailing slashes (an empty `?` or `#` goes with them).
   */
  const baseUrl = (name: string) => {
    const v = str(name);
    if (v === null) return null;
    const u = URL.canParse(v) ? new URL(v) : null;
    if (u === null || !['http:', 'https:'].includes(u.protocol)) {
      problems.push(`${name} must be a http: or https: URL`);
      return null;
    }
    if (u.username !== '' || u.password !== '') {
      problems.push(`${name} must not carry a user name or password: links to this service are built from it`);
      return null;
    }
    if (u.search !== '' || u.hash !== '') {
      problems.push(
        `${name} must be a base URL like https://example.org or https://example.org/path: no query or fragment`,
      );
      return null;
    }
    return `${u.origin}${u.pathname}`.replace(/\/+$/, '');
  };

  /** `first-last`: uids from 1000 (past system accounts) up, at least `width` of them. */
  const uidRange = (name: string, width: number) => {
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

  const vmMaxPerNode = int('VM_MAX_PER_NODE', 4, 0, 1000);
  const port = int('PORT', 8080, 0, 65535);
  const host = str('HOST') ?? '127.0.0.1';
  if (isIP(host) === 0 && !isHostName(host))
    problems.push(
      `HOST must be an IP address or a host name (dot-separated labels of letters, digits and inner hyphens, at most 63 characters each) (got ${JSON.stringify(host)})`,
    );
  // An IPv6 address needs brackets in a URL (HOST=:: listens on every IPv6 interface).
  const urlHost = isIP(host) === 6 ? `[${host}]` : host;
  const publicUrl = baseUrl('PUBLIC_URL') ?? `http://${urlHost}:${port}`;
  // Null only when HOST makes no URL: an invalid one (listed above), or an IPv6 one with a zone id
  // (`fe80::1%eth0`: listen takes it, a URL does not), listed here unless an invalid PUBLIC_URL is
  // already: there would be no allowed origin, every cookie-authenticated write and socket refused.
  // No throw before the report.
  const publicOrigin = URL.canParse(publicUrl) ? new URL(publicUrl).origin : null;
  if (publicOrigin === null && isIP(host) === 6 && str('PUBLIC_URL') === null)
    problems.push(
      `HOST with a zone id needs PUBLIC_URL: the default http://HOST:PORT is no URL (got ${JSON.stringify(host)})`,
    );
  const publicApiKey = str('PUBLIC_API_KEY');
  const publicApiKeyProblem = publicApiKey === null ? null : headerSecretFault('PUBLIC_API_KEY', publicApiKey);
  if (publicApiKeyProblem !== null)
    problems.push(`PUBLIC_API_KEY must be ${headerSecretRule('PUBLIC_API_KEY')} (it has ${publicApiKeyProblem})`);
  const operatorToken = str('OPERATOR_TOKEN');
  const operatorTokenProblem = operatorToken === null ? null : headerSecretFault('OPERATOR_TOKEN', operatorToken);
  if (operatorTokenProblem !== null)
    problems.push(`OPERATOR_TOKEN must be ${headerSecretRule('OPERATOR_TOKEN')} (it has ${operatorTokenProblem})`);
  const cookieDomain = str('COOKIE_DOMAIN');
  if (cookieDomain !== null && !COOKIE_DOMAIN_RE.test(cookieDomain))
    problems.push(
      `COOKIE_DOMAIN must be a domain name like example.org or .example.org: no scheme, port or path (got "${cookieDomain}")`,
    );
  const origins = (str('ALLOWED_ORIGINS') ?? '')
    .split(',')
    .map((o) => o.trim())
    .filter(Boolean);
  for (const [i, o] of origins.entries()) {
    try {
      if (new URL(o).origin !== o) throw new Error();
    } catch {
      // An entry with an `@` may carry a user name and password: named by its place, not repeated.
      problems.push(
        o.includes('@')
          ? `ALLOWED_ORIGINS entry ${i + 1} is not an origin like https://example.org: no user name or password`
          : `ALLOWED_ORIGINS has "${o}", which is not an origin like https://example.org`,
      );
    }
  }
  const proxy = (name: string, protocols: readonly string[]) => {
    const v = str(name);
    if (v === null) return null;
    const parsed = parseProxyUrl(v, protocols);
    if ('url' in parsed) return parsed.url;
    problems.push(`${name} ${parsed.problem}`);
    return null;
  };
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
  const logLevel = (str('LOG_LEVEL') ?? 'info') as Config['logLevel'];
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`);
  const trustProxy = parseTrustProxy(str('TRUST_PROXY'));
  if ('problem' in trustProxy) problems.push(trustProxy.problem);
  const redisPrefix = str('REDIS_PREFIX') ?? 'parlor:';
  if (!/^[A-Za-z0-9:_-]{1,64}$/.test(redisPrefix)) problems.push('REDIS_PREFIX must be 1-64 of A-Z a-z 0-9 : _ -');

  const config: Config = {
    port,
    host,
    dataDir: path.resolve(str('DATA_DIR') ?? './data'),
    databaseUrl: url('DATABASE_URL', ['postgres:', 'postgresql:']),
    databaseStatementTimeoutMs: int('DATABASE_STATEMENT_TIMEOUT_MS', 15_000, 0, 3_600_000),
    redisUrl: url('REDIS_URL', ['redis:', 'rediss:']),
    redisPrefix,
    publicApiKey,
    operatorToken,
    publicUrl,
    guildApiUrl: baseUrl('GUILD_API_URL') ?? publicUrl,
    cookieDomain,
    trustProxy: 'value' in trustProxy ? trustProxy.value : false,
    allowedOrigins: origins.length > 0 ? origins : publicOrigin ? [publicOrigin] : [],
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
    browserHostPort: int('BROWSER_HOST_PORT', 8090, 0, 65535),
    logLevel,
    sourceHash: str('SOURCE_HASH') ?? '',
    ...overrides,
  };
  // Several nodes (Redis) must share both secrets; a generated one would be per node (per DATA_DIR):
  // a key one node accepts and another refuses, viewer tokens that fail on the other nodes.
  if (config.redisUrl !== null) {
    for (const [name, value] of [
      ['PUBLIC_API_KEY', config.publicApiKey],
      ['OPERATOR_TOKEN', config.operatorToken],
    ] as const)
      if (value === null)
        problems.push(
          `${name} must be set when REDIS_URL is set: every node needs the same one (a generated one is per DATA_DIR)`,
        );
  }
  if (problems.length > 0) throw new ConfigError(problems);
  if (config.sourceHash === '') config.sourceHash = gitHead();
  return Object.freeze(config);
}

/** The configuration of a process entry; an invalid one prints each problem and exits 1. */
export function loadConfigOrExit(label: string): Readonly<Config> {
  try {
    return loadConfig();
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    for (const p of e.problems) process.stderr.write(`${label}: invalid configuration: ${p}\n`);
    process.exit(1);
  }
}
