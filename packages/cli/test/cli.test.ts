import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from '../../server/test/support/app.js';
import { Client } from '../../server/test/support/client.js';
import { login } from '../../server/test/support/flows.js';

const CLI = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const PACKAGE_VERSION: unknown = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version;
/** Nothing listens on port 1: a request that is actually sent fails with exit 2, so exit 1 proves none was. */
const NOWHERE = 'http://127.0.0.1:1';
const WRONG_TOKEN = 'pop_wrong_token_0123456789abcdefghij';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** A directory with no data/ inside, so no stray ./data/operator-token is picked up. */
let emptyCwd: string;
const scratchDirs: string[] = [];
function scratchDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'parlor-cli-'));
  scratchDirs.push(dir);
  return dir;
}

/**
 * Runs the built CLI as an operator would. The environment starts without PARLOR_URL,
 * OPERATOR_TOKEN and DATA_DIR, so each test states exactly what the CLI gets.
 */
function parlor(args: string[], env: Record<string, string> = {}, cwd = emptyCwd): Promise<Run> {
  const { PARLOR_URL: _u, OPERATOR_TOKEN: _t, DATA_DIR: _d, ...base } = process.env;
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...base, ...env }, cwd, timeout: 20_000 },
      (error, stdout, stderr) => {
        if (error && typeof error.code !== 'number') reject(error);
        else resolve({ code: error ? Number(error.code) : 0, stdout, stderr });
      },
    );
  });
}

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build first (npx tsc -b packages/cli)`);
  emptyCwd = scratchDir();
});
afterAll(() => {
  for (const dir of scratchDirs) rmSync(dir, { recursive: true, force: true });
});

describe('parlor --help and --version', () => {
  it('prints the usage with every command group and the environment, exit 0, without a server or token', async () => {
    const run = await parlor(['--help'], { PARLOR_URL: NOWHERE });
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^Usage: parlor /);
    expect(run.stdout).toMatch(/^\s+bots\s/m);
    expect(run.stdout).toMatch(/^\s+users\s/m);
    expect(run.stdout).toContain('PARLOR_URL');
    expect(run.stdout).toContain('OPERATOR_TOKEN');
    expect(run.stderr).toBe('');
  });

  it('prints the package version, exit 0', async () => {
    const run = await parlor(['--version']);
    expect(run).toEqual({ code: 0, stdout: `${PACKAGE_VERSION}\n`, stderr: '' });
  });

  it('says in chats update --help that an official or direct chat keeps its type', async () => {
    const run = await parlor(['chats', 'update', '--help']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('an official or direct chat keeps its type');
  });

  it('refuses an unknown command with exit 1', async () => {
    const run = await parlor(['frobnicate'], { PARLOR_URL: NOWHERE });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain("unknown command 'frobnicate'");
  });
});

describe.concurrent('parlor argument checks (before anything is sent)', () => {
  const cases: [string, string[], RegExp][] = [
    ['a missing --name', ['bots', 'create'], /--name/],
    ['an unknown bot type', ['bots', 'create', '--name', 'B', '--type', 'premium'], /official, verified, community/],
    ['a zero rate limit', ['bots', 'create', '--name', 'B', '--rate-limit-per-hour', '0'], /--rate-limit-per-hour/],
    ['a fractional rate limit', ['bots', 'create', '--name', 'B', '--rate-limit-per-hour', '1.5'], /whole number/],
    ['a non-numeric owner', ['bots', 'create', '--name', 'B', '--owner-user-id', 'me'], /--owner-user-id/],
    ['user id 0', ['users', 'set-permission', '0', 'admin'], /user_id/],
    ['a non-numeric user id', ['users', 'set-permission', '12abc', 'admin'], /user_id/],
    ['an unknown level', ['users', 'set-permission', '5', 'superuser'], /user, moderator, admin, owner/],
    ['a numeric level', ['users', 'set-permission', '5', '2'], /user, moderator, admin, owner/],
    ['a missing level', ['users', 'set-permission', '5'], /level/],
  ];
  it.each(cases)('exits 1 on %s with a clear message', async (_name, args, message) => {
    const run = await parlor(args, { PARLOR_URL: NOWHERE, OPERATOR_TOKEN: WRONG_TOKEN });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^error: /);
    expect(run.stderr).toMatch(message);
    expect(run.stdout).toBe('');
  });
});

describeApp('parlor against a running server', () => {
  let app: TestApp;
  let operatorEnv: Record<string, string>;

  beforeAll(async () => {
    app = await startApp();
    operatorEnv = { PARLOR_URL: app.url, OPERATOR_TOKEN: app.operatorToken };
  });
  afterAll(async () => app?.close());

  const permissionOf = async (client: Client): Promise<unknown> => {
    const me = await client.get('/v1/users/me');
    expect(me.status).toBe(200);
    return me.body.user.permission_level;
  };

  describe('bots create', () => {
    it('prints {id, api_key} as 2-space JSON and the key works on GET /v1/bot/me', async () => {
      const run = await parlor(
        ['bots', 'create', '--name', 'CLI bot', '--type', 'verified', '--rate-limit-per-hour', '5000'],
        operatorEnv,
      );
      expect(run.code).toBe(0);
      expect(run.stderr).toBe('');
      const created = JSON.parse(run.stdout);
      expect(created).toEqual({ id: expect.any(Number), api_key: expect.stringMatching(/^pbk_/) });
      expect(run.stdout).toBe(`${JSON.stringify(created, null, 2)}\n`);

      const me = await new Client(app.url).get('/v1/bot/me', { apiKey: created.api_key });
      expect(me.status).toBe(200);
      expect(me.body).toMatchObject({ id: created.id, name: 'CLI bot', type: 2, rate_limit_per_hour: 5000 });
    });

    it('passes the owner on, and the server defaults apply when options are left out', async () => {
      const { user } = await login(app);
      const run = await parlor(['bots', 'create', '--name', 'Owned', '--owner-user-id', String(user.id)], operatorEnv);
      expect(run.code).toBe(0);
      const me = await new Client(app.url).get('/v1/bot/me', { apiKey: JSON.parse(run.stdout).api_key });
      expect(me.body).toMatchObject({ name: 'Owned', type: 3, owner_user_id: user.id, rate_limit_per_hour: 10_000 });
    });

    it('prints the server’s 400 ERR_VALIDATION body on stderr and exits 1', async () => {
      const run = await parlor(['bots', 'create', '--name', 'x'.repeat(65)], operatorEnv);
      expect(run.code).toBe(1);
      expect(run.stdout).toBe('');
      expect(JSON.parse(run.stderr)).toMatchObject({ code: 'ERR_VALIDATION', errors: [{ path: 'body/name' }] });
    });

    it('exits 1 with ERR_UNAUTHENTICATED on stderr for a wrong token, and prints no token', async () => {
      const run = await parlor(['bots', 'create', '--name', 'Nope'], {
        PARLOR_URL: app.url,
        OPERATOR_TOKEN: WRONG_TOKEN,
      });
      expect(run.code).toBe(1);
      expect(run.stdout).toBe('');
      expect(JSON.parse(run.stderr)).toEqual({ code: 'ERR_UNAUTHENTICATED', message: expect.any(String) });
      expect(run.stderr).not.toContain(WRONG_TOKEN);
    });
  });

  describe('users set-permission', () => {
    it('sets each level by name; GET /v1/users/me shows it', async () => {
      const { client, user } = await login(app);
      expect(await permissionOf(client)).toBe(0);
      for (const [name, level] of [
        ['moderator', 1],
        ['admin', 2],
        ['owner', 3],
        ['user', 0],
      ] as const) {
        const run = await parlor(['users', 'set-permission', String(user.id), name], operatorEnv);
        expect(run.code).toBe(0);
        expect(run.stderr).toBe('');
        expect(JSON.parse(run.stdout)).toMatchObject({ id: user.id, permission_level: level });
        expect(await permissionOf(client)).toBe(level);
      }
    });

    it('changes nothing on a bad level name', async () => {
      const { client, user } = await login(app);
      const run = await parlor(['users', 'set-permission', String(user.id), 'root'], operatorEnv);
      expect(run.code).toBe(1);
      expect(run.stderr).toContain("'root'");
      expect(await permissionOf(client)).toBe(0);
    });

    it('exits 1 with ERR_USER_NOT_FOUND for an unknown user', async () => {
      const run = await parlor(['users', 'set-permission', '987654321', 'admin'], operatorEnv);
      expect(run.code).toBe(1);
      expect(JSON.parse(run.stderr)).toMatchObject({ code: 'ERR_USER_NOT_FOUND' });
    });
  });

  describe('finding the server and the token', () => {
    it('exits 2 with one line on stderr when the server is unreachable', async () => {
      const run = await parlor(['bots', 'create', '--name', 'B'], { PARLOR_URL: NOWHERE, OPERATOR_TOKEN: WRONG_TOKEN });
      expect(run.code).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(run.stderr).toContain(NOWHERE);
      expect(run.stderr).toContain('ECONNREFUSED');
      expect(run.stderr).not.toContain(WRONG_TOKEN);
    });

    it('reads DATA_DIR/operator-token when OPERATOR_TOKEN is unset', async () => {
      const dataDir = scratchDir();
      writeFileSync(path.join(dataDir, 'operator-token'), `${app.operatorToken}\n`, { mode: 0o600 });
      const run = await parlor(['bots', 'create', '--name', 'From file'], { PARLOR_URL: app.url, DATA_DIR: dataDir });
      expect(run.code).toBe(0);
      expect(JSON.parse(run.stdout).api_key).toMatch(/^pbk_/);
    });

    it('defaults DATA_DIR to ./data of the working directory', async () => {
      const cwd = scratchDir();
      mkdirSync(path.join(cwd, 'data'));
      writeFileSync(path.join(cwd, 'data', 'operator-token'), `${app.operatorToken}\n`, { mode: 0o600 });
      const run = await parlor(['bots', 'create', '--name', 'Default dir'], { PARLOR_URL: app.url }, cwd);
      expect(run.code).toBe(0);
      expect(JSON.parse(run.stdout).id).toEqual(expect.any(Number));
    });

    it('prefers OPERATOR_TOKEN over the file', async () => {
      const dataDir = scratchDir();
      writeFileSync(path.join(dataDir, 'operator-token'), `${WRONG_TOKEN}\n`);
      const run = await parlor(['bots', 'create', '--name', 'Env wins'], { ...operatorEnv, DATA_DIR: dataDir });
      expect(run.code).toBe(0);
    });

    it('exits 1 naming OPERATOR_TOKEN and the missing file when there is no token', async () => {
      const dataDir = path.join(scratchDir(), 'nothing-here');
      const run = await parlor(['bots', 'create', '--name', 'B'], { PARLOR_URL: app.url, DATA_DIR: dataDir });
      expect(run.code).toBe(1);
      expect(run.stdout).toBe('');
      expect(run.stderr).toContain('OPERATOR_TOKEN');
      expect(run.stderr).toContain(path.join(dataDir, 'operator-token'));
    });

    it.each([
      ['over 256 characters', `pop_${'x'.repeat(253)}`],
      ['with a space', 'pop_some token_0123456789abcdefghij'],
      ['with a non-ASCII character', 'pop_some_tökén_0123456789abcdefghij'],
    ])('exits 1 naming OPERATOR_TOKEN, sending nothing and not printing it, for a token %s', async (_name, token) => {
      // Sent to NOWHERE, the request would exit 2: exit 1 proves it was refused before sending.
      const run = await parlor(['audit'], { PARLOR_URL: NOWHERE, OPERATOR_TOKEN: token });
      expect(run.code).toBe(1);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/^error: OPERATOR_TOKEN [^\n]*\n$/);
      expect(run.stderr).not.toContain(token);
    });

    it('sends a token of exactly 256 characters', async () => {
      const run = await parlor(['audit'], { PARLOR_URL: NOWHERE, OPERATOR_TOKEN: `pop_${'x'.repeat(252)}` });
      expect(run.code).toBe(2);
    });

    it('accepts PARLOR_URL with a trailing slash', async () => {
      const run = await parlor(['bots', 'create', '--name', 'Slash'], { ...operatorEnv, PARLOR_URL: `${app.url}/` });
      expect(run.code).toBe(0);
    });
  });
});
