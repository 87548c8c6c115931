import path from 'node:path';
import fastifyCookie from '@fastify/cookie';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { trustProxyOption } from './client-address.js';
import { type Config, ConfigError, type ConfigRole, loadConfig } from './config.js';

/** Every call passes SOURCE_HASH so loadConfig never shells out to git. */
const load = (env: Record<string, string | undefined> = {}, overrides: Partial<Config> = {}, role?: ConfigRole) =>
  loadConfig({ SOURCE_HASH: 'abc123', ...env }, overrides, role);

/** The ConfigError a bad environment raises (fails the test when none is raised). */
function problemsOf(env: Record<string, string>): string[] {
  try {
    load(env);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as ConfigError).problems;
  }
  throw new Error(`expected a ConfigError for ${JSON.stringify(env)}`);
}

/** The secrets every node of a cluster shares (REDIS_URL requires them). */
const SHARED_SECRETS = { PUBLIC_API_KEY: 'ppk_0123456789abcdef', OPERATOR_TOKEN: 'pop_0123456789abcdef012345' };

/** One invalid value per validated variable. */
const INVALID: Record<string, string> = {
  PORT: 'eighty',
  HOST: 'not a host!',
  PUBLIC_URL: 'ftp://example.org',
  DATABASE_URL: 'mysql://db.example/parlor',
  REDIS_URL: 'http://cache.example:6379',
  REDIS_PREFIX: 'has spaces',
  PUBLIC_API_KEY: 'short',
  OPERATOR_TOKEN: 'also-too-short',
  GUILD_API_URL: 'guilds.example.org',
  COOKIE_DOMAIN: 'https://example.org',
  TRUST_PROXY: 'sometimes',
  ALLOWED_ORIGINS: 'https://ok.example,not-an-origin',
  VM_MAX_PER_NODE: '-1',
  VM_ALLOW_PRIVATE_NETWORKS: 'perhaps',
  VM_IDLE_TIMEOUT_SECONDS: '5',
  DATABASE_STATEMENT_TIMEOUT_MS: '15s',
  VM_TOR_PROXY: 'http://127.0.0.1:9050',
  VM_PROXY_US: 'ftp://proxy.example:21',
  VM_PROXY_EU: 'http://user:secret@proxy.example:3128',
  VM_HOSTS: 'browsers.internal:8090',
  VM_HOST_TOKEN: 'too-short-for-a-host-token',
  VM_HOST_START_TIMEOUT_MS: '999',
  BROWSER_HOST_PORT: '99999',
  LOG_LEVEL: 'loud',
};

describe('loadConfig', () => {
  it('fills every key with its documented default', () => {
    const config = load();
    expect(config).toEqual({
      port: 8080,
      host: '127.0.0.1',
      dataDir: path.resolve('./data'),
      databaseUrl: null,
      databaseStatementTimeoutMs: 15_000,
      redisUrl: null,
      redisPrefix: 'parlor:',
      publicApiKey: null,
      operatorToken: null,
      publicUrl: 'http://127.0.0.1:8080',
      guildApiUrl: 'http://127.0.0.1:8080',
      cookieDomain: null,
      trustProxy: false,
      allowedOrigins: ['http://127.0.0.1:8080'],
      chromiumPath: '/usr/bin/chromium',
      vmMaxPerNode: 4,
      vmAllowPrivateNetworks: false,
      vmIdleTimeoutSeconds: 300,
      vmTorProxy: null,
      vmProxyUs: null,
      vmProxyEu: null,
      vmBrowserUser: 'nobody',
      vmSandbox: true,
      vmBrowserUids: null,
      vmHosts: [],
      vmHostToken: null,
      vmHostStartTimeoutMs: 30_000,
      browserHostPort: 8090,
      logLevel: 'info',
      sourceHash: 'abc123',
    } satisfies Config);
  });

  it('treats an empty variable as unset', () => {
    expect(load({ PORT: '', LOG_LEVEL: '', DATABASE_URL: '', TRUST_PROXY: '', ALLOWED_ORIGINS: '' })).toEqual(load());
  });

  it('reads every variable it knows', () => {
    const config = load({
      PORT: '9000',
      HOST: '0.0.0.0',
      DATA_DIR: '/var/lib/parlor',
      DATABASE_URL: 'postgres://parlor@db.internal:5432/parlor',
      DATABASE_STATEMENT_TIMEOUT_MS: '5000',
      REDIS_URL: 'rediss://cache.internal:6380',
      REDIS_PREFIX: 'parlor-prod:',
      PUBLIC_API_KEY: 'ppk_0123456789abcdef',
      OPERATOR_TOKEN: 'pop_0123456789abcdef012345',
      PUBLIC_URL: 'https://chat.example.org/',
      GUILD_API_URL: 'https://guilds.example.org/',
      COOKIE_DOMAIN: 'example.org',
      TRUST_PROXY: 'true',
      ALLOWED_ORIGINS: ' https://chat.example.org , https://app.example.org:8443 ',
      CHROMIUM_PATH: '/opt/chromium/chrome',
      VM_MAX_PER_NODE: '12',
      VM_ALLOW_PRIVATE_NETWORKS: '1',
      VM_IDLE_TIMEOUT_SECONDS: '600',
      VM_TOR_PROXY: 'socks5://tor:9050',
      VM_PROXY_US: 'http://us.proxy.internal:3128/',
      VM_PROXY_EU: 'socks5://eu.proxy.internal:1080',
      VM_BROWSER_USER: 'parlor-browser',
      VM_SANDBOX: 'off',
      VM_BROWSER_UIDS: '200000-200063',
      VM_HOSTS: ' https://browsers-1.internal:8090/ , http://10.0.0.7:8090',
      VM_HOST_TOKEN: 'vht_0123456789abcdef0123456789abcdef',
      VM_HOST_START_TIMEOUT_MS: '45000',
      BROWSER_HOST_PORT: '9090',
      LOG_LEVEL: 'debug',
    });
    expect(config).toEqual({
      port: 9000,
      host: '0.0.0.0',
      dataDir: '/var/lib/parlor',
      databaseUrl: 'postgres://parlor@db.internal:5432/parlor',
      databaseStatementTimeoutMs: 5000,
      redisUrl: 'rediss://cache.internal:6380',
      redisPrefix: 'parlor-prod:',
      publicApiKey: 'ppk_0123456789abcdef',
      operatorToken: 'pop_0123456789abcdef012345',
      publicUrl: 'https://chat.example.org',
      guildApiUrl: 'https://guilds.example.org',
      cookieDomain: 'example.org',
      trustProxy: 1,
      allowedOrigins: ['https://chat.example.org', 'https://app.example.org:8443'],
      chromiumPath: '/opt/chromium/chrome',
      vmMaxPerNode: 12,
      vmAllowPrivateNetworks: true,
      vmIdleTimeoutSeconds: 600,
      vmTorProxy: 'socks5://tor:9050',
      vmProxyUs: 'http://us.proxy.internal:3128',
      vmProxyEu: 'socks5://eu.proxy.internal:1080',
      vmBrowserUser: 'parlor-browser',
      vmSandbox: false,
      vmBrowserUids: { first: 200000, last: 200063 },
      vmHosts: ['https://browsers-1.internal:8090', 'http://10.0.0.7:8090'],
      vmHostToken: 'vht_0123456789abcdef0123456789abcdef',
      vmHostStartTimeoutMs: 45_000,
      browserHostPort: 9090,
      logLevel: 'debug',
      sourceHash: 'abc123',
    } satisfies Config);
  });

  it('lists every invalid variable at once, one problem naming each', () => {
    const problems = problemsOf(INVALID);
    expect(problems).toHaveLength(Object.keys(INVALID).length);
    for (const name of Object.keys(INVALID)) {
      expect(
        problems.filter((p) => p.startsWith(`${name} `)),
        `problems naming ${name}`,
      ).toHaveLength(1);
    }
  });

  it.each(Object.entries(INVALID))('refuses %s=%j alone with exactly one problem that names it', (name, value) => {
    const problems = problemsOf({ [name]: value });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(new RegExp(`^${name}\\b`));
  });

  /** The secrets clients send in a header, their minimum, and a prefix. */
  const HEADER_SECRETS = [
    ['PUBLIC_API_KEY', 16, 'ppk_'],
    ['OPERATOR_TOKEN', 24, 'pop_'],
  ] as const;
  const faults = (min: number, p: string) =>
    [
      ['a space inside', `${p}correct horse battery staple`, 'a space, a control or a non-ASCII character'],
      ['a trailing space', `${p}trailing_space_0123456789ab `, 'a space, a control or a non-ASCII character'],
      ['a leading tab', `\t${p}leading_tab_0123456789abcd`, 'a space, a control or a non-ASCII character'],
      ['a non-ASCII character', `${p}0123456789abcdef01234é`, 'a space, a control or a non-ASCII character'],
      ['257 characters', `${p}${'a'.repeat(253)}`, '257 characters'],
      [`${min - 1} characters`, `${p}${'a'.repeat(min - 5)}`, `${min - 1} characters`],
    ] as const;

  it.each(HEADER_SECRETS.flatMap(([name, min, p]) => faults(min, p).map((f) => [name, min, ...f] as const)))(
    'refuses a %s (%i characters at least) with %s (no client could send it), without repeating it',
    (name, min, _case, secret, fault) => {
      expect(problemsOf({ [name]: secret })).toEqual([
        `${name} must be ${min}-256 visible ASCII characters (0x21-0x7E, no spaces) (it has ${fault})`,
      ]);
    },
  );

  it.each(
    HEADER_SECRETS.flatMap(([name, min, p]) => [
      [name, `${min} characters`, `${p}${'a'.repeat(min - 4)}`],
      [name, '256 characters', `${p}${'a'.repeat(252)}`],
      [name, 'visible ASCII punctuation', `${p}!"#$%&'()*+,-./09:;<=>?@AZ[\\]^_\`az{|}~`],
    ]),
  )('accepts a %s of %s', (name, _case, secret) => {
    const config = load({ [name]: secret });
    expect(name === 'PUBLIC_API_KEY' ? config.publicApiKey : config.operatorToken).toBe(secret);
  });

  it('wants VM_HOST_TOKEN with VM_HOSTS, and takes a 32-character one', () => {
    expect(problemsOf({ VM_HOSTS: 'http://browsers.internal:8090' })).toEqual([
      expect.stringMatching(/^VM_HOST_TOKEN must be set when VM_HOSTS/),
    ]);
    expect(problemsOf({ VM_HOST_TOKEN: 'a'.repeat(31) })).toEqual([expect.stringMatching(/^VM_HOST_TOKEN/)]);
    expect(load({ VM_HOST_TOKEN: 'a'.repeat(32) }).vmHostToken).toBe('a'.repeat(32));
  });

  it.each([
    ['http://parlor:hunter2@browsers-1:8090', 'hunter2'],
    ['https://hunter2@browsers-1:8090', 'hunter2'],
    ['http://parlor:@browsers-1:8090', 'parlor'],
  ])(
    'refuses a user name or password in VM_HOSTS (%s), naming the entry by position, never echoing it',
    (entry, secret) => {
      const problems = problemsOf({
        VM_HOSTS: `http://browsers-0:8090, ${entry}`,
        VM_HOST_TOKEN: 'vht_0123456789abcdef0123456789abcdef',
      });
      expect(problems).toEqual([
        'VM_HOSTS entry 2 must not carry a user name or password: nodes authenticate with VM_HOST_TOKEN',
      ]);
      expect(problems[0]).not.toContain(secret);
    },
  );

  it.each(['ftp://parlor:hunter2@browsers-1:8090', 'browsers-1:8090', 'not a url hunter2'])(
    'refuses a VM_HOSTS entry that is no http(s) URL (%s) by position, never echoing it',
    (entry) => {
      const problems = problemsOf({ VM_HOSTS: entry, VM_HOST_TOKEN: 'vht_0123456789abcdef0123456789abcdef' });
      expect(problems).toEqual(['VM_HOSTS entry 1 is not an http(s) URL of a browser host']);
      expect(problems[0]).not.toContain('hunter2');
      expect(problems[0]).not.toContain('browsers-1');
    },
  );

  it.each([
    'http://browsers-1:8090/browser-host',
    'http://browsers-1:8090/rooms/',
    'http://browsers-1:8090/?token=hunter2',
    'http://browsers-1:8090/#hunter2',
  ])(
    'refuses a VM_HOSTS entry with a path, query or fragment (%s) by position, never echoing it: the Socket.IO client would read a path as a namespace the host does not serve',
    (entry) => {
      const problems = problemsOf({
        VM_HOSTS: `http://browsers-0:8090, ${entry}`,
        VM_HOST_TOKEN: 'vht_0123456789abcdef0123456789abcdef',
      });
      expect(problems).toEqual([
        'VM_HOSTS entry 2 must be only http(s)://host:port: no path, query or fragment (nodes connect to the path /browser-host themselves)',
      ]);
      expect(problems[0]).not.toContain('hunter2');
      expect(problems[0]).not.toContain('browsers-1');
    },
  );

  it('reads a VM_HOSTS entry as its origin (a trailing slash, an empty query or fragment dropped)', () => {
    const config = load({
      VM_HOSTS: 'http://browsers-1:8090/,HTTPS://Browsers-2.Internal:8443/?,http://10.0.0.7:8090/#',
      VM_HOST_TOKEN: 'vht_0123456789abcdef0123456789abcdef',
    });
    expect(config.vmHosts).toEqual([
      'http://browsers-1:8090',
      'https://browsers-2.internal:8443',
      'http://10.0.0.7:8090',
    ]);
  });

  it('puts every problem in the error message, so start-up prints one clear line', () => {
    try {
      load({ PORT: '70000', LOG_LEVEL: 'LOUD' });
      expect.unreachable('loadConfig accepted PORT=70000');
    } catch (e) {
      expect(e).toBeInstanceOf(ConfigError);
      expect((e as Error).message).toContain('PORT');
      expect((e as Error).message).toContain('LOG_LEVEL');
      expect((e as Error).message).not.toContain('\n');
    }
  });

  it.each([
    ['PORT', '0', 0],
    ['PORT', '65535', 65535],
    ['VM_MAX_PER_NODE', '0', 0],
    ['VM_MAX_PER_NODE', '1000', 1000],
    ['VM_HOST_START_TIMEOUT_MS', '1000', 1000],
    ['VM_HOST_START_TIMEOUT_MS', '300000', 300000],
  ])('accepts %s=%s at the edge of its range', (name, value, expected) => {
    const config = load({ [name]: value });
    const read = { PORT: config.port, VM_MAX_PER_NODE: config.vmMaxPerNode };
    expect(read[name as keyof typeof read] ?? config.vmHostStartTimeoutMs).toBe(expected);
  });

  it.each([
    ['PORT', '65536'],
    ['PORT', '-1'],
    ['PORT', '80.5'],
    ['PORT', '8080abc'],
    ['VM_MAX_PER_NODE', '1001'],
    ['VM_MAX_PER_NODE', '2.5'],
    ['VM_HOST_START_TIMEOUT_MS', '999'],
    ['VM_HOST_START_TIMEOUT_MS', '300001'],
  ])('refuses %s=%s just outside its range or not an integer', (name, value) => {
    expect(problemsOf({ [name]: value })).toEqual([expect.stringMatching(new RegExp(`^${name} must be an integer`))]);
  });

  /** Every whole-number variable, with a value inside its range. */
  const INTEGER_VARIABLES = [
    ['PORT', '8080'],
    ['VM_MAX_PER_NODE', '100'],
    ['DATABASE_STATEMENT_TIMEOUT_MS', '15000'],
    ['VM_IDLE_TIMEOUT_SECONDS', '300'],
    ['BROWSER_HOST_PORT', '8090'],
    ['VM_HOST_START_TIMEOUT_MS', '30000'],
  ] as const;

  it.each(
    INTEGER_VARIABLES.flatMap(([name, value]) =>
      [
        `0x${Number(value).toString(16)}`, // hex: PORT=0x1F90 would listen on 8080
        `0o${Number(value).toString(8)}`,
        `0b${Number(value).toString(2)}`,
        `${Number(value) / 100}e2`, // an exponent: VM_MAX_PER_NODE=1e2 would be 100 browsers
        `${value}.0`,
        ` ${value} `,
        `${value}\n`,
        `+${value}`,
        `${value.slice(0, 1)}_${value.slice(1)}`,
        'Infinity',
      ].map((bad) => [name, bad] as const),
    ),
  )('refuses %s=%j: whole numbers are decimal digits only, with one line naming it', (name, value) => {
    expect(problemsOf({ [name]: value })).toEqual([
      expect.stringMatching(
        new RegExp(`^${name} must be an integer from \\d+ to \\d+, in decimal digits only \\(got `),
      ),
    ]);
  });

  it.each(INTEGER_VARIABLES)('still reads %s=%s, and leading zeros as decimal', (name, value) => {
    const key = (
      {
        PORT: 'port',
        VM_MAX_PER_NODE: 'vmMaxPerNode',
        DATABASE_STATEMENT_TIMEOUT_MS: 'databaseStatementTimeoutMs',
        VM_IDLE_TIMEOUT_SECONDS: 'vmIdleTimeoutSeconds',
        BROWSER_HOST_PORT: 'browserHostPort',
        VM_HOST_START_TIMEOUT_MS: 'vmHostStartTimeoutMs',
      } as const
    )[name];
    expect(load({ [name]: value })[key]).toBe(Number(value));
    expect(load({ [name]: `00${value}` })[key]).toBe(Number(value));
  });

  it('shows a refused whole number on the same line (a newline in it is escaped)', () => {
    expect(problemsOf({ PORT: '80\n80' })).toEqual([
      'PORT must be an integer from 0 to 65535, in decimal digits only (got "80\\n80")',
    ]);
  });

  it.each(['1', 'true', 'TRUE', 'yes', 'on', 'On', ' 1 '])('reads TRUST_PROXY=%s as exactly one proxy hop', (v) => {
    expect(load({ TRUST_PROXY: v }).trustProxy).toBe(1);
  });

  it.each(['0', 'false', 'no', 'OFF'])('reads TRUST_PROXY=%s as off', (v) => {
    expect(load({ TRUST_PROXY: v }).trustProxy).toBe(false);
  });

  it.each([
    ['2', 2],
    ['10', 10],
  ])('reads TRUST_PROXY=%s as that many proxy hops', (v, hops) => {
    expect(load({ TRUST_PROXY: v }).trustProxy).toBe(hops);
  });

  it('refuses more than 10 proxy hops', () => {
    expect(problemsOf({ TRUST_PROXY: '11' })).toEqual(['TRUST_PROXY must count 1 to 10 proxies (got "11")']);
  });

  it.each([
    ['127.0.0.1', ['127.0.0.1']],
    [' 10.0.0.0/8 , 192.168.1.7 ', ['10.0.0.0/8', '192.168.1.7']],
    ['loopback, uniquelocal,linklocal', ['loopback', 'uniquelocal', 'linklocal']],
    ['::1, FD00::/8, 2001:db8::1/128', ['::1', 'fd00::/8', '2001:db8::1/128']],
  ])('reads TRUST_PROXY=%s as a list of proxies, which Fastify accepts', async (v, list) => {
    const trustProxy = load({ TRUST_PROXY: v }).trustProxy;
    expect(trustProxy).toEqual(list);
    let app: ReturnType<typeof Fastify> | undefined;
    expect(() => {
      app = Fastify({ trustProxy: trustProxyOption(trustProxy) });
    }).not.toThrow();
    await expect(app?.ready()).resolves.toBe(app);
    await app?.close();
  });

  it.each([
    '10.0.0.0/33',
    '::1/129',
    '10.0.0.1/8/1',
    '10.0.0.0/255.0.0.0',
    '10.0.0.1,',
    'proxy.internal',
    '10.0.0.1 192.168.0.1',
    '-1',
  ])('refuses TRUST_PROXY=%s', (v) => {
    expect(problemsOf({ TRUST_PROXY: v })).toEqual([
      expect.stringMatching(/^TRUST_PROXY must be a hop count \(1 = one proxy in front\) or a comma-separated list/),
    ]);
  });

  it.each(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])('accepts LOG_LEVEL=%s', (level) => {
    expect(load({ LOG_LEVEL: level }).logLevel).toBe(level);
  });

  it('accepts both postgres: and postgresql: database URLs, and redis: and rediss: Redis URLs', () => {
    expect(load({ DATABASE_URL: 'postgresql://db/p' }).databaseUrl).toBe('postgresql://db/p');
    expect(load({ DATABASE_URL: 'postgres://db/p' }).databaseUrl).toBe('postgres://db/p');
    expect(load({ REDIS_URL: 'redis://r:6379', ...SHARED_SECRETS }).redisUrl).toBe('redis://r:6379');
    expect(load({ REDIS_URL: 'rediss://r:6380', ...SHARED_SECRETS }).redisUrl).toBe('rediss://r:6380');
  });

  it('refuses REDIS_URL without PUBLIC_API_KEY and OPERATOR_TOKEN, one line naming each', () => {
    expect(problemsOf({ REDIS_URL: 'redis://r:6379' })).toEqual([
      expect.stringMatching(/^PUBLIC_API_KEY must be set when REDIS_URL is set/),
      expect.stringMatching(/^OPERATOR_TOKEN must be set when REDIS_URL is set/),
    ]);
    expect(problemsOf({ REDIS_URL: 'redis://r:6379', OPERATOR_TOKEN: SHARED_SECRETS.OPERATOR_TOKEN })).toEqual([
      expect.stringMatching(/^PUBLIC_API_KEY must be set when REDIS_URL is set/),
    ]);
    // Given as overrides (tests and benches start apps that way), they count too.
    expect(
      load(
        {},
        { redisUrl: 'redis://r:6379', publicApiKey: SHARED_SECRETS.PUBLIC_API_KEY, operatorToken: 'x'.repeat(24) },
      ).redisUrl,
    ).toBe('redis://r:6379');
    expect(() => load({}, { redisUrl: 'redis://r:6379' })).toThrow(/PUBLIC_API_KEY must be set/);
    // Embedded (no Redis) still generates them, and so does a single node on PostgreSQL.
    expect(load({ DATABASE_URL: 'postgres://db/p' }).publicApiKey).toBeNull();
  });

  it('refuses PUBLIC_API_KEY equal to OPERATOR_TOKEN, one line naming both and neither value', () => {
    const shared = 'shared_secret_0123456789abcdef';
    const problems = problemsOf({ PUBLIC_API_KEY: shared, OPERATOR_TOKEN: shared });
    expect(problems).toEqual([
      'PUBLIC_API_KEY and OPERATOR_TOKEN must differ: the public key is given to every client, and the operator token must stay secret',
    ]);
    expect(problems.join('\n')).not.toContain(shared);
    // Given as overrides (tests and benches start apps that way), too.
    expect(() => load({}, { publicApiKey: shared, operatorToken: shared })).toThrow(/must differ/);
    expect(load({ PUBLIC_API_KEY: shared, OPERATOR_TOKEN: `${shared}x` }).publicApiKey).toBe(shared);
  });

  it.each(['https://admin:hunter2@app.example', 'admin:hunter2@app.example', 'https://hunter2@app.example'])(
    'refuses ALLOWED_ORIGINS entry %j by its place, never repeating what may be a password',
    (value) => {
      const problems = problemsOf({ ALLOWED_ORIGINS: `https://ok.example,${value}` });
      expect(problems).toEqual([
        'ALLOWED_ORIGINS entry 2 is not an origin like https://example.org: no user name or password',
      ]);
      expect(problems.join(' ')).not.toContain('hunter2');
    },
  );

  it.each(['https://chat.example.org/', 'https://chat.example.org/path', '*', 'chat.example.org'])(
    'refuses ALLOWED_ORIGINS entry %j: only a bare origin is allowed',
    (value) => {
      expect(problemsOf({ ALLOWED_ORIGINS: value })).toEqual([expect.stringContaining(`"${value}"`)]);
    },
  );

  it.each([
    'example.org',
    '.example.org',
    'chat.example.org',
    'localhost',
    'Sub-1.EXAMPLE.org',
    `${'a'.repeat(63)}.org`,
  ])('accepts COOKIE_DOMAIN=%s', (value) => {
    expect(load({ COOKIE_DOMAIN: value }).cookieDomain).toBe(value);
  });

  it.each([
    'https://example.org',
    'example.org:8443',
    'example.org/',
    'example.org.',
    '..example.org',
    '-example.org',
    'example-.org',
    'exa mple.org',
    'exämple.org',
    'example.org;',
    `${'a'.repeat(64)}.org`,
  ])('refuses COOKIE_DOMAIN=%j, which the cookie library would refuse at every login, with one line', (value) => {
    expect(problemsOf({ COOKIE_DOMAIN: value })).toEqual([
      `COOKIE_DOMAIN must be a domain name like example.org or .example.org: no scheme, port or path (got "${value}")`,
    ]);
  });

  it('accepts exactly the COOKIE_DOMAIN values @fastify/cookie can write into Set-Cookie', async () => {
    const app = Fastify();
    await app.register(fastifyCookie);
    await app.ready();
    const accepted = (f: () => unknown) => {
      try {
        f();
        return true;
      } catch {
        return false;
      }
    };
    const values = [
      'example.org',
      '.example.org',
      'a-b.example',
      'https://example.org',
      'example.org:8443',
      'a_b.org',
      'x.',
    ];
    const verdicts = values.map((value) => ({
      value,
      written: accepted(() => app.serializeCookie('psession', 'v', { domain: value })),
      loaded: accepted(() => load({ COOKIE_DOMAIN: value })),
    }));
    await app.close();
    expect(verdicts.filter((v) => v.written !== v.loaded)).toEqual([]);
    expect(verdicts.filter((v) => v.loaded).map((v) => v.value)).toEqual([
      'example.org',
      '.example.org',
      'a-b.example',
    ]);
  });

  it('ignores the empty entries of ALLOWED_ORIGINS (a trailing comma)', () => {
    expect(load({ ALLOWED_ORIGINS: 'https://a.example,, https://b.example,' }).allowedOrigins).toEqual([
      'https://a.example',
      'https://b.example',
    ]);
  });

  describe('room browser account (VM_BROWSER_USER, VM_SANDBOX)', () => {
    it.each(['nobody', 'parlor-browser', '_chromium', '65534', '990:991'])('accepts VM_BROWSER_USER=%s', (user) => {
      expect(load({ VM_BROWSER_USER: user }).vmBrowserUser).toBe(user);
    });
    it.each(['a b', 'x:y', '1:2:3', '-rf', '../etc'])('refuses VM_BROWSER_USER=%s with one line naming it', (user) => {
      expect(() => load({ VM_BROWSER_USER: user })).toThrow(/VM_BROWSER_USER must be a user name or uid\[:gid\]/);
    });
    it('reads VM_BROWSER_UIDS as a range at least VM_MAX_PER_NODE wide', () => {
      expect(load({ VM_BROWSER_UIDS: '1000-1003' }).vmBrowserUids).toEqual({ first: 1000, last: 1003 });
      expect(load({ VM_BROWSER_UIDS: '300000-300000', VM_MAX_PER_NODE: '1' }).vmBrowserUids).toEqual({
        first: 300000,
        last: 300000,
      });
    });
    it.each(['999-1010', '2000-1999', '1000', 'a-b', '1000-3000000000', ' 1000-1010'])(
      'refuses VM_BROWSER_UIDS=%s',
      (range) => {
        expect(() => load({ VM_BROWSER_UIDS: range })).toThrow(/VM_BROWSER_UIDS must be a uid range/);
      },
    );
    it('refuses a VM_BROWSER_UIDS range narrower than VM_MAX_PER_NODE', () => {
      expect(() => load({ VM_BROWSER_UIDS: '1000-1002' })).toThrow(/at least VM_MAX_PER_NODE \(4\) uids \(got 3\)/);
    });
    it('keeps the sandbox on unless VM_SANDBOX turns it off', () => {
      expect([load({}).vmSandbox, load({ VM_SANDBOX: '1' }).vmSandbox, load({ VM_SANDBOX: '0' }).vmSandbox]).toEqual([
        true,
        true,
        false,
      ]);
    });
  });

  describe('room browser proxies (VM_TOR_PROXY, VM_PROXY_US, VM_PROXY_EU)', () => {
    it.each([
      ['socks5://127.0.0.1:9050', 'socks5://127.0.0.1:9050'],
      ['socks5://tor:9050/', 'socks5://tor:9050'],
      ['SOCKS5://tor.internal:9150', 'socks5://tor.internal:9150'],
      ['socks5://[::1]:9050', 'socks5://[::1]:9050'],
    ])('accepts VM_TOR_PROXY=%s as %s', (value, expected) => {
      expect(load({ VM_TOR_PROXY: value }).vmTorProxy).toBe(expected);
    });

    it.each([
      ['http://proxy.internal:3128', 'http://proxy.internal:3128'],
      ['http://proxy.internal:80/', 'http://proxy.internal'],
      ['https://us.proxy.example:8443', 'https://us.proxy.example:8443'],
      ['https://us.proxy.example', 'https://us.proxy.example'],
      ['socks5://10.0.0.7:1080', 'socks5://10.0.0.7:1080'],
      ['http://[2001:db8::7]:3128', 'http://[2001:db8::7]:3128'],
    ])('accepts VM_PROXY_US and VM_PROXY_EU=%s as %s', (value, expected) => {
      const config = load({ VM_PROXY_US: value, VM_PROXY_EU: value });
      expect([config.vmProxyUs, config.vmProxyEu]).toEqual([expected, expected]);
    });

    it.each([
      [
        'VM_TOR_PROXY',
        'http://127.0.0.1:9050',
        /^VM_TOR_PROXY must be a URL like socks5:\/\/host:port \(scheme "http:" refused\)$/,
      ],
      ['VM_TOR_PROXY', 'socks5h://127.0.0.1:9050', /^VM_TOR_PROXY must be a URL like socks5:\/\/host:port/],
      ['VM_TOR_PROXY', 'socks4://127.0.0.1:9050', /^VM_TOR_PROXY must be a URL like socks5:\/\/host:port/],
      ['VM_TOR_PROXY', '127.0.0.1:9050', /^VM_TOR_PROXY must be a URL like socks5:\/\/host:port/],
      ['VM_TOR_PROXY', 'socks5://tor', /^VM_TOR_PROXY must give the SOCKS port/],
      ['VM_TOR_PROXY', 'socks5://tor:9050/x', /^VM_TOR_PROXY must be only socks5:\/\/host:port: no path/],
      ['VM_TOR_PROXY', 'socks5://tor:9050?x=1', /^VM_TOR_PROXY must be only/],
      ['VM_TOR_PROXY', 'socks5://tor;http=evil:9050', /^VM_TOR_PROXY must name the proxy's host/],
      [
        'VM_PROXY_US',
        'ftp://proxy.example:21',
        /^VM_PROXY_US must be a URL like http:\/\/host:port, https:\/\/host:port, socks5:\/\/host:port/,
      ],
      ['VM_PROXY_US', 'socks4://proxy.example:1080', /^VM_PROXY_US must be a URL like/],
      ['VM_PROXY_US', 'not a url', /^VM_PROXY_US must be a URL like/],
      ['VM_PROXY_US', 'http://proxy.example:3128/squid', /^VM_PROXY_US must be only .*no path/],
      ['VM_PROXY_EU', 'http://proxy.example:3128#frag', /^VM_PROXY_EU must be only/],
      ['VM_PROXY_EU', 'socks5://proxy.example', /^VM_PROXY_EU must give the SOCKS port/],
    ])('refuses %s=%s with one line naming it', (name, value, message) => {
      expect(problemsOf({ [name]: value })).toEqual([expect.stringMatching(message)]);
    });

    it.each([
      ['VM_TOR_PROXY', 'socks5://alice:hunter2@tor:9050'],
      ['VM_PROXY_US', 'http://alice:hunter2@proxy.example:3128'],
      ['VM_PROXY_EU', 'https://hunter2@proxy.example'],
      ['VM_PROXY_EU', 'socks5://alice:@proxy.example:1080'],
    ])('refuses credentials in %s (Chromium cannot send them) without echoing them', (name, value) => {
      const problems = problemsOf({ [name]: value });
      expect(problems).toEqual([expect.stringMatching(new RegExp(`^${name} must not carry a user name or password`))]);
      expect(problems[0]).not.toContain('hunter2');
      expect(problems[0]).not.toContain('alice');
    });
  });

  describe('base URLs (PUBLIC_URL, GUILD_API_URL): links are built by appending a path to them', () => {
    it.each([
      ['PUBLIC_URL', 'https://admin:hunter2@parlor.example.org', 'hunter2'],
      ['PUBLIC_URL', 'https://admin@parlor.example.org/', 'admin'],
      ['PUBLIC_URL', 'https://:hunter2@parlor.example.org', 'hunter2'],
      ['GUILD_API_URL', 'https://bot:hunter2@guilds.example.org', 'hunter2'],
    ])(
      'refuses a user name or password in %s=%s (every avatar_url would carry it) without echoing it',
      (name, value, secret) => {
        const problems = problemsOf({ [name]: value });
        expect(problems).toEqual([
          `${name} must not carry a user name or password: links to this service are built from it`,
        ]);
        expect(problems[0]).not.toContain(secret);
        expect(problems[0]).not.toContain(value);
      },
    );

    it.each([
      ['PUBLIC_URL', 'https://parlor.example.org/?utm=1'],
      ['PUBLIC_URL', 'https://parlor.example.org/parlor?token=hunter2'],
      ['PUBLIC_URL', 'https://parlor.example.org/#top'],
      ['GUILD_API_URL', 'https://guilds.example.org/?x=1'],
      ['GUILD_API_URL', 'https://guilds.example.org#x'],
    ])('refuses a query or fragment in %s=%s, without echoing it', (name, value) => {
      const problems = problemsOf({ [name]: value });
      expect(problems).toEqual([
        `${name} must be a base URL like https://example.org or https://example.org/path: no query or fragment`,
      ]);
      expect(problems[0]).not.toContain(value);
    });

    it.each([
      ['https://parlor.example.org', 'https://parlor.example.org'],
      ['https://parlor.example.org/', 'https://parlor.example.org'],
      ['https://parlor.example.org/parlor/', 'https://parlor.example.org/parlor'],
      ['HTTPS://Parlor.Example.ORG:443/Parlor', 'https://parlor.example.org/Parlor'],
      ['http://[::1]:8080/', 'http://[::1]:8080'],
      ['https://parlor.example.org/?', 'https://parlor.example.org'],
      ['https://parlor.example.org/#', 'https://parlor.example.org'],
    ])('reads PUBLIC_URL and GUILD_API_URL=%s as %s', (value, expected) => {
      const config = load({ PUBLIC_URL: value, GUILD_API_URL: value });
      expect([config.publicUrl, config.guildApiUrl]).toEqual([expected, expected]);
    });
  });

  describe('HOST: an IP address or a host name', () => {
    it.each(['127.0.0.1', '::1', '10.0.0.7', 'localhost', 'parlor-1.internal', 'A1.example.ORG', '1a'])(
      'accepts HOST=%s',
      (host) => {
        expect(load({ HOST: host }).host).toBe(host);
      },
    );

    it.each([
      '-bad-',
      'bad-.example',
      '-bad.example',
      'a..b',
      '.example.org',
      'example.org.',
      'under_score.example',
      `${'a'.repeat(64)}.example`,
      `${'a.'.repeat(127)}ab`, // 255 characters
      '256.0.0.1',
      '10.0.0',
      '[::1]',
      'example.org:8080',
      'http://example.org',
      'exämple.org',
    ])('refuses HOST=%j with one line naming it, before listen would fail on the name', (host) => {
      expect(problemsOf({ HOST: host })).toEqual([
        `HOST must be an IP address or a host name (dot-separated labels of letters, digits and inner hyphens, at most 63 characters each) (got ${JSON.stringify(host)})`,
      ]);
    });

    it('refuses an IPv6 HOST with a zone id when PUBLIC_URL is unset (it makes no URL, so no allowed origin), naming HOST and PUBLIC_URL', () => {
      for (const host of ['fe80::1%lo', '::1%eth0'])
        expect(problemsOf({ HOST: host })).toEqual([
          `HOST with a zone id needs PUBLIC_URL: the default http://HOST:PORT is no URL (got ${JSON.stringify(host)})`,
        ]);
      const config = load({ HOST: 'fe80::1%lo', PUBLIC_URL: 'http://[fe80::1]:8080' });
      expect([config.host, config.publicUrl, config.allowedOrigins]).toEqual([
        'fe80::1%lo',
        'http://[fe80::1]:8080',
        ['http://[fe80::1]:8080'],
      ]);
    });

    it.each(['0.0.0.0', '::', '::0', '0:0:0:0:0:0:0:0', '::ffff:0.0.0.0'])(
      'refuses HOST=%s (every interface) when PUBLIC_URL is unset, naming HOST and PUBLIC_URL: the default http://HOST:PORT is no origin a browser sends',
      (host) => {
        expect(problemsOf({ HOST: host })).toEqual([
          `HOST on every interface needs PUBLIC_URL, the URL users reach the service at: no browser sends the default http://HOST:PORT as its origin, so their cookie-authenticated writes and sockets would be refused (got ${JSON.stringify(host)})`,
        ]);
        const config = load({ HOST: host, PUBLIC_URL: 'https://chat.example.org' });
        expect([config.host, config.publicUrl, config.allowedOrigins]).toEqual([
          host,
          'https://chat.example.org',
          ['https://chat.example.org'],
        ]);
      },
    );

    it('lets a browser host (which has no public URL) listen on every interface without PUBLIC_URL', () => {
      for (const host of ['0.0.0.0', '::']) expect(load({ HOST: host }, {}, 'browser-host').host).toBe(host);
    });

    it('accepts a 253-character host name', () => {
      const host = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`;
      expect(host).toHaveLength(253);
      expect(load({ HOST: host }).host).toBe(host);
    });
  });

  describe('the default allowed origin', () => {
    it('is the origin of PUBLIC_URL, without its path or trailing slash', () => {
      const config = load({ PUBLIC_URL: 'https://example.org/parlor/' });
      expect(config.publicUrl).toBe('https://example.org/parlor');
      expect(config.allowedOrigins).toEqual(['https://example.org']);
      expect(config.guildApiUrl).toBe('https://example.org/parlor');
    });

    it('keeps a non-default port', () => {
      expect(load({ PUBLIC_URL: 'http://chat.local:3000' }).allowedOrigins).toEqual(['http://chat.local:3000']);
    });

    it('follows HOST and PORT when PUBLIC_URL is unset', () => {
      const config = load({ HOST: 'localhost', PORT: '9090' });
      expect(config.publicUrl).toBe('http://localhost:9090');
      expect(config.allowedOrigins).toEqual(['http://localhost:9090']);
    });

    it('brackets an IPv6 HOST in the public URL and its origin', () => {
      const config = load({ HOST: '::1', PORT: '8443' });
      expect(config.host).toBe('::1');
      expect(config.publicUrl).toBe('http://[::1]:8443');
      expect(config.allowedOrigins).toEqual(['http://[::1]:8443']);
      expect(load({ HOST: '2001:db8::7' }).allowedOrigins).toEqual(['http://[2001:db8::7]:8080']);
    });

    it('is replaced, not extended, by ALLOWED_ORIGINS', () => {
      const config = load({ PUBLIC_URL: 'https://example.org', ALLOWED_ORIGINS: 'https://other.example' });
      expect(config.allowedOrigins).toEqual(['https://other.example']);
    });
  });

  it('returns a frozen object that cannot be changed afterwards', () => {
    const config = load();
    expect(Object.isFrozen(config)).toBe(true);
    expect(() => {
      (config as Config).port = 1;
    }).toThrow(TypeError);
    expect(config.port).toBe(8080);
  });

  it('lets overrides replace values (tests start on port 0 with fixed secrets) and still freezes', () => {
    const config = load({ PORT: '9000' }, { port: 0, publicApiKey: 'ppk_fixed', logLevel: 'silent' });
    expect(config.port).toBe(0);
    expect(config.publicApiKey).toBe('ppk_fixed');
    expect(config.logLevel).toBe('silent');
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('still refuses an invalid environment when overrides are given', () => {
    expect(() => loadConfig({ SOURCE_HASH: 'x', PORT: 'nope' }, { port: 0 })).toThrow(ConfigError);
  });

  it('reads nothing from process.env when given an environment', () => {
    const saved = process.env.PORT;
    process.env.PORT = 'not-a-port';
    try {
      expect(load().port).toBe(8080);
    } finally {
      if (saved === undefined) delete process.env.PORT;
      else process.env.PORT = saved;
    }
  });
});
