import { AuditCodes } from '@parlor/protocol';
import { CommanderError } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from '../../server/test/support/app.js';
import { Client, nextIp } from '../../server/test/support/client.js';
import { createBot, login } from '../../server/test/support/flows.js';
import type { Transport } from '../src/http.js';
import { buildProgram } from '../src/program.js';
import { NOWHERE, parlor, SOME_TOKEN, useCli } from './support.js';

/** The CLI twins of the admin routes (DESIGN.md 6): users, bots, chats, audit. */

/** Runs the program in-process against a transport that records requests and answers 200 {ok}. */
async function inProcess(args: string[]) {
  const out = { code: -1, stdout: '', stderr: '', requests: [] as { method: string; path: string; body: unknown }[] };
  const transport: Transport = async (url, init) => {
    out.requests.push({
      method: init.method,
      path: url.pathname + url.search,
      body: init.body === undefined ? undefined : JSON.parse(init.body),
    });
    return { status: 200, headers: {}, text: '{"ok":true}' };
  };
  const io = {
    env: { PARLOR_URL: 'http://parlor.test', OPERATOR_TOKEN: SOME_TOKEN },
    cwd: '/',
    stdout: (t: string) => {
      out.stdout += t;
    },
    stderr: (t: string) => {
      out.stderr += t;
    },
    transport,
    setExitCode: (c: number) => {
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

useCli();

describe('parlor users|bots|chats|audit: the request each command sends', () => {
  const cases: [string[], string, string, unknown][] = [
    [['users', 'ban', '42'], 'POST', '/v1/admin/punishments/ban', { user_id: 42 }],
    [
      ['users', 'ban', '42', '--days', '7', '--reason', 'spam'],
      'POST',
      '/v1/admin/punishments/ban',
      { user_id: 42, duration: 604_800, reason: 'spam' },
    ],
    [['users', 'ban', '42', '--seconds', '90'], 'POST', '/v1/admin/punishments/ban', { user_id: 42, duration: 90 }],
    [['users', 'unban', '42', '--reason', 'ok'], 'POST', '/v1/admin/punishments/unban', { user_id: 42, reason: 'ok' }],
    [
      ['users', 'timeout', '42', '--seconds', '3600'],
      'POST',
      '/v1/admin/punishments/timeout',
      { user_id: 42, duration: 3600 },
    ],
    [['users', 'warn', '42'], 'POST', '/v1/admin/punishments/warn', { user_id: 42 }],
    [['users', 'delete', '42'], 'POST', '/v1/admin/users/42/delete', undefined],
    [
      ['users', 'update', '42', '--username', 'bob', '--avatar-source', ''],
      'POST',
      '/v1/admin/users/42/update',
      { username: 'bob', avatar_source: '' },
    ],
    [
      ['bots', 'update', '7', '--name', 'N', '--type', 'verified', '--rate-limit-per-hour', '9', '--clear-owner'],
      'POST',
      '/v1/admin/bots/7/update',
      { name: 'N', type: 'verified', rate_limit_per_hour: 9, owner_user_id: null },
    ],
    [
      ['bots', 'update', '7', '--owner-user-id', '3', '--avatar-url', 'https://x.example/a.png'],
      'POST',
      '/v1/admin/bots/7/update',
      { owner_user_id: 3, avatar_url: 'https://x.example/a.png' },
    ],
    [['bots', 'update', '7', '--clear-avatar'], 'POST', '/v1/admin/bots/7/update', { avatar_url: null }],
    [['bots', 'delete', '7'], 'POST', '/v1/admin/bots/7/delete', undefined],
    [['chats', 'create-official', '--name', 'News'], 'POST', '/v1/admin/chats/create', { name: 'News' }],
    [['chats', 'update', '12', '--type', 'private'], 'POST', '/v1/admin/chats/12/update', { type: 'private' }],
    [['chats', 'delete', '12'], 'POST', '/v1/admin/chats/12/delete', undefined],
    [['audit'], 'GET', '/v1/admin/audit', undefined],
    [
      ['audit', '--limit', '5', '--code', '401', '--before', '99', '--target-user-id', '42'],
      'GET',
      '/v1/admin/audit?limit=5&code=401&before=99&target_user_id=42',
      undefined,
    ],
  ];
  it.each(cases)('parlor %j → %s %s', async (args, method, route, body) => {
    const run = await inProcess(args);
    expect(run.code, run.stderr).toBe(0);
    expect(run.requests).toEqual([{ method, path: route, body }]);
  });
});

describe('parlor users|bots|chats|audit argument checks (before anything is sent)', () => {
  const cases: [string, string[], RegExp][] = [
    ['ban with --days and --seconds', ['users', 'ban', '5', '--days', '1', '--seconds', '60'], /cannot be used with/],
    ['a ban over 30 days', ['users', 'ban', '5', '--days', '31'], /1 to 30/],
    ['a ban under 60 seconds', ['users', 'ban', '5', '--seconds', '59'], /60 to 2592000/],
    ['a timeout without --seconds', ['users', 'timeout', '5'], /--seconds/],
    ['a fractional timeout', ['users', 'timeout', '5', '--seconds', '60.5'], /whole number/],
    ['a user id 0', ['users', 'delete', '0'], /user_id/],
    ['an update without changes', ['users', 'update', '5'], /--username and\/or --avatar-source/],
    ['a bot update without changes', ['bots', 'update', '5'], /at least one change/],
    ['an owner and --clear-owner', ['bots', 'update', '5', '--owner-user-id', '3', '--clear-owner'], /cannot be used/],
    ['an unknown bot type', ['bots', 'update', '5', '--type', 'gold'], /official, verified, community/],
    ['a non-numeric bot id', ['bots', 'delete', 'x'], /bot_id/],
    ['an official chat without --name', ['chats', 'create-official'], /--name/],
    ['a chat type official', ['chats', 'update', '3', '--type', 'official'], /public, private/],
    ['a chat update without changes', ['chats', 'update', '3'], /--name and\/or --type/],
    ['an audit limit of 101', ['audit', '--limit', '101'], /1 to 100/],
    ['an audit code that is not a number', ['audit', '--code', 'ban'], /--code/],
  ];
  it.each(cases)('exits 1 on %s with a clear message', async (_name, args, message) => {
    const run = await inProcess(args);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^error: /);
    expect(run.stderr).toMatch(message);
    expect(run.stdout).toBe('');
    expect(run.requests).toEqual([]);
  });

  it('the built binary lists the chats and audit commands and refuses bad input the same way', async () => {
    const help = await parlor(['--help'], { PARLOR_URL: NOWHERE });
    expect(help.stdout).toMatch(/^\s+chats\s/m);
    expect(help.stdout).toMatch(/^\s+audit\s/m);
    const run = await parlor(['users', 'ban', '5', '--days', '31'], {
      PARLOR_URL: NOWHERE,
      OPERATOR_TOKEN: SOME_TOKEN,
    });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/1 to 30/);
  });
});

describeApp('parlor users|bots|chats|audit against a running server', () => {
  let app: TestApp;
  let env: Record<string, string>;

  beforeAll(async () => {
    app = await startApp();
    env = { PARLOR_URL: app.url, OPERATOR_TOKEN: app.operatorToken };
  });
  afterAll(async () => app?.close());

  const ok = async (args: string[]) => {
    const run = await parlor(args, env);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toBe('');
    return JSON.parse(run.stdout);
  };

  it('users timeout, warn, ban, unban: the account follows, the audit shows the operator', async () => {
    const target = await login(app);
    const id = String(target.user.id);
    expect(await ok(['users', 'timeout', id, '--seconds', '600', '--reason', 'calm'])).toMatchObject({
      ok: true,
      punishment: { action_type: 'PLATFORM_TIMEOUT', reason: 'calm' },
    });
    expect((await target.client.get('/v1/users/me')).body.code).toBe('ERR_TIMED_OUT');
    expect(await ok(['users', 'warn', id])).toMatchObject({ punishment: { action_type: 'PLATFORM_WARNING' } });
    expect(await ok(['users', 'ban', id, '--days', '2'])).toMatchObject({
      punishment: { action_type: 'PLATFORM_BAN', expires_at: expect.any(String) },
    });
    expect((await target.client.get('/v1/users/me')).status).toBe(401);
    expect(await ok(['users', 'unban', id])).toEqual({ ok: true });

    const audit = await ok(['audit', '--target-user-id', id, '--limit', '3']);
    expect(audit.entries.map((e: { code: number; actor_kind: string }) => [e.code, e.actor_kind])).toEqual([
      [AuditCodes.PUNISH_UNBAN, 'operator'],
      [AuditCodes.PUNISH_BAN, 'operator'],
      [AuditCodes.PUNISH_WARN, 'operator'],
    ]);
    expect(audit.next_before).toBe(audit.entries[2].id);
    const bans = await ok(['audit', '--code', String(AuditCodes.PUNISH_BAN), '--target-user-id', id]);
    expect(bans.entries).toHaveLength(1);
  });

  it('users delete: the session ends and the server’s refusal of an unknown user is printed', async () => {
    const target = await login(app);
    expect(await ok(['users', 'delete', String(target.user.id)])).toEqual({ ok: true });
    expect((await target.client.get('/v1/users/me')).status).toBe(401);
    const again = await parlor(['users', 'delete', String(target.user.id)], env);
    expect(again.code).toBe(1);
    expect(JSON.parse(again.stderr)).toMatchObject({ code: 'ERR_USER_NOT_FOUND' });
  });

  it('bots update and delete: the profile changes, then the key stops working', async () => {
    const bot = await createBot(app, { name: 'CLI managed' });
    const profile = await ok(['bots', 'update', String(bot.id), '--type', 'official', '--rate-limit-per-hour', '42']);
    expect(profile).toMatchObject({ id: bot.id, type: 1, rate_limit_per_hour: 42 });
    expect(await ok(['bots', 'delete', String(bot.id)])).toEqual({ ok: true });
    expect((await bot.client.get('/v1/bot/me')).status).toBe(401);
  });

  it('chats create-official, update and delete', async () => {
    const { chat } = await ok(['chats', 'create-official', '--name', 'Town hall']);
    expect(chat).toMatchObject({ type: 'official', name: 'Town hall', owner_id: null });
    expect((await ok(['chats', 'update', String(chat.id), '--name', 'Agora'])).chat.name).toBe('Agora');
    expect(await ok(['chats', 'delete', String(chat.id)])).toEqual({ ok: true });
    const gone = await new Client(app.url, nextIp(), null).get(`/v1/portal/chats/${chat.id}`);
    expect(gone.status).toBe(401); // no session: the route asks for one first
    const again = await parlor(['chats', 'delete', String(chat.id)], env);
    expect(JSON.parse(again.stderr)).toMatchObject({ code: 'ERR_CHAT_NOT_FOUND' });
  });
});
