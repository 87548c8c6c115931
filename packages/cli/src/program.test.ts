import { CommanderError } from 'commander';
import { describe, expect, it } from 'vitest';
import { type RawResponse, TimeoutError, type Transport, TransportError } from './http.js';
import type { Io } from './io.js';
import { buildProgram } from './program.js';

/** Runs the program in-process against a scripted transport and collects what it printed. */
async function run(args: string[], answer: RawResponse | Error) {
  const out = { stdout: '', stderr: '', code: -1, requests: 0 };
  const transport: Transport = async () => {
    out.requests += 1;
    if (answer instanceof Error) throw answer;
    return answer;
  };
  const io: Io = {
    env: { PARLOR_URL: 'http://parlor.test', OPERATOR_TOKEN: 'pop_secret_token' },
    cwd: '/',
    stdout: (t) => {
      out.stdout += t;
    },
    stderr: (t) => {
      out.stderr += t;
    },
    transport,
    setExitCode: (c) => {
      out.code = c;
    },
  };
  try {
    await buildProgram(io).parseAsync(args, { from: 'user' });
  } catch (e) {
    if (!(e instanceof CommanderError)) throw e;
    out.code = e.exitCode;
  }
  return out;
}

const create = ['bots', 'create', '--name', 'B'];

describe('parlor output and exit codes', () => {
  it('prints a 2xx JSON answer on stdout, 2-space indented, exit 0', async () => {
    const res = await run(create, { status: 200, headers: {}, text: '{"id":7,"api_key":"pbk_x"}' });
    expect(res).toMatchObject({ code: 0, stderr: '', stdout: '{\n  "id": 7,\n  "api_key": "pbk_x"\n}\n' });
  });

  it('reports a redirect with its target, exit 1', async () => {
    const res = await run(create, { status: 308, headers: { location: 'https://parlor.test/' }, text: '' });
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('redirect to https://parlor.test/');
  });

  it("reports a redirect as one even when it has a JSON body (a proxy's), exit 1", async () => {
    const res = await run(create, {
      status: 301,
      headers: { location: 'http://elsewhere.test/', 'content-type': 'application/json' },
      text: '{"moved":true}',
    });
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('redirect to http://elsewhere.test/');
    expect(res.stderr).not.toContain('moved');
  });

  it('shows an excerpt of a non-JSON error page, exit 1', async () => {
    const res = await run(create, { status: 502, headers: {}, text: '<html>Bad Gateway</html>' });
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('HTTP 502 without a JSON body');
    expect(res.stderr).toContain('Bad Gateway');
  });

  it('exits 2 on a network failure before the request went out, without the token', async () => {
    const res = await run(
      create,
      new TransportError(Object.assign(new Error('connect'), { code: 'ECONNRESET' }), false),
    );
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/^error: cannot reach the Parlor server at http:\/\/parlor\.test: connection reset/);
    expect(res.stderr).not.toContain('pop_secret_token');
  });

  it('refuses a 2xx answer that is not JSON (something in front of the server), exit 1', async () => {
    const res = await run(create, { status: 200, headers: {}, text: '<html>Sign in to the proxy</html>' });
    expect(res.code).toBe(1);
    expect(res.stdout).toBe('');
    expect(res.stderr).toContain('HTTP 200 without a JSON body (not an answer of Parlor');
    expect(res.stderr).toContain('Sign in to the proxy');
  });

  it('exits 2 on a request with no answer in time, saying it may still take effect', async () => {
    const res = await run(create, new TransportError(new TimeoutError('no answer within 30 s'), true));
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(
      /^error: the request was sent to the Parlor server at http:\/\/parlor\.test, but no complete answer came: no answer within 30 s\. It may still take effect/,
    );
  });

  it('exits 2 on a connection cut mid-answer, saying it may still take effect, not "cannot reach"', async () => {
    const res = await run(
      create,
      new TransportError(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }), true),
    );
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(
      /^error: the request was sent .* connection reset \(ECONNRESET\)\. It may still take effect/,
    );
    expect(res.stderr).not.toContain('cannot reach');
  });

  it('says "cannot reach" for a timeout before the request went out', async () => {
    const res = await run(create, new TransportError(new TimeoutError('no answer within 30 s'), false));
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(
      /^error: cannot reach the Parlor server at http:\/\/parlor\.test: no answer within 30 s/,
    );
  });

  it('takes a failure the transport does not qualify as possibly sent', async () => {
    const res = await run(create, new Error('something broke'));
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('It may still take effect');
  });

  it('sends nothing when an argument is invalid', async () => {
    const res = await run(['users', 'set-permission', '1', 'root'], { status: 200, headers: {}, text: '{}' });
    expect(res).toMatchObject({ code: 1, requests: 0 });
  });
});

describe('parlor ids and codes, in the ranges the server takes (checked before anything is sent)', () => {
  const ok = { status: 200, headers: {}, text: '{}' } satisfies RawResponse;
  const withId = (id: string): string[][] => [
    ['users', 'delete', id],
    ['users', 'set-permission', id, 'user'],
    ['bots', 'delete', id],
    ['bots', 'create', '--name', 'B', '--owner-user-id', id],
    ['chats', 'delete', id],
    ['notifications', 'delete', id],
    ['subscriptions', 'revoke', id],
    ['guilds', 'sponsor', '123', id],
    ['audit', '--before', id],
    ['audit', '--target-user-id', id],
  ];

  it('sends ids up to 2147483647 (INT32_MAX) and refuses 2147483648 locally, exit 1', async () => {
    for (const args of withId('2147483647')) expect((await run(args, ok)).requests, args.join(' ')).toBe(1);
    for (const args of withId('2147483648')) {
      const res = await run(args, ok);
      expect({ requests: res.requests, code: res.code }, args.join(' ')).toEqual({ requests: 0, code: 1 });
      expect(res.stderr).toMatch(/from 1 to 2147483647/);
    }
  });

  it('sends audit --code 999 and refuses 1000 locally, exit 1', async () => {
    expect((await run(['audit', '--code', '999'], ok)).requests).toBe(1);
    const res = await run(['audit', '--code', '1000'], ok);
    expect({ requests: res.requests, code: res.code }).toEqual({ requests: 0, code: 1 });
  });
});
