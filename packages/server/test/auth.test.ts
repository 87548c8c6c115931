import { Limits } from '@parlor/protocol';
import { type SQL, sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rowsOf } from '../src/platform/db/index.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { type Answer, Client, nextIp } from './support/client.js';
import { createBot, createLoginBot, login, nextIdentity, operator } from './support/flows.js';
import { hold, lockWaiters, racingUserRow } from './support/pg-locks.js';

let app: TestApp;
let bot: Client;
/** The cluster project's own connection to the app's database, for the race tests' locks. */
let pg: postgres.Sql | undefined;

beforeAll(async () => {
  app = await startApp();
  bot = await createLoginBot(app);
  if (app.config.databaseUrl) pg = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  await pg?.end({ timeout: 1 });
  await app?.close();
});

const rows = async <T>(query: SQL) => rowsOf<T>(await app.database.db.execute(query));

/** What a login writes for a user: sessions (all, and live ones), notifications, the bot-login count, activity. */
const loginTraces = async (userId: number) =>
  (
    await rows<Record<string, unknown>>(sql`
      select (select count(*)::int from sessions where user_id = ${userId}) as sessions,
             (select count(*)::int from sessions where user_id = ${userId} and ended_at is null) as live,
             (select count(*)::int from notifications where user_id = ${userId}) as notifications,
             (select bot_logins_since_web from users where id = ${userId}) as bot_logins,
             (select last_activity_at::text from users where id = ${userId}) as activity,
             (select max(last_authenticated_at)::text from linked_platforms where user_id = ${userId}) as authenticated`)
  )[0];

/** A verify refused with 403 `code`: no cookie set, and nothing of a login written for the user. */
async function expectRefusedLogin(userId: number, verify: () => Promise<Answer>, code: string) {
  const before = await loginTraces(userId);
  const res = await verify();
  expect(res.status).toBe(403);
  expect(res.body.code).toBe(code);
  expect(res.headers.getSetCookie()).toEqual([]);
  expect(await loginTraces(userId)).toEqual(before);
}

/** A pending code of the pool for the identity (bot/send-code, or a request the bot delivers), and who may verify it. */
async function pendingCode(pool: 'web' | 'bot', platformUserId: string): Promise<{ code: string; client: Client }> {
  const body = { platform: 'platform_a', platform_user_id: platformUserId };
  const client = site();
  if (pool === 'bot') {
    const sent = await bot.post('/v1/authentication/bot/send-code', body);
    expect(sent.status).toBe(200);
    return { code: sent.body.code, client };
  }
  expect((await client.post('/v1/authentication/request', body)).status).toBe(200);
  const fetched = await botCode(platformUserId);
  expect(fetched.body.code).toEqual(expect.any(String));
  return { code: fetched.body.code, client };
}

const site = () => new Client(app.url, nextIp(), app.publicApiKey);
const botCode = async (platformUserId: string, platform = 'platform_a') =>
  bot.post('/v1/authentication/bot/login-code', {
    platform,
    platform_user_id: platformUserId,
    platform_username: 'Someone',
    platform_avatar_url: 'https://cdn.example/a.png',
  });

describeApp('POST /v1/authentication/request', () => {
  it('answers 401 ERR_INVALID_API_KEY without the public key', async () => {
    const res = await new Client(app.url).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: '1',
    });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ code: 'ERR_INVALID_API_KEY', message: expect.any(String) });
  });

  // Its expires_at, exactly ten minutes away: sessions.test.ts 'login codes and time' (fake clock).

  it('returns the same code to a repeated request from the same address', async () => {
    const client = site();
    const id = nextIdentity();
    const first = await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const codeA = (await botCode(id)).body.code;
    const second = await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const codeB = (await botCode(id)).body.code;
    expect(codeA).toMatch(/^[23456789ABCDEFGHJKLMNPQRSTUVWXYZ]{8}$/);
    expect(codeB).toBe(codeA);
    expect(second.body.expires_at).toBe(first.body.expires_at);
  });

  it('gives a request from another address the same code, which then verifies from either address', async () => {
    const id = nextIdentity();
    const [a, b, c] = [site(), site(), site()];
    const first = await a.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(id)).body.code;
    const second = await b.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    expect(second.status).toBe(200);
    expect(second.body.expires_at).toBe(first.body.expires_at);
    expect((await botCode(id)).body.code).toBe(code);
    // An address that never asked cannot use it; each one that asked can.
    expect((await c.post('/v1/authentication/verify', { code })).body.code).toBe('ERR_INVALID_CODE');
    expect((await b.post('/v1/authentication/verify', { code })).status).toBe(200);
    expect((await a.post('/v1/authentication/verify', { code })).body.code).toBe('ERR_INVALID_CODE');
  });

  it('lets no request cancel a pending login: the first address still verifies after requests from others', async () => {
    const id = nextIdentity();
    const owner = site();
    await owner.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(id)).body.code;
    for (let i = 0; i < 3; i++)
      expect(
        (await site().post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id })).status,
      ).toBe(200);
    expect((await botCode(id)).body.code).toBe(code);
    expect((await owner.post('/v1/authentication/verify', { code })).status).toBe(200);
  });

  it('hands one code to concurrent requests for one identity from many addresses', async () => {
    const id = nextIdentity();
    const clients = Array.from({ length: 8 }, () => site());
    const answers = await Promise.all(
      clients.map((c) => c.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id })),
    );
    expect(answers.map((r) => r.status)).toEqual(clients.map(() => 200));
    expect(new Set(answers.map((r) => r.body.expires_at)).size).toBe(1);
    const code = (await botCode(id)).body.code;
    expect((await (clients[5] as Client).post('/v1/authentication/verify', { code })).status).toBe(200);
  });

  it(`counts a request for another address's pending code among its own ${Limits.PENDING_WEB_CODES_PER_IP}; repeating one of them is not a new one`, async () => {
    const client = site();
    const own = Array.from({ length: Limits.PENDING_WEB_CODES_PER_IP - 1 }, () => nextIdentity());
    for (const id of own)
      expect(
        (await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id })).status,
      ).toBe(200);
    const [theirs, other] = [nextIdentity(), nextIdentity()];
    await site().post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: theirs });
    await site().post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: other });
    // The fifth pending code of this address is one another address asked for first.
    expect(
      (await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: theirs })).status,
    ).toBe(200);
    const sixth = await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: other });
    expect(sixth.status).toBe(429);
    expect(sixth.body.code).toBe('ERR_RATE_LIMITED');
    for (const id of [...own, theirs])
      expect(
        (await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id })).status,
      ).toBe(200);
    // Refused, the address was not bound to the code.
    const code = (await botCode(other)).body.code;
    expect((await client.post('/v1/authentication/verify', { code })).body.code).toBe('ERR_INVALID_CODE');
  });

  it('keys pending codes of IPv6 clients by their /64: another address in it counts against the same five', async () => {
    const inNet = (host: number) => new Client(app.url, `2001:db8:7:1::${host.toString(16)}`, app.publicApiKey);
    for (let i = 1; i <= Limits.PENDING_WEB_CODES_PER_IP; i++) {
      const res = await inNet(i).post('/v1/authentication/request', {
        platform: 'platform_a',
        platform_user_id: nextIdentity(),
      });
      expect(res.status).toBe(200);
    }
    const sameNet = await new Client(app.url, '2001:db8:7:1:aaaa:bbbb:cccc:dddd', app.publicApiKey).post(
      '/v1/authentication/request',
      { platform: 'platform_a', platform_user_id: nextIdentity() },
    );
    expect(sameNet.status).toBe(429);
    const nextNet = await new Client(app.url, '2001:db8:7:2::1', app.publicApiKey).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(nextNet.status).toBe(200);
    // A web code stays bound to the exact address that asked for it.
    const id = nextIdentity();
    await new Client(app.url, '2001:db8:7:3::1', app.publicApiKey).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: id,
    });
    const code = (await botCode(id)).body.code;
    const neighbour = new Client(app.url, '2001:db8:7:3::2', app.publicApiKey);
    expect((await neighbour.post('/v1/authentication/verify', { code })).body.code).toBe('ERR_INVALID_CODE');
  });

  it(`counts concurrent requests for one identity from one address once: with ${Limits.PENDING_WEB_CODES_PER_IP - 1} pending, all get its code`, async () => {
    for (let round = 0; round < 5; round++) {
      const client = site();
      for (let i = 0; i < Limits.PENDING_WEB_CODES_PER_IP - 1; i++)
        expect(
          (
            await client.post('/v1/authentication/request', {
              platform: 'platform_a',
              platform_user_id: nextIdentity(),
            })
          ).status,
        ).toBe(200);
      const id = nextIdentity();
      const answers = await Promise.all(
        [0, 1, 2].map(() =>
          client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id }),
        ),
      );
      expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
      expect(new Set(answers.map((r) => r.body.expires_at)).size).toBe(1);
      // That code is the address's 5th pending one, so a 6th identity is refused.
      const sixth = await client.post('/v1/authentication/request', {
        platform: 'platform_a',
        platform_user_id: nextIdentity(),
      });
      expect(sixth.status).toBe(429);
      const code = (await botCode(id)).body.code;
      expect((await client.post('/v1/authentication/verify', { code })).status).toBe(200);
    }
  });

  it('refuses an unsupported platform with 400 ERR_UNSUPPORTED_PLATFORM', async () => {
    const res = await site().post('/v1/authentication/request', { platform: 'elsewhere', platform_user_id: '1' });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('ERR_UNSUPPORTED_PLATFORM');
  });

  it(`accepts ${Limits.PENDING_WEB_CODES_PER_IP} pending codes from one address and answers 429 to the next`, async () => {
    const client = site();
    for (let i = 0; i < Limits.PENDING_WEB_CODES_PER_IP; i++) {
      const ok = await client.post('/v1/authentication/request', {
        platform: 'platform_a',
        platform_user_id: nextIdentity(),
      });
      expect(ok.status).toBe(200);
    }
    const refused = await client.post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('ERR_RATE_LIMITED');
    expect(refused.body.retry_after).toBeGreaterThan(0);
    expect(refused.headers.get('retry-after')).toBe(String(refused.body.retry_after));
    // Another address is not affected.
    const other = await site().post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(other.status).toBe(200);
  });

  it('frees a pending slot once a code is used', async () => {
    const client = site();
    const ids = Array.from({ length: Limits.PENDING_WEB_CODES_PER_IP }, () => nextIdentity());
    for (const id of ids)
      await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(ids[0] as string)).body.code;
    expect((await client.post('/v1/authentication/verify', { code })).status).toBe(200);
    const again = await client.post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(again.status).toBe(200);
  });

  /** Whether `client` may have PENDING_WEB_CODES_PER_IP new codes pending: it holds none now. */
  const expectNonePending = async (client: Client) => {
    const statuses: number[] = [];
    for (let i = 0; i < Limits.PENDING_WEB_CODES_PER_IP; i++)
      statuses.push(
        (await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: nextIdentity() }))
          .status,
      );
    expect(statuses).toEqual(statuses.map(() => 200));
  };

  it('frees the slot of every address that asked for a code once it is used, not only of the one that used it', async () => {
    const [phone, laptop] = [site(), site()];
    const id = nextIdentity();
    for (const c of [phone, laptop])
      expect(
        (await c.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id })).status,
      ).toBe(200);
    const code = (await botCode(id)).body.code;
    expect((await phone.post('/v1/authentication/verify', { code })).status).toBe(200);
    await expectNonePending(laptop);
  });

  it('frees the slot of an address that asked while a bot code was pending once that code is used elsewhere', async () => {
    const { platformUserId } = await login(app, { bot });
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    const sent = await bot.post('/v1/authentication/bot/send-code', body);
    const browser = site();
    expect((await browser.post('/v1/authentication/request', body)).status).toBe(200);
    expect((await site().post('/v1/authentication/verify', { code: sent.body.code })).status).toBe(200);
    await expectNonePending(browser);
  });

  it('frees the slot of every address that asked for a web code once a bot code replaces it', async () => {
    const { platformUserId } = await login(app, { bot });
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    const [phone, laptop] = [site(), site()];
    for (const c of [phone, laptop]) expect((await c.post('/v1/authentication/request', body)).status).toBe(200);
    expect((await bot.post('/v1/authentication/bot/send-code', body)).status).toBe(200);
    for (const c of [phone, laptop]) await expectNonePending(c);
  });
});

describeApp('POST /v1/authentication/verify', () => {
  it('creates an account user_<random> with the platform details the bot supplied, and sets psession', async () => {
    const client = site();
    const id = nextIdentity();
    await client.post('/v1/authentication/request', { platform: 'platform_b', platform_user_id: id });
    const code = (await botCode(id, 'platform_b')).body.code;
    const res = await client.post('/v1/authentication/verify', { code });
    expect(res.status).toBe(200);
    expect(res.body.new_account).toBe(true);
    expect(res.body.user.username).toMatch(/^user_[a-z0-9]{10}$/);
    expect(res.body.user.linked_platforms).toEqual([
      expect.objectContaining({
        platform: 'platform_b',
        platform_user_id: id,
        platform_username: 'Someone',
        platform_avatar_url: 'https://cdn.example/a.png',
      }),
    ]);
    const cookie = res.headers.getSetCookie().find((c) => c.startsWith('psession=')) ?? '';
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/Secure/i);
    expect(cookie).toMatch(/SameSite=None/i);
    expect(client.cookie).toHaveLength(43);
    const me = await client.get('/v1/users/me');
    expect(me.status).toBe(200);
    expect(me.body.user.id).toBe(res.body.user.id);
  });

  it('logs a returning user into the same account (new_account false)', async () => {
    const first = await login(app, { bot });
    const again = await login(app, { bot, platformUserId: first.platformUserId });
    expect(again.user.id).toBe(first.user.id);
  });

  it('accepts a code only once', async () => {
    const client = site();
    const id = nextIdentity();
    await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(id)).body.code;
    expect((await client.post('/v1/authentication/verify', { code })).status).toBe(200);
    const reuse = await client.post('/v1/authentication/verify', { code });
    expect(reuse.status).toBe(400);
    expect(reuse.body.code).toBe('ERR_INVALID_CODE');
  });

  it('accepts the code in lower case', async () => {
    const client = site();
    const id = nextIdentity();
    await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code: string = (await botCode(id)).body.code;
    expect((await client.post('/v1/authentication/verify', { code: code.toLowerCase() })).status).toBe(200);
  });

  it('refuses a web code from another address with ERR_INVALID_CODE', async () => {
    const id = nextIdentity();
    await site().post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(id)).body.code;
    const res = await site().post('/v1/authentication/verify', { code });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('ERR_INVALID_CODE');
  });

  it('draws another user_ name when the one drawn is taken, in the same login', async () => {
    // The database refuses the next new user_ name once, as a unique index refuses a taken one.
    // A sequence, not a table, counts: its values survive the rollback of the failed insert.
    const statements = [
      'create sequence test_name_clash',
      `create function test_name_clash() returns trigger language plpgsql as $$
      begin
        if new.username like 'user\\_%' and nextval('test_name_clash') = 1 then
          raise exception 'duplicate key value violates unique constraint "users_username_lower_idx"'
            using errcode = 'unique_violation';
        end if;
        return new;
      end $$`,
      'create trigger test_name_clash before insert on users for each row execute function test_name_clash()',
    ];
    for (const statement of statements) await app.database.db.execute(sql.raw(statement));
    try {
      const client = site();
      const id = nextIdentity();
      await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
      const res = await client.post('/v1/authentication/verify', { code: (await botCode(id)).body.code });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.new_account).toBe(true);
      const [clash] = await rows<{ n: number }>(sql`select last_value::int as n from test_name_clash`);
      expect(clash?.n).toBe(2);
      const [account] = await rows<{ n: number }>(
        sql`select count(*)::int as n from linked_platforms where platform_user_id = ${id}`,
      );
      expect(account?.n).toBe(1);
    } finally {
      for (const statement of [
        'drop trigger test_name_clash on users',
        'drop function test_name_clash()',
        'drop sequence test_name_clash',
      ])
        await app.database.db.execute(sql.raw(statement));
    }
  });

  it.skipIf(MODE === 'embedded')(
    'logs a second verify creating the same new identity into the account the first one created',
    async () => {
      const db = pg as postgres.Sql;
      const id = nextIdentity();
      const browser = site();
      const body = { platform: 'platform_a', platform_user_id: id };
      await browser.post('/v1/authentication/request', body);
      const first = (await botCode(id)).body.code;
      // The first login stalls after inserting the account and identity (at its welcome notification).
      const notifications = hold(db, async (tx) => {
        await tx`lock table notifications in exclusive mode`;
      });
      await notifications.ready;
      const one = browser.post('/v1/authentication/verify', { code: first });
      await lockWaiters(db, 1);
      // Its code is taken, so the identity gets a new one; that login waits on the first's identity row.
      expect((await browser.post('/v1/authentication/request', body)).status).toBe(200);
      const second = (await botCode(id)).body.code;
      const two = browser.post('/v1/authentication/verify', { code: second });
      await lockWaiters(db, 2);
      await notifications.end();
      const [a, b] = await Promise.all([one, two]);
      expect([a.status, b.status], JSON.stringify(b.body)).toEqual([200, 200]);
      expect([a.body.new_account, b.body.new_account]).toEqual([true, false]);
      expect(b.body.user.id).toBe(a.body.user.id);
      const [counts] = await rows<{ accounts: number; welcomes: number; sessions: number }>(sql`
        select (select count(*)::int from linked_platforms where platform_user_id = ${id}) as accounts,
               (select count(*)::int from notifications where user_id = ${a.body.user.id}) as welcomes,
               (select count(*)::int from sessions where user_id = ${a.body.user.id}) as sessions`);
      expect(counts).toEqual({ accounts: 1, welcomes: 1, sessions: 2 });
    },
  );

  it('rejects codes that are not 8 characters with 400 ERR_VALIDATION', async () => {
    for (const code of ['ABCDEFG', 'ABCDEFGHJ']) {
      const res = await site().post('/v1/authentication/verify', { code });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('ERR_VALIDATION');
    }
  });

  it(`allows ${Limits.VERIFY_FAILURES_PER_IP} failed attempts per address, then answers 429 even to a right code`, async () => {
    const client = site();
    const id = nextIdentity();
    await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(id)).body.code;
    for (let i = 0; i < Limits.VERIFY_FAILURES_PER_IP; i++) {
      const wrong = await client.post('/v1/authentication/verify', { code: 'ZZZZZZZZ' });
      expect(wrong.status).toBe(400);
    }
    const blocked = await client.post('/v1/authentication/verify', { code });
    expect(blocked.status).toBe(429);
    expect(blocked.body.code).toBe('ERR_RATE_LIMITED');
    expect(blocked.body.retry_after).toBeGreaterThan(0);
  });

  it(`counts parallel wrong guesses before checking them: of 60 from one address ${Limits.VERIFY_FAILURES_PER_IP} are checked, the rest answer 429`, async () => {
    const client = site();
    const guesses = Array.from(
      { length: 60 },
      (_, i) => `ZZZZZZ${'23456789ABCDEFGHJKLMNPQRSTUVWXYZ'[i % 32]}${i < 32 ? 'Y' : 'X'}`,
    );
    const answers = await Promise.all(guesses.map((code) => client.post('/v1/authentication/verify', { code })));
    const checked = answers.filter((r) => r.status === 400);
    const refused = answers.filter((r) => r.status === 429);
    expect(checked.map((r) => r.body.code)).toEqual(Array(Limits.VERIFY_FAILURES_PER_IP).fill('ERR_INVALID_CODE'));
    expect(refused).toHaveLength(60 - Limits.VERIFY_FAILURES_PER_IP);
    expect(new Set(refused.map((r) => r.body.code))).toEqual(new Set(['ERR_RATE_LIMITED']));
  });

  it('does not count a verify that finds its code among the failures', async () => {
    const client = site();
    for (let i = 0; i < Limits.VERIFY_FAILURES_PER_IP - 1; i++)
      expect((await client.post('/v1/authentication/verify', { code: 'ZZZZZZZZ' })).status).toBe(400);
    const id = nextIdentity();
    await client.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: id });
    const code = (await botCode(id)).body.code;
    expect((await client.post('/v1/authentication/verify', { code })).status).toBe(200);
    expect((await client.post('/v1/authentication/verify', { code: 'ZZZZZZZZ' })).status).toBe(400);
    expect((await client.post('/v1/authentication/verify', { code: 'ZZZZZZZZ' })).status).toBe(429);
  });

  it('counts the failures of an IPv6 client per /64, whichever address in it guesses', async () => {
    for (let i = 1; i <= Limits.VERIFY_FAILURES_PER_IP; i++) {
      const guesser = new Client(app.url, `2001:db8:8:1::${i}`, app.publicApiKey);
      expect((await guesser.post('/v1/authentication/verify', { code: 'ZZZZZZZZ' })).status).toBe(400);
    }
    const next = new Client(app.url, '2001:db8:8:1:ffff::1', app.publicApiKey);
    expect((await next.post('/v1/authentication/verify', { code: 'ZZZZZZZZ' })).status).toBe(429);
    const elsewhere = new Client(app.url, '2001:db8:8:2::1', app.publicApiKey);
    expect((await elsewhere.post('/v1/authentication/verify', { code: 'ZZZZZZZZ' })).status).toBe(400);
  });
});

describeApp('POST /v1/authentication/lookup', () => {
  it('lists the linked platforms of a username, case-insensitively', async () => {
    const { user, platformUserId } = await login(app, { bot });
    const res = await site().post('/v1/authentication/lookup', { username: user.username.toUpperCase() });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      username: user.username,
      linked_platforms: [
        {
          platform: 'platform_a',
          platform_user_id: platformUserId,
          platform_username: `name${platformUserId}`,
          platform_avatar_url: `https://cdn.example/${platformUserId}.png`,
        },
      ],
    });
  });

  it('answers 404 ERR_USER_NOT_FOUND for an unknown username', async () => {
    const res = await site().post('/v1/authentication/lookup', { username: 'nobody_here' });
    expect(res.status).toBe(404);
    expect(res.body.code).toBe('ERR_USER_NOT_FOUND');
  });

  it('answers 404 ERR_USER_NOT_FOUND for an anonymous stranger, which nobody logs in as', async () => {
    const made = await site().post('/v1/portal/stranger', {});
    expect(made.status).toBe(200);
    const res = await site().post('/v1/authentication/lookup', { username: made.body.user.username });
    expect([res.status, res.body.code]).toEqual([404, 'ERR_USER_NOT_FOUND']);
  });
});

describeApp('POST /v1/authentication/bot/login-code', () => {
  it('answers code null and expires_at null when no web login is pending', async () => {
    const res = await botCode(nextIdentity());
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ code: null, expires_at: null });
  });

  it('answers 400 ERR_VALIDATION to a platform_avatar_url that is no http(s) URL with a host, keeping the profile', async () => {
    const platformUserId = nextIdentity();
    const client = site();
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    expect((await client.post('/v1/authentication/request', body)).status).toBe(200);
    const fetched = await botCode(platformUserId);
    expect(fetched.body.code).toEqual(expect.any(String));
    for (const bad of ['javascript:alert(1)', 'https://', 'http://[', 'ftp://cdn.example/a.png']) {
      const res = await bot.post('/v1/authentication/bot/login-code', {
        ...body,
        platform_username: 'Other',
        platform_avatar_url: bad,
      });
      expect([res.status, res.body.code], bad).toEqual([400, 'ERR_VALIDATION']);
    }
    // The account verify creates has the profile of the accepted fetch.
    const verified = await client.post('/v1/authentication/verify', { code: fetched.body.code });
    expect(verified.status).toBe(200);
    expect(verified.body.user.avatar_url).toBe('https://cdn.example/a.png');
    // An identity without a picture is sent as "": still accepted.
    const other = nextIdentity();
    expect((await site().post('/v1/authentication/request', { ...body, platform_user_id: other })).status).toBe(200);
    const empty = await bot.post('/v1/authentication/bot/login-code', {
      ...body,
      platform_user_id: other,
      platform_username: 'Someone',
      platform_avatar_url: '',
    });
    expect(empty.status).toBe(200);
    expect(empty.body.code).toEqual(expect.any(String));
  });

  it('needs a bot key: the public key is refused', async () => {
    const res = await site().post('/v1/authentication/bot/login-code', {
      platform: 'platform_a',
      platform_user_id: '1',
      platform_username: 'x',
      platform_avatar_url: '',
    });
    expect(res.status).toBe(401);
  });
});

describeApp('POST /v1/authentication/bot/send-code', () => {
  it('answers 404 ERR_PLATFORM_IDENTITY_NOT_FOUND for an unknown identity', async () => {
    const res = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: nextIdentity(),
    });
    expect(res.status).toBe(404);
    expect(res.body.code).toBe('ERR_PLATFORM_IDENTITY_NOT_FOUND');
  });

  it('gives an existing user a code that logs in from any address; the same code while it is pending', async () => {
    const { user, platformUserId } = await login(app, { bot });
    const a = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    const b = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(a.status).toBe(200);
    expect(a.body.code).toMatch(/^[23456789A-HJ-NP-Z]{8}$/);
    expect(b.body).toEqual(a.body);
    const res = await site().post('/v1/authentication/verify', { code: a.body.code });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ new_account: false, user: { id: user.id } });
  });

  it('a bot code whose account was deleted before the verify: 404 ERR_PLATFORM_IDENTITY_NOT_FOUND, no account made', async () => {
    const { user, platformUserId } = await login(app, { bot });
    const sent = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(sent.status).toBe(200);
    expect((await operator(app).post(`/v1/admin/users/${user.id}/delete`, {})).status).toBe(200);
    const res = await site().post('/v1/authentication/verify', { code: sent.body.code });
    expect([res.status, res.body.code]).toEqual([404, 'ERR_PLATFORM_IDENTITY_NOT_FOUND']);
    expect(res.headers.getSetCookie()).toEqual([]);
    const [row] = await rows<{ n: number }>(
      sql`select count(*)::int as n from linked_platforms where platform_user_id = ${platformUserId}`,
    );
    expect(row?.n).toBe(0);
  });

  it('keeps one code per identity: a bot code replaces a pending web code, and bot/login-code hands out the bot code', async () => {
    const { user, platformUserId } = await login(app, { bot });
    const browser = site();
    await browser.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: platformUserId });
    const web = (await botCode(platformUserId)).body.code;
    const sent = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(sent.status).toBe(200);
    expect(sent.body.code).not.toBe(web);
    expect((await botCode(platformUserId)).body).toEqual(sent.body);
    expect((await browser.post('/v1/authentication/verify', { code: web })).body.code).toBe('ERR_INVALID_CODE');
    const res = await site().post('/v1/authentication/verify', { code: sent.body.code });
    expect(res.status).toBe(200);
    expect(res.body.user.id).toBe(user.id);
  });

  it('answers a web request with the pending bot code, which it neither cancels nor binds', async () => {
    const { platformUserId } = await login(app, { bot });
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    const sent = await bot.post('/v1/authentication/bot/send-code', body);
    const asked = await site().post('/v1/authentication/request', body);
    expect(asked.status).toBe(200);
    expect(asked.body.expires_at).toBe(sent.body.expires_at);
    expect((await botCode(platformUserId)).body).toEqual(sent.body);
    expect((await bot.post('/v1/authentication/bot/send-code', body)).body).toEqual(sent.body);
    expect((await site().post('/v1/authentication/verify', { code: sent.body.code })).status).toBe(200);
  });

  it('leaves a pending web code alone when it refuses a bot login (ERR_WEB_LOGIN_REQUIRED): bot/login-code still delivers it', async () => {
    const { platformUserId } = await login(app, { bot });
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    for (let i = 0; i < Limits.BOT_LOGIN_WEB_REQUIRED_EVERY; i++) {
      const sent = await bot.post('/v1/authentication/bot/send-code', body);
      expect((await site().post('/v1/authentication/verify', { code: sent.body.code })).status).toBe(200);
    }
    const browser = site();
    await browser.post('/v1/authentication/request', body);
    const web = (await botCode(platformUserId)).body.code;
    expect((await bot.post('/v1/authentication/bot/send-code', body)).body.code).toBe('ERR_WEB_LOGIN_REQUIRED');
    expect((await botCode(platformUserId)).body.code).toBe(web);
    expect((await browser.post('/v1/authentication/verify', { code: web })).status).toBe(200);
  });

  it(`allows ${Limits.BOT_LOGIN_WEB_REQUIRED_EVERY} bot logins in a row; the next answers 403 ERR_WEB_LOGIN_REQUIRED until a web login`, async () => {
    const { platformUserId } = await login(app, { bot });
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    for (let i = 0; i < Limits.BOT_LOGIN_WEB_REQUIRED_EVERY; i++) {
      const sent = await bot.post('/v1/authentication/bot/send-code', body);
      expect(sent.status).toBe(200);
      expect((await site().post('/v1/authentication/verify', { code: sent.body.code })).status).toBe(200);
    }
    const refused = await bot.post('/v1/authentication/bot/send-code', body);
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('ERR_WEB_LOGIN_REQUIRED');
    await login(app, { bot, platformUserId });
    expect((await bot.post('/v1/authentication/bot/send-code', body)).status).toBe(200);
  });
});

describeApp(`bot logins in a row (${Limits.BOT_LOGIN_WEB_REQUIRED_EVERY}, then the website)`, () => {
  const N = Limits.BOT_LOGIN_WEB_REQUIRED_EVERY;

  it(`refuses at verify a bot code sent before the ${N}th bot login in a row: 403 ERR_WEB_LOGIN_REQUIRED, nothing written, the code used up`, async () => {
    const { user, platformUserId } = await login(app, { bot });
    // The same account on a second platform: each identity gets its own bot code while the count allows it.
    const other = nextIdentity();
    await app.database.db.execute(sql`
      insert into linked_platforms (user_id, platform, platform_user_id, platform_username, platform_avatar_url, linked_at, last_authenticated_at)
      values (${user.id}, 'platform_b', ${other}, 'Other', '', now(), now())`);
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    for (let i = 0; i < N - 1; i++) {
      const sent = await bot.post('/v1/authentication/bot/send-code', body);
      expect((await site().post('/v1/authentication/verify', { code: sent.body.code })).status).toBe(200);
    }
    const viaA = await bot.post('/v1/authentication/bot/send-code', body);
    const viaB = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_b',
      platform_user_id: other,
    });
    expect([viaA.status, viaB.status]).toEqual([200, 200]);
    expect((await site().post('/v1/authentication/verify', { code: viaA.body.code })).status).toBe(200);
    await expectRefusedLogin(
      user.id,
      () => site().post('/v1/authentication/verify', { code: viaB.body.code }),
      'ERR_WEB_LOGIN_REQUIRED',
    );
    const [row] = await rows<{ n: number }>(sql`select bot_logins_since_web as n from users where id = ${user.id}`);
    expect(row?.n).toBe(N);
    expect((await site().post('/v1/authentication/verify', { code: viaB.body.code })).body.code).toBe(
      'ERR_INVALID_CODE',
    );
    // A web login is what lets bot logins start again.
    await login(app, { bot, platformUserId });
    expect((await bot.post('/v1/authentication/bot/send-code', body)).status).toBe(200);
  });

  it.skipIf(MODE === 'embedded')(
    `refuses at verify a bot code sent while the ${N}th bot login in a row waits for the user row`,
    async () => {
      const db = pg as postgres.Sql;
      const { user, platformUserId } = await login(app, { bot });
      const body = { platform: 'platform_a', platform_user_id: platformUserId };
      for (let i = 0; i < N - 1; i++) {
        const sent = await bot.post('/v1/authentication/bot/send-code', body);
        expect((await site().post('/v1/authentication/verify', { code: sent.body.code })).status).toBe(200);
      }
      const last = await bot.post('/v1/authentication/bot/send-code', body);
      // Another write holds the user's row: the last allowed login has taken its code and waits for it.
      const other = hold(db, async (tx) => {
        await tx`select id from users where id = ${user.id} for update`;
      });
      await other.ready;
      const verifying = site().post('/v1/authentication/verify', { code: last.body.code });
      await lockWaiters(db, 1);
      // send-code still reads the committed count, one short: it makes a code.
      const overlapping = await bot.post('/v1/authentication/bot/send-code', body);
      expect(overlapping.status).toBe(200);
      await other.end();
      expect((await verifying).status).toBe(200);
      await expectRefusedLogin(
        user.id,
        () => site().post('/v1/authentication/verify', { code: overlapping.body.code }),
        'ERR_WEB_LOGIN_REQUIRED',
      );
      const [row] = await rows<{ n: number }>(sql`select bot_logins_since_web as n from users where id = ${user.id}`);
      expect(row?.n).toBe(N);
    },
  );
});

describeApp('verify racing an account deletion (PostgreSQL)', () => {
  // The verify has read the identity's account and waits for its row, which a deletion on
  // another node holds; the deletion commits, and the verify decides as for an identity it does
  // not know (docs/api.md Login): never the 404 ERR_USER_NOT_FOUND verify does not answer.
  const deletedWhileVerifying = async (pool: 'web' | 'bot') => {
    const { user, platformUserId } = await login(app, { bot });
    const { code, client } = await pendingCode(pool, platformUserId);
    const res = await racingUserRow(pg as postgres.Sql, user.id, `delete from users where id = ${user.id}`, () =>
      client.post('/v1/authentication/verify', { code }),
    );
    const accounts = await rows<{ user_id: number }>(
      sql`select user_id from linked_platforms where platform_user_id = ${platformUserId}`,
    );
    return { user, res, client, accounts, code };
  };

  it.skipIf(MODE === 'embedded')('a web code makes the account anew: a new id, its welcome, one session', async () => {
    const { user, res, client, accounts } = await deletedWhileVerifying('web');
    expect([res.status, res.body.code], JSON.stringify(res.body)).toEqual([200, undefined]);
    expect(res.body.new_account).toBe(true);
    expect(res.body.user.id).not.toBe(user.id);
    expect(accounts).toEqual([{ user_id: res.body.user.id }]);
    const traces = await loginTraces(res.body.user.id);
    expect(traces).toMatchObject({ sessions: 1, live: 1, notifications: 1 });
    expect((await client.get('/v1/users/me')).body.user.id).toBe(res.body.user.id);
  });

  it.skipIf(MODE === 'embedded')(
    'a bot code answers 404 ERR_PLATFORM_IDENTITY_NOT_FOUND: no account, no cookie, the code used up',
    async () => {
      const { res, client, accounts, code } = await deletedWhileVerifying('bot');
      expect([res.status, res.body.code], JSON.stringify(res.body)).toEqual([404, 'ERR_PLATFORM_IDENTITY_NOT_FOUND']);
      expect(res.headers.getSetCookie()).toEqual([]);
      expect(client.cookie).toBeNull();
      expect(accounts).toEqual([]);
      expect((await client.post('/v1/authentication/verify', { code })).body.code).toBe('ERR_INVALID_CODE');
    },
  );
});

describeApp('bot/send-code and bot/login-code: Official bots only', () => {
  const FORBIDDEN = { code: 'ERR_FORBIDDEN', message: 'Only official bots deliver login codes.' };
  const loginCodeBody = (platformUserId: string) => ({
    platform: 'platform_a',
    platform_user_id: platformUserId,
    platform_username: 'Not theirs',
    platform_avatar_url: 'https://evil.example/a.png',
  });
  /** The identity's pending code as the Official bot sees it ({code: null} when none was made). */
  const pendingOf = async (platformUserId: string) => (await botCode(platformUserId)).body;

  it('answers 403 ERR_FORBIDDEN to a Community and a Verified bot on both routes, making, revealing and counting nothing', async () => {
    const { user, platformUserId } = await login(app, { bot });
    for (const type of ['community', 'verified'] as const) {
      const third = (await createBot(app, { name: `Third party ${type}`, type })).client;
      const traces = await loginTraces(user.id);
      // No code pending: send-code would make a bot code; refused, none exists afterwards.
      const sent = await third.post('/v1/authentication/bot/send-code', {
        platform: 'platform_a',
        platform_user_id: platformUserId,
      });
      expect([sent.status, sent.body], type).toEqual([403, FORBIDDEN]);
      expect(await pendingOf(platformUserId)).toEqual({ code: null, expires_at: null });
      // Refused before anything is read: an unknown identity gets the same answer, not a 404.
      const unknown = await third.post('/v1/authentication/bot/send-code', {
        platform: 'platform_a',
        platform_user_id: nextIdentity(),
      });
      expect([unknown.status, unknown.body]).toEqual([403, FORBIDDEN]);
      // A web code pending: login-code would hand it out; refused, the code stays as it was.
      const requester = site();
      const req = await requester.post('/v1/authentication/request', {
        platform: 'platform_a',
        platform_user_id: platformUserId,
      });
      expect(req.status).toBe(200);
      const fetched = await third.post('/v1/authentication/bot/login-code', loginCodeBody(platformUserId));
      expect([fetched.status, fetched.body], type).toEqual([403, FORBIDDEN]);
      // Nothing of a login was written (the bot-login count included).
      expect(await loginTraces(user.id)).toEqual(traces);
      // The pending web code is the request's, untouched: the Official bot delivers it and it verifies.
      const pending = await pendingOf(platformUserId);
      expect(pending.expires_at).toBe(req.body.expires_at);
      const verified = await requester.post('/v1/authentication/verify', { code: pending.code });
      expect([verified.status, verified.body.user?.id]).toEqual([200, user.id]);
    }
  });

  it('answers 403 to the bot an Admin registers over REST: no way into an Owner’s session (spec 2.11)', async () => {
    const owner = await login(app, { bot });
    const admin = await login(app, { bot });
    for (const [who, level] of [
      [owner, 3],
      [admin, 2],
    ] as const) {
      expect(
        (await operator(app).post(`/v1/admin/users/${who.user.id}/update`, { permission_level: level })).status,
      ).toBe(200);
    }
    const created = await admin.client.post('/v1/admin/bots/create', { name: 'Admin helper' });
    expect(created.status).toBe(200);
    const helper = new Client(app.url, nextIp(), created.body.api_key);
    const sent = await helper.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: owner.platformUserId,
    });
    expect([sent.status, sent.body]).toEqual([403, FORBIDDEN]);
    const attacker = site();
    expect(
      (
        await attacker.post('/v1/authentication/request', {
          platform: 'platform_a',
          platform_user_id: owner.platformUserId,
        })
      ).status,
    ).toBe(200);
    const fetched = await helper.post('/v1/authentication/bot/login-code', loginCodeBody(owner.platformUserId));
    expect([fetched.status, fetched.body]).toEqual([403, FORBIDDEN]);
  });

  it('serves an Official bot, and refuses it from its next request once it is made community or verified', async () => {
    const { id, client: official } = await createBot(app, { name: 'Soon third party', type: 'official' });
    const { platformUserId } = await login(app, { bot: official });
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    const sent = await official.post('/v1/authentication/bot/send-code', body);
    expect(sent.status).toBe(200);
    expect((await official.post('/v1/authentication/bot/login-code', loginCodeBody(platformUserId))).body.code).toBe(
      sent.body.code,
    );
    for (const type of ['community', 'verified', 'official'] as const) {
      expect((await operator(app).post(`/v1/admin/bots/${id}/update`, { type })).status).toBe(200);
      const again = await official.post('/v1/authentication/bot/send-code', body);
      const fetched = await official.post('/v1/authentication/bot/login-code', loginCodeBody(platformUserId));
      if (type === 'official') {
        // Official again: the pending bot code, as before.
        expect([again.status, again.body.code, fetched.body.code], type).toEqual([200, sent.body.code, sent.body.code]);
      } else {
        expect([again.status, again.body, fetched.status, fetched.body], type).toEqual([
          403,
          FORBIDDEN,
          403,
          FORBIDDEN,
        ]);
      }
    }
  });
});

describeApp('POST /v1/authentication/logout', () => {
  it('ends the session: the cookie stops working', async () => {
    const { client } = await login(app, { bot });
    const cookie = client.cookie;
    const res = await client.post('/v1/authentication/logout');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true });
    client.cookie = cookie;
    const me = await client.get('/v1/users/me');
    expect(me.status).toBe(401);
    expect(me.body.code).toBe('ERR_UNAUTHENTICATED');
  });

  it('refuses a cookie-authenticated mutation from a foreign Origin', async () => {
    const { client } = await login(app, { bot });
    const res = await client.post('/v1/authentication/logout', undefined, {
      headers: { origin: 'https://evil.example' },
    });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('ERR_ORIGIN_NOT_ALLOWED');
  });
});

describeApp('banned users', () => {
  it('cannot request, receive or verify a login code (403 ERR_BANNED)', async () => {
    const { user, platformUserId, client } = await login(app, { bot });
    await app.database.db.execute(`update users set state = 2 where id = ${user.id}` as never);
    const req = await site().post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(req.status).toBe(403);
    expect(req.body.code).toBe('ERR_BANNED');
    const send = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(send.body.code).toBe('ERR_BANNED');
    const me = await client.get('/v1/users/me');
    expect(me.status).toBe(403);
    expect(me.body.code).toBe('ERR_BANNED');
    expect((await operator(app).get('/v1/health')).status).toBe(200);
  });

  for (const pool of ['web', 'bot'] as const) {
    it(`cannot verify a ${pool} code made before the ban (403 ERR_BANNED): no session, no cookie`, async () => {
      const { user, platformUserId } = await login(app, { bot });
      const { code, client } = await pendingCode(pool, platformUserId);
      const ban = await operator(app).post('/v1/admin/punishments/ban', { user_id: user.id, reason: 'test' });
      expect(ban.status).toBe(200);
      await expectRefusedLogin(user.id, () => client.post('/v1/authentication/verify', { code }), 'ERR_BANNED');
      expect(client.cookie).toBeNull();
    });
  }
});

describeApp('timed-out users', () => {
  const timeOut = async (userId: number) => {
    const res = await operator(app).post('/v1/admin/punishments/timeout', { user_id: userId, duration: 3600 });
    expect(res.status).toBe(200);
  };

  it('cannot request or be sent a login code until the timeout ends (403 ERR_TIMED_OUT)', async () => {
    const { user, platformUserId } = await login(app, { bot });
    await timeOut(user.id);
    const body = { platform: 'platform_a', platform_user_id: platformUserId };
    const asked = await site().post('/v1/authentication/request', body);
    expect(asked.status).toBe(403);
    expect(asked.body.code).toBe('ERR_TIMED_OUT');
    const sent = await bot.post('/v1/authentication/bot/send-code', body);
    expect(sent.status).toBe(403);
    expect(sent.body.code).toBe('ERR_TIMED_OUT');
    // Nothing was made for a bot to deliver.
    expect((await botCode(platformUserId)).body).toEqual({ code: null, expires_at: null });
  });

  for (const pool of ['web', 'bot'] as const) {
    it(`cannot verify a ${pool} code made before the timeout (403 ERR_TIMED_OUT): no session, no notification, none ended`, async () => {
      const { user, platformUserId } = await login(app, { bot });
      // Five live sessions: a login that got through would end the oldest.
      for (let i = 0; i < 4; i++) await login(app, { bot, platformUserId });
      const { code, client } = await pendingCode(pool, platformUserId);
      await timeOut(user.id);
      await expectRefusedLogin(user.id, () => client.post('/v1/authentication/verify', { code }), 'ERR_TIMED_OUT');
      expect(client.cookie).toBeNull();
    });
  }

  it('logs in again once the timeout has ended, before any sweep writes the state back', async () => {
    const { user, platformUserId } = await login(app, { bot });
    await timeOut(user.id);
    // The deadline passes; the stored state still says Timeout.
    await app.database.db.execute(
      sql`update users set state_expires_at = now() - interval '1 second' where id = ${user.id}`,
    );
    const [row] = await rows<{ state: number }>(sql`select state from users where id = ${user.id}`);
    expect(row?.state).toBe(1);
    const again = await login(app, { bot, platformUserId });
    expect(again.user.id).toBe(user.id);
    const sent = await bot.post('/v1/authentication/bot/send-code', {
      platform: 'platform_a',
      platform_user_id: platformUserId,
    });
    expect(sent.status).toBe(200);
  });
});
