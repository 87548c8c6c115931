import { execFileSync } from 'node:child_process';
import { isIP } from 'node:net';
import path from 'node:path';
import { parseTrustProxy, type TrustProxy } from './client-address.js';
import { type Env, type EnvReaders, envReaders } from './config.env.js';
import { headerSecretFault, headerSecretRule } from './config.secrets.js';
import { readVmSettings } from './config.vm.js';

// The secrets' rules and the proxy URL parser live beside this file; their importers take them from here.
export {
  HEADER_SECRET_MAX_LENGTH,
  type HeaderSecret,
  headerSecretFault,
  headerSecretRule,
  SECRET_MIN_LENGTH,
} from './config.secrets.js';
export { parseProxyUrl } from './config.vm.js';

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
  /**
   * How long a node waits for a browser host to start a room (ms, VM_HOST_START_TIMEOUT_MS,
   * 30000): above the host's own 20 s wait for Chromium, so a slow start is the host's to report.
   */
  vmHostStartTimeoutMs: number;
  /** A browser host's listening port (BROWSER_HOST_PORT, 8090); only the browser-host process reads it. */
  browserHostPort: number;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** Git commit of the running build, for GET /v1/health. */
  sourceHash: string;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

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

/**
 * Whether HOST is an unspecified address (0.0.0.0, ::, ::ffff:0.0.0.0 in any spelling): one that
 * listens on every interface and that no client ever reaches the service at.
 */
function isEveryInterface(host: string): boolean {
  if (isIP(host) === 4) return host === '0.0.0.0';
  const url = isIP(host) === 6 && URL.canParse(`http://[${host}]`) ? new URL(`http://[${host}]`) : null;
  return url !== null && ['[::]', '[::ffff:0:0]'].includes(url.hostname);
}

/** Where the service listens and is reached: PORT, HOST, PUBLIC_URL, GUILD_API_URL. */
function readListen({ str, int, baseUrl }: EnvReaders, problems: string[], role: ConfigRole) {
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
  // The default would be http://0.0.0.0:8080: no browser sends that Origin, and links would point there.
  if (role === 'server' && isEveryInterface(host) && str('PUBLIC_URL') === null)
    problems.push(
      `HOST on every interface needs PUBLIC_URL, the URL users reach the service at: no browser sends the default http://HOST:PORT as its origin, so their cookie-authenticated writes and sockets would be refused (got ${JSON.stringify(host)})`,
    );
  return { port, host, publicUrl, guildApiUrl: baseUrl('GUILD_API_URL') ?? publicUrl, publicOrigin };
}

/** The secrets clients send: PUBLIC_API_KEY and OPERATOR_TOKEN (null: generated into DATA_DIR). */
function readSecrets({ str }: EnvReaders, problems: string[]) {
  const publicApiKey = str('PUBLIC_API_KEY');
  const publicApiKeyProblem = publicApiKey === null ? null : headerSecretFault('PUBLIC_API_KEY', publicApiKey);
  if (publicApiKeyProblem !== null)
    problems.push(`PUBLIC_API_KEY must be ${headerSecretRule('PUBLIC_API_KEY')} (it has ${publicApiKeyProblem})`);
  const operatorToken = str('OPERATOR_TOKEN');
  const operatorTokenProblem = operatorToken === null ? null : headerSecretFault('OPERATOR_TOKEN', operatorToken);
  if (operatorTokenProblem !== null)
    problems.push(`OPERATOR_TOKEN must be ${headerSecretRule('OPERATOR_TOKEN')} (it has ${operatorTokenProblem})`);
  return { publicApiKey, operatorToken };
}

/** Who may send cookies and from where: COOKIE_DOMAIN, ALLOWED_ORIGINS, TRUST_PROXY. */
function readOrigins({ str }: EnvReaders, problems: string[], publicOrigin: string | null) {
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
  const trustProxy = parseTrustProxy(str('TRUST_PROXY'));
  if ('problem' in trustProxy) problems.push(trustProxy.problem);
  return {
    cookieDomain,
    trustProxy: 'value' in trustProxy ? trustProxy.value : false,
    allowedOrigins: origins.length > 0 ? origins : publicOrigin ? [publicOrigin] : [],
  };
}

/** The stores: DATA_DIR, DATABASE_URL and its statement timeout, REDIS_URL and REDIS_PREFIX. */
function readStores({ str, int, url }: EnvReaders, problems: string[]) {
  const redisPrefix = str('REDIS_PREFIX') ?? 'parlor:';
  if (!/^[A-Za-z0-9:_-]{1,64}$/.test(redisPrefix)) problems.push('REDIS_PREFIX must be 1-64 of A-Z a-z 0-9 : _ -');
  return {
    dataDir: path.resolve(str('DATA_DIR') ?? './data'),
    databaseUrl: url('DATABASE_URL', ['postgres:', 'postgresql:']),
    databaseStatementTimeoutMs: int('DATABASE_STATEMENT_TIMEOUT_MS', 15_000, 0, 3_600_000),
    redisUrl: url('REDIS_URL', ['redis:', 'rediss:']),
    redisPrefix,
  };
}

/**
 * The process a configuration is for: the API server, or a browser host (browser-host-main.ts),
 * which nodes reach by VM_HOSTS and which serves no browser, so it needs no PUBLIC_URL.
 */
export type ConfigRole = 'server' | 'browser-host';

/** Reads and validates the environment; every invalid variable is listed in one ConfigError. */
export function loadConfig(
  env: Env = process.env,
  overrides: Partial<Config> = {},
  role: ConfigRole = 'server',
): Readonly<Config> {
  const problems: string[] = [];
  const r = envReaders(env, problems);
  const { publicOrigin, ...listen } = readListen(r, problems, role);
  const secrets = readSecrets(r, problems);
  const origins = readOrigins(r, problems, publicOrigin);
  const vm = readVmSettings(r, problems);
  const logLevel = (r.str('LOG_LEVEL') ?? 'info') as Config['logLevel'];
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`);
  const stores = readStores(r, problems);

  const config: Config = {
    ...listen,
    ...stores,
    ...secrets,
    ...origins,
    ...vm,
    logLevel,
    sourceHash: r.str('SOURCE_HASH') ?? '',
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
  // The public key is printed and given to every client; equal to the operator token it would make
  // anyone the operator (and let them sign viewer tokens, whose key derives from it). Overrides too.
  if (config.publicApiKey !== null && config.publicApiKey === config.operatorToken)
    problems.push(
      'PUBLIC_API_KEY and OPERATOR_TOKEN must differ: the public key is given to every client, and the operator token must stay secret',
    );
  if (problems.length > 0) throw new ConfigError(problems);
  if (config.sourceHash === '') config.sourceHash = gitHead();
  return Object.freeze(config);
}

/** The configuration of a process entry; an invalid one prints each problem and exits 1. */
export function loadConfigOrExit(label: string, role: ConfigRole = 'server'): Readonly<Config> {
  try {
    return loadConfig(process.env, {}, role);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    for (const p of e.problems) process.stderr.write(`${label}: invalid configuration: ${p}\n`);
    process.exit(1);
  }
}
