import { AuditCodes, Limits } from '@parlor/protocol';
import { and, desc, eq, sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { makeAuditStore } from '../src/modules/audit/audit.store.js';
import { makeNotificationsService } from '../src/modules/notifications/notifications.service.js';
import { makeNotificationsStore } from '../src/modules/notifications/notifications.store.js';
import { systemClock } from '../src/platform/clock.js';
import { auditLog, notifications, users } from '../src/platform/db/schema.js';
import { type Backing, createBacking, describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { createLoginBot, type LoggedIn, login, operator, setLevel } from './support/flows.js';
import { hold, lockWaiters, lockWaitersOr, racingUserRow } from './support/pg-locks.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

let app: TestApp;
let bot: Client;
let op: Client;
/** PostgreSQL (cluster project): the tests' own connection, to hold rows as another node would. */
let pg: postgres.Sql | undefined;

beforeAll(async () => {
  app = await startApp();
  bot = await createLoginBot(app);
  op = operator(app);
  if (app.config.databaseUrl) pg = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await pg?.end({ timeout: 1 });
  await app?.close();
});

const SPEC_FIELDS = ['body', 'created_at', 'created_by', 'id', 'read_at', 'title', 'type'];

/** A targeted notification from the operator; answers the new notification's id. */
async function send(userId: number, title = 'Hello', body = 'A **bold** hello.', type = 'info'): Promise<number> {
  const res = await op.post('/v1/admin/notifications', { title, body, type, user_id: userId });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id;
}

const lastAudit = async (code: number) =>
  (await app.database.db.select().from(auditLog).where(eq(auditLog.code, code)).orderBy(desc(auditLog.id)).limit(1))[0];

const expectError = (res: { status: number; body: any }, status: number, code: string) => {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body.code).toBe(code);
};

describeApp('GET /v1/notifications', () => {
  it('lists the welcome notification of a new account as exactly the spec 2.7 object', async () => {
    const { client, user } = await login(app, { bot });
    const res = await client.get('/v1/notifications');
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['next_before', 'notifications']);
    expect(res.body.next_before).toBeNull();
    expect(res.body.notifications).toHaveLength(1);
    const [welcome] = res.body.notifications;
    expect(Object.keys(welcome).sort()).toEqual(SPEC_FIELDS);
    expect(welcome).toEqual({
      id: expect.any(Number),
      title: 'Welcome to Parlor',
      body: `Welcome, **${user.username.replace(/_/g, '\\_')}**! Set your username and avatar in your profile.`,
      type: 'success',
      read_at: null,
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      created_by: null,
    });
  });

  it('pages newest first: default 20, `before` continues where `next_before` points', async () => {
    const { client, user } = await login(app, { bot });
    const ids = [];
    for (let i = 0; i < 24; i++) ids.push(await send(user.id, `n${i}`));
    const first = await client.get('/v1/notifications');
    expect(first.body.notifications).toHaveLength(Limits.NOTIFICATIONS_PAGE_DEFAULT);
    expect(first.body.notifications[0].title).toBe('n23');
    const firstIds = first.body.notifications.map((n: { id: number }) => n.id);
    expect(firstIds).toEqual([...firstIds].sort((a, b) => b - a));
    expect(first.body.next_before).toBe(firstIds[19]);
    const second = await client.get(`/v1/notifications?before=${first.body.next_before}`);
    expect(second.body.notifications.map((n: { title: string }) => n.title)).toEqual([
      'n3',
      'n2',
      'n1',
      'n0',
      'Welcome to Parlor',
    ]);
    expect(second.body.next_before).toBeNull();
    const one = await client.get('/v1/notifications?limit=1');
    expect(one.body.notifications).toHaveLength(1);
    expect(one.body.next_before).toBe(ids[23]);
    const max = await client.get(`/v1/notifications?limit=${Limits.NOTIFICATIONS_PAGE_MAX}`);
    expect(max.status).toBe(200);
    expect(max.body.notifications).toHaveLength(25);
    expect(max.body.next_before).toBeNull();
  });

  it('refuses limit 0 and 101, a bad cursor and unknown parameters with 400 ERR_VALIDATION', async () => {
    const { client } = await login(app, { bot });
    for (const q of [
      'limit=0',
      `limit=${Limits.NOTIFICATIONS_PAGE_MAX + 1}`,
      'limit=x',
      'before=0',
      'before=-3',
      'page=2',
    ]) {
      expectError(await client.get(`/v1/notifications?${q}`), 400, 'ERR_VALIDATION');
    }
  });

  it('shows only the caller’s notifications, and needs a session', async () => {
    const a = await login(app, { bot });
    const b = await login(app, { bot });
    await send(b.user.id, 'for b only');
    const list = await a.client.get('/v1/notifications');
    expect(list.body.notifications.map((n: { title: string }) => n.title)).toEqual(['Welcome to Parlor']);
    expectError(await new Client(app.url).get('/v1/notifications'), 401, 'ERR_UNAUTHENTICATED');
    expectError(await new Client(app.url).get('/v1/notifications/unread'), 401, 'ERR_UNAUTHENTICATED');
  });
});

describeApp('reading notifications', () => {
  let me: LoggedIn;
  beforeAll(async () => {
    me = await login(app, { bot });
  });

  it('counts unread, reads one (read_at set), then answers 409 ERR_NOTIFICATION_ALREADY_READ', async () => {
    const id = await send(me.user.id, 'read me');
    expect((await me.client.get('/v1/notifications/unread')).body).toEqual({ unread: 2 });
    const read = await me.client.post(`/v1/notifications/${id}/read`);
    expect(read.status).toBe(200);
    expect(Object.keys(read.body).sort()).toEqual(SPEC_FIELDS);
    expect(read.body).toMatchObject({ id, title: 'read me', read_at: expect.any(String) });
    expect((await me.client.get('/v1/notifications/unread')).body).toEqual({ unread: 1 });
    expectError(await me.client.post(`/v1/notifications/${id}/read`), 409, 'ERR_NOTIFICATION_ALREADY_READ');
    const listed = (await me.client.get('/v1/notifications')).body.notifications.find(
      (n: { id: number }) => n.id === id,
    );
    expect(listed.read_at).toBe(read.body.read_at);
  });

  it('answers 404 ERR_NOTIFICATION_NOT_FOUND for someone else’s or a missing notification', async () => {
    const other = await login(app, { bot });
    const theirs = await send(other.user.id, 'not yours');
    expectError(await me.client.post(`/v1/notifications/${theirs}/read`), 404, 'ERR_NOTIFICATION_NOT_FOUND');
    expectError(await me.client.post('/v1/notifications/2147483647/read'), 404, 'ERR_NOTIFICATION_NOT_FOUND');
    expectError(await me.client.post('/v1/notifications/0/read'), 400, 'ERR_VALIDATION');
    expectError(await me.client.post('/v1/notifications/abc/read'), 400, 'ERR_VALIDATION');
    // Still unread for its owner.
    expect((await other.client.get('/v1/notifications/unread')).body).toEqual({ unread: 2 });
  });

  it('read-all answers how many changed, and 0 when nothing is unread', async () => {
    const fresh = await login(app, { bot });
    await send(fresh.user.id, 'a');
    await send(fresh.user.id, 'b');
    const some = await fresh.client.post('/v1/notifications/read-all');
    expect(some.status).toBe(200);
    expect(some.body).toEqual({ marked: 3 });
    expect((await fresh.client.get('/v1/notifications/unread')).body).toEqual({ unread: 0 });
    expect((await fresh.client.post('/v1/notifications/read-all', {})).body).toEqual({ marked: 0 });
    const list = (await fresh.client.get('/v1/notifications')).body.notifications;
    expect(list.every((n: { read_at: string | null }) => n.read_at !== null)).toBe(true);
    expectError(await fresh.client.post('/v1/notifications/read-all', { all: true }), 400, 'ERR_VALIDATION');
  });

  it('no longer lists, counts, reads or marks a notification past the 90-day retention, swept or not', async () => {
    const aged = await login(app, { bot });
    const old = await send(aged.user.id, 'old');
    const fresh = await send(aged.user.id, 'fresh');
    // Past the window by the clock; the retention sweep has not come by yet.
    const past = new Date(Date.now() - 90 * 24 * 3600_000 - 60_000);
    await app.database.db.update(notifications).set({ createdAt: past }).where(eq(notifications.id, old));
    const listed = (await aged.client.get('/v1/notifications')).body.notifications.map((n: { id: number }) => n.id);
    expect(listed).toContain(fresh);
    expect(listed).not.toContain(old);
    // The welcome notification and `fresh` are unread; `old` is not counted.
    expect((await aged.client.get('/v1/notifications/unread')).body).toEqual({ unread: 2 });
    expectError(await aged.client.post(`/v1/notifications/${old}/read`), 404, 'ERR_NOTIFICATION_NOT_FOUND');
    expect((await aged.client.post('/v1/notifications/read-all')).body).toEqual({ marked: 2 });
    const [row] = await app.database.db.select().from(notifications).where(eq(notifications.id, old));
    expect(row?.readAt).toBeNull();
  });
});

describeApp('POST /v1/admin/notifications (targeted)', () => {
  it('sends from the operator: created_by null, audit 801, notification:new on the recipient’s socket', async () => {
    const target = await login(app, { bot });
    const socket = await connectSocket(app.url, target.client);
    const res = await op.post('/v1/admin/notifications', {
      title: 'Heads up',
      body: 'Read [the rules](https://parlor.example/rules).',
      type: 'warning',
      user_id: target.user.id,
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id: expect.any(Number), broadcast_id: null, recipients: 1 });
    const event = await socket.next('notification:new', (n) => n.id === res.body.id);
    const listed = (await target.client.get('/v1/notifications')).body.notifications[0];
    expect(event).toEqual(listed);
    expect(listed).toMatchObject({ title: 'Heads up', type: 'warning', created_by: null, read_at: null });
    expect(await lastAudit(AuditCodes.NOTIFICATION_CREATE)).toMatchObject({
      actorKind: 'operator',
      targetUserId: target.user.id,
      action: 'create',
      data: { notification_id: res.body.id, title: 'Heads up', type: 'warning' },
    });
  });

  it('records the sending Admin in created_by', async () => {
    const admin = await login(app, { bot });
    await setLevel(app, admin.user.id, 2);
    const target = await login(app, { bot });
    const res = await admin.client.post('/v1/admin/notifications', {
      title: 'From an admin',
      body: 'Hi',
      type: 'success',
      user_id: target.user.id,
    });
    expect(res.status).toBe(200);
    const listed = (await target.client.get('/v1/notifications')).body.notifications[0];
    expect(listed).toMatchObject({ id: res.body.id, created_by: admin.user.id });
    expect(await lastAudit(AuditCodes.NOTIFICATION_CREATE)).toMatchObject({
      actorKind: 'user',
      actorId: admin.user.id,
    });
  });

  it('accepts a 100-character title and a 2000-character body; refuses 101 and 2001, a title that is not one line of visible text and a body with nothing visible', async () => {
    const { user } = await login(app, { bot });
    const body = (title: string, text: string) => ({ title, body: text, type: 'info', user_id: user.id });
    expect((await op.post('/v1/admin/notifications', body('t'.repeat(100), 'b'.repeat(2000)))).status).toBe(200);
    // Counted in code points; visible text may sit among format characters and spaces.
    expect((await op.post('/v1/admin/notifications', body('\u{1F600}'.repeat(100), 'ok'))).status).toBe(200);
    expect((await op.post('/v1/admin/notifications', body('\u200bHi\u200d \u{e0041}', 'ok'))).status).toBe(200);
    expect((await op.post('/v1/admin/notifications', body('\u{1D400}', 'ok'))).status).toBe(200);
    expect((await op.post('/v1/admin/notifications', body('ok', '\u200b\n**Hi**\u2060'))).status).toBe(200);
    for (const [title, text, field] of [
      ['t'.repeat(101), 'ok', 'body/title'],
      ['\u{1F600}'.repeat(101), 'ok', 'body/title'],
      ['ok', 'b'.repeat(2001), 'body/body'],
      ['', 'ok', 'body/title'],
      ['   ', 'ok', 'body/title'],
      ['two\nlines', 'ok', 'body/title'],
      ['two\u2028lines', 'ok', 'body/title'],
      ['two\u2029lines', 'ok', 'body/title'],
      ['two\u0085lines', 'ok', 'body/title'],
      ['two\vlines', 'ok', 'body/title'],
      ['two\flines', 'ok', 'body/title'],
      ['\u200b', 'ok', 'body/title'],
      ['\u200b \u2060\ufeff\u00ad', 'ok', 'body/title'],
      ['\u{e0020}\u{e0041}\u{e007f}', 'ok', 'body/title'],
      ['\u{e0020}'.repeat(51), 'ok', 'body/title'],
      ['ok', '', 'body/body'],
      ['ok', ' \n\t\u3000 ', 'body/body'],
      ['ok', '\u200b', 'body/body'],
      ['ok', '\u200b\n\u2060 \ufeff\u00ad', 'body/body'],
      ['ok', '\u{e0020}\u{e0041}\u{e007f}', 'body/body'],
    ] as const) {
      const res = await op.post('/v1/admin/notifications', body(title, text));
      expectError(res, 400, 'ERR_VALIDATION');
      expect(res.body.errors[0].path).toBe(field);
    }
  });

  it('refuses links that are not http or https, unknown types and unknown fields', async () => {
    const { client, user } = await login(app, { bot });
    for (const text of [
      '[x](javascript:alert(1))',
      '[x](data:text/html,hi)',
      '[x](/relative)',
      '[x](https://a.example',
      // A `](` inside an accepted target is checked too (it used to be skipped with the target).
      '[a](https://ok.example/[b](javascript:alert%281%29)',
    ]) {
      const res = await op.post('/v1/admin/notifications', { title: 't', body: text, type: 'info', user_id: user.id });
      expectError(res, 400, 'ERR_VALIDATION');
      expect(res.body.errors).toEqual([{ path: 'body/body', message: expect.any(String) }]);
    }
    for (const extra of [{ type: 'urgent' }, { type: undefined }, { html: '<b>' }, { user_id: '5' }]) {
      const res = await op.post('/v1/admin/notifications', {
        title: 't',
        body: 'b',
        type: 'info',
        user_id: user.id,
        ...extra,
      });
      expectError(res, 400, 'ERR_VALIDATION');
    }
    expect((await client.get('/v1/notifications/unread')).body).toEqual({ unread: 1 });
    for (const type of ['success', 'info', 'warning', 'danger', 'system']) {
      expect(
        (await op.post('/v1/admin/notifications', { title: type, body: 'b', type, user_id: user.id })).status,
      ).toBe(200);
    }
  });

  it('applies the level rules: an Admin cannot notify another Admin, an Owner can; Users are refused', async () => {
    const [admin, otherAdmin, owner, plain] = [
      await login(app, { bot }),
      await login(app, { bot }),
      await login(app, { bot }),
      await login(app, { bot }),
    ];
    await setLevel(app, admin.user.id, 2);
    await setLevel(app, otherAdmin.user.id, 2);
    await setLevel(app, owner.user.id, 3);
    const to = (userId: number) => ({ title: 't', body: 'b', type: 'info', user_id: userId });
    expectError(await admin.client.post('/v1/admin/notifications', to(otherAdmin.user.id)), 403, 'ERR_FORBIDDEN');
    expect((await owner.client.post('/v1/admin/notifications', to(otherAdmin.user.id))).status).toBe(200);
    expect((await admin.client.post('/v1/admin/notifications', to(plain.user.id))).status).toBe(200);
    expectError(await plain.client.post('/v1/admin/notifications', to(admin.user.id)), 403, 'ERR_FORBIDDEN');
    expectError(
      await new Client(app.url).post('/v1/admin/notifications', to(plain.user.id)),
      401,
      'ERR_UNAUTHENTICATED',
    );
    expectError(await op.post('/v1/admin/notifications', to(2147483646)), 404, 'ERR_USER_NOT_FOUND');
  });

  it('answers 404 ERR_USER_NOT_FOUND for an anonymous stranger (it can never read notifications); nothing written', async () => {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const created = await client.post('/v1/portal/stranger', {});
    expect(created.status).toBe(200);
    const id: number = created.body.user.id;
    const audits = (await app.database.db.select().from(auditLog).where(eq(auditLog.targetUserId, id))).length;
    const res = await op.post('/v1/admin/notifications', { title: 't', body: 'b', type: 'info', user_id: id });
    expectError(res, 404, 'ERR_USER_NOT_FOUND');
    expect(await app.database.db.select().from(notifications).where(eq(notifications.userId, id))).toEqual([]);
    expect(await app.database.db.select().from(auditLog).where(eq(auditLog.targetUserId, id))).toHaveLength(audits);
  });
});

/** The request `run` made while the user's row is held by `work` (pg-locks racingUserRow); PostgreSQL only. */
function racing<T>(userId: number, work: string, run: () => Promise<T>) {
  if (!pg) throw new Error('PostgreSQL only');
  return racingUserRow(pg, userId, work, run);
}

const notificationsOf = async (userId: number) =>
  app.database.db.select().from(notifications).where(eq(notifications.userId, userId));

const auditsOn = async (userId: number) =>
  app.database.db.select().from(auditLog).where(eq(auditLog.targetUserId, userId)).orderBy(auditLog.id);

// PGlite runs one transaction at a time, so nothing interleaves there; on PostgreSQL the request
// meets a change of the recipient that another transaction has not committed yet.
describeApp('POST /v1/admin/notifications (targeted) racing a change of the recipient (PostgreSQL)', () => {
  it.skipIf(MODE !== 'cluster')(
    'answers 404 ERR_USER_NOT_FOUND, not 500, when the recipient is deleted meanwhile',
    async () => {
      const target = await login(app, { bot });
      const res = await racing(target.user.id, `delete from users where id = ${target.user.id}`, () =>
        op.post('/v1/admin/notifications', { title: 'Hi', body: 'hello', type: 'info', user_id: target.user.id }),
      );
      expectError(res, 404, 'ERR_USER_NOT_FOUND');
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'refuses an Admin (403) whose recipient is promoted to Admin meanwhile, and writes nothing',
    async () => {
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const target = await login(app, { bot });
      const before = await notificationsOf(target.user.id);
      const res = await racing(
        target.user.id,
        `update users set permission_level = 2 where id = ${target.user.id}`,
        () =>
          admin.client.post('/v1/admin/notifications', {
            title: 'Hi',
            body: 'hello',
            type: 'info',
            user_id: target.user.id,
          }),
      );
      expectError(res, 403, 'ERR_FORBIDDEN');
      expect(await notificationsOf(target.user.id)).toEqual(before);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'refuses an Admin (403) deleting a notification of a user promoted to Admin meanwhile',
    async () => {
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const target = await login(app, { bot });
      const id = await send(target.user.id);
      const res = await racing(
        target.user.id,
        `update users set permission_level = 2 where id = ${target.user.id}`,
        () => admin.client.post(`/v1/admin/notifications/${id}/delete`),
      );
      expectError(res, 403, 'ERR_FORBIDDEN');
      expect((await notificationsOf(target.user.id)).map((n) => n.id)).toContain(id);
    },
  );
});

// docs/api.md "Levels as they are at the commit": the caller's right is decided on its level and
// state as read under its row lock, not as its session read them when the request began.
describeApp('POST /v1/admin/notifications racing a change of the caller (PostgreSQL)', () => {
  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN and writes nothing when the sending Admin is demoted to User meanwhile',
    async () => {
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const target = await login(app, { bot });
      const before = await notificationsOf(target.user.id);
      const audits = await auditsOn(target.user.id);
      const res = await racing(
        target.user.id,
        `update users set permission_level = 0 where id = ${admin.user.id}`,
        () =>
          admin.client.post('/v1/admin/notifications', {
            title: 'Hi',
            body: 'hello',
            type: 'info',
            user_id: target.user.id,
          }),
      );
      expectError(res, 403, 'ERR_FORBIDDEN');
      expect(await notificationsOf(target.user.id)).toEqual(before);
      expect(await auditsOn(target.user.id)).toEqual(audits);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN and deletes nothing when the deleting Admin is banned meanwhile',
    async () => {
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const target = await login(app, { bot });
      const id = await send(target.user.id);
      const audits = await auditsOn(target.user.id);
      const res = await racing(target.user.id, `update users set state = 2 where id = ${admin.user.id}`, () =>
        admin.client.post(`/v1/admin/notifications/${id}/delete`),
      );
      expectError(res, 403, 'ERR_FORBIDDEN');
      expect((await notificationsOf(target.user.id)).map((n) => n.id)).toContain(id);
      expect(await auditsOn(target.user.id)).toEqual(audits);
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN and writes nothing when the sending Admin’s account is deleted meanwhile',
    async () => {
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const target = await login(app, { bot });
      const before = await notificationsOf(target.user.id);
      const res = await racing(target.user.id, `delete from users where id = ${admin.user.id}`, () =>
        admin.client.post('/v1/admin/notifications', {
          title: 'Hi',
          body: 'hello',
          type: 'info',
          user_id: target.user.id,
        }),
      );
      expectError(res, 403, 'ERR_FORBIDDEN');
      expect(await notificationsOf(target.user.id)).toEqual(before);
    },
  );
});

describeApp('POST /v1/admin/notifications (broadcast) racing a demotion of the caller (PostgreSQL)', () => {
  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_FORBIDDEN and writes no copy when the broadcasting Admin is demoted to User while the copies are written',
    async () => {
      const admin = await login(app, { bot });
      await setLevel(app, admin.user.id, 2);
      const title = `Demoted meanwhile ${Date.now()}`;
      // The demotion holds the Admin's row FOR UPDATE, as an admin action does: the broadcast reads
      // the level still committed (Admin), then its insert waits for that row until the demotion commits.
      const res = await racing(admin.user.id, `update users set permission_level = 0 where id = ${admin.user.id}`, () =>
        admin.client.post('/v1/admin/notifications', { title, body: 'to everyone', type: 'info' }),
      );
      expectError(res, 403, 'ERR_FORBIDDEN');
      expect(await app.database.db.select().from(notifications).where(eq(notifications.title, title))).toEqual([]);
    },
  );
});

describeApp('POST /v1/admin/notifications/{id}/delete racing the recipient’s deletion (PostgreSQL)', () => {
  it.skipIf(MODE !== 'cluster')(
    'answers 404 ERR_NOTIFICATION_NOT_FOUND (the notification went with the account), not ERR_USER_NOT_FOUND',
    async () => {
      const db = pg as postgres.Sql;
      const target = await login(app, { bot });
      const id = await send(target.user.id);
      // Another node deletes the account: its transaction holds the users table before the route
      // starts, so the route reads the notification (still there), then waits to read the
      // recipient; the deletion then commits and takes the notification with it.
      let answer: ReturnType<Client['post']> | undefined;
      await db.begin(async (tx) => {
        await tx`lock table users in access exclusive mode`;
        answer = op.post(`/v1/admin/notifications/${id}/delete`);
        await lockWaiters(db, 1);
        await tx`delete from users where id = ${target.user.id}`;
      });
      expectError(await (answer as ReturnType<Client['post']>), 404, 'ERR_NOTIFICATION_NOT_FOUND');
      expect(await app.database.db.select().from(notifications).where(eq(notifications.id, id))).toEqual([]);
    },
  );
});

describeApp('POST /v1/admin/notifications (broadcast) and deletion', () => {
  it('reaches every registered user with one copy each, and each connected user gets its own copy live', async () => {
    const a = await login(app, { bot });
    const b = await login(app, { bot });
    const [sa, sb] = [await connectSocket(app.url, a.client), await connectSocket(app.url, b.client)];
    const res = await op.post('/v1/admin/notifications', {
      title: 'To all',
      body: 'Maintenance at **02:00**.',
      type: 'system',
    });
    expect(res.status).toBe(200);
    const [row] = await app.database.db
      .select({ n: sql<number>`count(*)::int` })
      .from(users)
      .where(eq(users.isStranger, false));
    const n = row?.n;
    expect(res.body).toEqual({
      id: expect.any(Number),
      broadcast_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      recipients: Number(n),
    });
    const copies = await app.database.db
      .select()
      .from(notifications)
      .where(eq(notifications.broadcastId, res.body.broadcast_id));
    expect(copies).toHaveLength(Number(n));
    expect(new Set(copies.map((c) => c.userId)).size).toBe(Number(n));
    for (const [who, socket] of [
      [a, sa],
      [b, sb],
    ] as const) {
      const event = await socket.next('notification:new', (x) => x.title === 'To all');
      const listed = (await who.client.get('/v1/notifications')).body.notifications[0];
      expect(event).toEqual(listed);
      expect(listed).toMatchObject({ title: 'To all', type: 'system', created_by: null });
    }
    expect(await lastAudit(AuditCodes.NOTIFICATION_BROADCAST)).toMatchObject({
      actorKind: 'operator',
      action: 'broadcast',
      targetUserId: null,
      data: { broadcast_id: res.body.broadcast_id, recipients: Number(n) },
    });
  });

  it('deletes a targeted notification alone (audit 803); a second delete is 404', async () => {
    const { client, user } = await login(app, { bot });
    const keep = await send(user.id, 'keep');
    const gone = await send(user.id, 'gone');
    const res = await op.post(`/v1/admin/notifications/${gone}/delete`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ deleted: 1, broadcast_id: null });
    const titles = (await client.get('/v1/notifications')).body.notifications.map((x: { id: number }) => x.id);
    expect(titles).toContain(keep);
    expect(titles).not.toContain(gone);
    expectError(await client.post(`/v1/notifications/${gone}/read`), 404, 'ERR_NOTIFICATION_NOT_FOUND');
    expect(await lastAudit(AuditCodes.NOTIFICATION_DELETE)).toMatchObject({
      actorKind: 'operator',
      action: 'delete',
      targetUserId: user.id,
      data: { notification_id: gone, deleted: 1, broadcast_id: null },
    });
    expectError(await op.post(`/v1/admin/notifications/${gone}/delete`), 404, 'ERR_NOTIFICATION_NOT_FOUND');
  });

  it('deletes the whole broadcast through any one of its copies', async () => {
    const a = await login(app, { bot });
    const b = await login(app, { bot });
    const sent = await op.post('/v1/admin/notifications', { title: 'Oops', body: 'Wrong text', type: 'danger' });
    const copyOfB = (await b.client.get('/v1/notifications')).body.notifications[0];
    expect(copyOfB.title).toBe('Oops');
    const admin = await login(app, { bot });
    await setLevel(app, admin.user.id, 2);
    const res = await admin.client.post(`/v1/admin/notifications/${copyOfB.id}/delete`, {});
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ deleted: sent.body.recipients, broadcast_id: sent.body.broadcast_id });
    for (const who of [a, b, admin]) {
      const titles = (await who.client.get('/v1/notifications')).body.notifications.map(
        (x: { title: string }) => x.title,
      );
      expect(titles).not.toContain('Oops');
    }
    const left = await app.database.db
      .select()
      .from(notifications)
      .where(and(eq(notifications.broadcastId, sent.body.broadcast_id)));
    expect(left).toEqual([]);
    expect(await lastAudit(AuditCodes.NOTIFICATION_DELETE)).toMatchObject({
      actorKind: 'user',
      actorId: admin.user.id,
      action: 'delete-broadcast',
      data: { broadcast_id: sent.body.broadcast_id, deleted: sent.body.recipients },
    });
  });

  it('deletes a broadcast of more copies than one statement takes, batch by batch, answering as before', async () => {
    for (let i = 0; i < 4; i++) await login(app, { bot });
    const sent = await op.post('/v1/admin/notifications', { title: 'Big', body: 'To everyone', type: 'info' });
    expect(sent.body.recipients).toBeGreaterThan(5);
    // The app's own service and store over the same database, with batches of 2 copies.
    const { db } = app.database;
    const store = makeNotificationsStore(db);
    const batches: number[] = [];
    const service = makeNotificationsService({
      db,
      store: {
        ...store,
        deleteBroadcastBatch: async (broadcastId: string, keepIds: readonly number[], limit: number) => {
          const n = await store.deleteBroadcastBatch(broadcastId, keepIds, limit);
          batches.push(n);
          return n;
        },
      },
      clock: systemClock,
      events: { toUser: () => {}, onlineUserIds: async () => [] },
      audit: makeAuditStore(db, systemClock),
      users: { byId: async () => undefined },
      log: { error: () => {} },
      broadcastDeleteBatch: 2,
    });
    const res = await service.remove({ kind: 'operator' }, 'operator', sent.body.id);
    expect(res).toEqual({ deleted: sent.body.recipients, broadcast_id: sent.body.broadcast_id });
    // Every copy but the one named went in statements of at most 2; that one went with the audit entry.
    expect(batches.length).toBeGreaterThan(2);
    for (const n of batches) expect(n).toBeLessThanOrEqual(2);
    expect(batches.reduce((a, b) => a + b, 0)).toBe(sent.body.recipients - 1);
    const left = await db.select().from(notifications).where(eq(notifications.broadcastId, sent.body.broadcast_id));
    expect(left).toEqual([]);
    expect(await lastAudit(AuditCodes.NOTIFICATION_DELETE)).toMatchObject({
      actorKind: 'operator',
      action: 'delete-broadcast',
      data: { broadcast_id: sent.body.broadcast_id, deleted: sent.body.recipients },
    });
    expectError(await op.post(`/v1/admin/notifications/${sent.body.id}/delete`), 404, 'ERR_NOTIFICATION_NOT_FOUND');
  });

  it('refuses deletion to Users and the level rule applies to targeted notifications', async () => {
    const admin = await login(app, { bot });
    const otherAdmin = await login(app, { bot });
    await setLevel(app, admin.user.id, 2);
    await setLevel(app, otherAdmin.user.id, 2);
    const id = await send(otherAdmin.user.id, 'admin only');
    expectError(await admin.client.post(`/v1/admin/notifications/${id}/delete`), 403, 'ERR_FORBIDDEN');
    const plain = await login(app, { bot });
    expectError(await plain.client.post(`/v1/admin/notifications/${id}/delete`), 403, 'ERR_FORBIDDEN');
    expect((await op.post(`/v1/admin/notifications/${id}/delete`)).status).toBe(200);
  });
});

/**
 * An Admin whose stored level is then changed to `stored` behind this node's session cache (as by
 * a commit on another node whose invalidation is still on its way): its session still reads Admin.
 * docs/api.md, "Levels as they are at the commit".
 */
async function adminChangedBehindCache(stored: number): Promise<LoggedIn> {
  const who = await login(app, { bot });
  await setLevel(app, who.user.id, 2);
  expect((await who.client.get('/v1/users/me')).body.user.permission_level).toBe(2);
  await app.database.db.update(users).set({ permissionLevel: stored }).where(eq(users.id, who.user.id));
  expect((await who.client.get('/v1/users/me')).body.user.permission_level).toBe(2);
  return who;
}

describeApp('POST /v1/admin/notifications (broadcast) and deletion: the caller\u2019s level as stored', () => {
  it('answers 403 ERR_FORBIDDEN to an Admin demoted to User, who sends no broadcast', async () => {
    const actor = await adminChangedBehindCache(0);
    const title = `Stale broadcast ${Date.now()}`;
    const res = await actor.client.post('/v1/admin/notifications', { title, body: 'to everyone', type: 'system' });
    expectError(res, 403, 'ERR_FORBIDDEN');
    expect(await app.database.db.select().from(notifications).where(eq(notifications.title, title))).toEqual([]);
    expect(await lastAudit(AuditCodes.NOTIFICATION_BROADCAST)).not.toMatchObject({ data: { title } });
  });

  it('answers 403 ERR_FORBIDDEN to an Admin demoted to User, who deletes no broadcast (no copy, no audit entry)', async () => {
    const { broadcastId, copies } = await broadcastWithCopies(1);
    const actor = await adminChangedBehindCache(0);
    const res = await actor.client.post(`/v1/admin/notifications/${copies[copies.length - 1]?.id}/delete`);
    expectError(res, 403, 'ERR_FORBIDDEN');
    expect(await copiesOf(broadcastId)).toEqual(copies);
    expect(await deleteAuditsOf(broadcastId)).toEqual([]);
  });
});

/** A broadcast from the operator, after `fresh` new logins; answers it and its copies, lowest id first. */
async function broadcastWithCopies(fresh: number) {
  const logins: LoggedIn[] = [];
  for (let i = 0; i < fresh; i++) logins.push(await login(app, { bot }));
  const sent = await op.post('/v1/admin/notifications', { title: 'Oops', body: 'Wrong text', type: 'danger' });
  expect(sent.status, JSON.stringify(sent.body)).toBe(200);
  const broadcastId: string = sent.body.broadcast_id;
  const copies = await copiesOf(broadcastId);
  expect(copies).toHaveLength(sent.body.recipients);
  return { logins, broadcastId, recipients: sent.body.recipients as number, copies };
}

const copiesOf = async (broadcastId: string) =>
  app.database.db
    .select()
    .from(notifications)
    .where(eq(notifications.broadcastId, broadcastId))
    .orderBy(notifications.id);

const deleteAuditsOf = async (broadcastId: string) =>
  app.database.db
    .select()
    .from(auditLog)
    .where(
      and(eq(auditLog.code, AuditCodes.NOTIFICATION_DELETE), sql`${auditLog.data}->>'broadcast_id' = ${broadcastId}`),
    );

/**
 * Starts `requests` while the copy `heldId` has an update its recipient has not committed yet
 * (read-all on another node); lets it commit once `waiters` requests wait for a lock (or all have
 * answered, which they must not before it commits), and answers their answers. PostgreSQL only.
 */
async function whileCopyHeld<T>(heldId: number, waiters: number, requests: () => Promise<T>[]): Promise<T[]> {
  if (!pg) throw new Error('PostgreSQL only');
  const reader = hold(pg, (tx) => tx`update notifications set read_at = now() where id = ${heldId}`);
  await reader.ready;
  const answers = Promise.all(requests());
  await lockWaitersOr(pg, waiters, answers);
  await reader.end();
  return answers;
}

// The deletion's batches used to skip copies held by another transaction (FOR UPDATE SKIP LOCKED,
// meant for sweeps) and answer 200 with those copies left; two deletions at once both answered
// 200 with an audit entry each. PGlite runs one transaction at a time, so nothing interleaves there.
describeApp('POST /v1/admin/notifications/{id}/delete of a broadcast racing (PostgreSQL)', () => {
  it.skipIf(MODE !== 'cluster')(
    'waits for a copy its recipient is marking read, and answers 200 only once every copy is gone',
    async () => {
      const { logins, broadcastId, recipients, copies } = await broadcastWithCopies(2);
      const [a, b] = logins as [LoggedIn, LoggedIn];
      const copyOfA = copies.find((c) => c.userId === a.user.id);
      const copyOfB = copies.find((c) => c.userId === b.user.id);
      if (!copyOfA || !copyOfB) throw new Error('no copies');
      const [res] = await whileCopyHeld(copyOfB.id, 1, () => [op.post(`/v1/admin/notifications/${copyOfA.id}/delete`)]);
      expect(res?.status, JSON.stringify(res?.body)).toBe(200);
      expect(res?.body).toEqual({ deleted: recipients, broadcast_id: broadcastId });
      expect(await copiesOf(broadcastId)).toEqual([]);
      const listed = (await b.client.get('/v1/notifications')).body.notifications.map((n: { id: number }) => n.id);
      expect(listed).not.toContain(copyOfB.id);
      expect(await deleteAuditsOf(broadcastId)).toEqual([
        expect.objectContaining({ action: 'delete-broadcast', data: expect.objectContaining({ deleted: recipients }) }),
      ]);
    },
  );

  for (const [name, pick] of [
    ['the same copy', (ids: number[]) => [ids[1], ids[1]]],
    ['two different copies', (ids: number[]) => [ids[1], ids[2]]],
  ] as const) {
    it.skipIf(MODE !== 'cluster')(
      `resolves two deletions through ${name} at once to one 200 with one audit entry, and one 404`,
      async () => {
        const { broadcastId, recipients, copies } = await broadcastWithCopies(4);
        const ids = copies.map((c) => c.id);
        const named = pick(ids);
        const held = ids[ids.length - 1];
        if (held === undefined || named.some((id) => id === undefined || id === held))
          throw new Error('too few copies');
        // Both deletions have counted the copies and wait (one for the held copy, the other for
        // the first one's batch) when the held copy is released: they run on at the same time.
        const answers = await whileCopyHeld(held, 2, () =>
          named.map((id) => op.post(`/v1/admin/notifications/${id}/delete`)),
        );
        const ok = answers.filter((r) => r.status === 200);
        const gone = answers.filter((r) => r.status !== 200);
        expect(ok.map((r) => r.body)).toEqual([{ deleted: recipients, broadcast_id: broadcastId }]);
        expect(gone).toHaveLength(1);
        expectError(gone[0] as { status: number; body: any }, 404, 'ERR_NOTIFICATION_NOT_FOUND');
        expect(await copiesOf(broadcastId)).toEqual([]);
        expect(await deleteAuditsOf(broadcastId)).toEqual([
          expect.objectContaining({
            action: 'delete-broadcast',
            data: expect.objectContaining({ deleted: recipients }),
          }),
        ]);
      },
    );
  }

  it.skipIf(MODE !== 'cluster')(
    'answers one 200 with one audit entry when the lowest copy goes with its account between two deletions',
    async () => {
      // The two deletions read the broadcast's lowest copy (the copy both keep to the end) at
      // different moments, around the account deletion that takes it: they keep different copies
      // and each deletes all the other keeps. Both used to find none of theirs left and answer 404,
      // recording nothing, with the broadcast gone.
      const db = pg as postgres.Sql;
      const { broadcastId, copies } = await broadcastWithCopies(4);
      const ids = copies.map((c) => c.id);
      const at = (i: number): number => {
        const id = ids.at(i);
        if (id === undefined) throw new Error('too few copies');
        return id;
      };
      const [first, second, third, held] = [at(0), at(-3), at(-2), at(-1)];
      const anchorOwner = copies[0]?.userId;
      const reader = hold(db, (tx) => tx`update notifications set read_at = now() where id = ${held}`);
      await reader.ready;
      let answers: { status: number; body: any }[];
      try {
        const a = op.post(`/v1/admin/notifications/${third}/delete`);
        await lockWaiters(db, 1);
        expect((await op.post(`/v1/admin/users/${anchorOwner}/delete`)).status).toBe(200);
        expect((await copiesOf(broadcastId)).map((c) => c.id)).not.toContain(first);
        const b = op.post(`/v1/admin/notifications/${second}/delete`);
        await lockWaiters(db, 2);
        await reader.end();
        answers = await Promise.all([a, b]);
      } finally {
        await reader.end();
      }
      expect(answers.map((r) => r.status).sort()).toEqual([200, 404]);
      expectError(
        answers.find((r) => r.status !== 200) as { status: number; body: any },
        404,
        'ERR_NOTIFICATION_NOT_FOUND',
      );
      expect(await copiesOf(broadcastId)).toEqual([]);
      expect(await deleteAuditsOf(broadcastId)).toHaveLength(1);
    },
  );
});

// The broadcast's INSERT … SELECT read a user whose deletion had not committed; the insert's
// foreign-key check then waited for that deletion and failed once it committed (500, nothing written).
describeApp('POST /v1/admin/notifications (broadcast) racing an account deletion (PostgreSQL)', () => {
  it.skipIf(MODE !== 'cluster')(
    'answers 200 with one copy for each user left when an account is deleted meanwhile, not 500',
    async () => {
      await login(app, { bot });
      const target = await login(app, { bot });
      const res = await racing(target.user.id, `delete from users where id = ${target.user.id}`, () =>
        op.post('/v1/admin/notifications', { title: 'To all', body: 'hello', type: 'info' }),
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const [row] = await app.database.db
        .select({ n: sql<number>`count(*)::int` })
        .from(users)
        .where(eq(users.isStranger, false));
      const copies = await copiesOf(res.body.broadcast_id);
      expect(res.body.recipients).toBe(Number(row?.n));
      expect(copies).toHaveLength(res.body.recipients);
      expect(copies.map((c) => c.userId)).not.toContain(target.user.id);
      expect(await lastAudit(AuditCodes.NOTIFICATION_BROADCAST)).toMatchObject({
        data: { broadcast_id: res.body.broadcast_id, recipients: res.body.recipients },
      });
    },
  );
});

describeApp('automated notifications reach the socket', () => {
  it('sends "permission changed" live when the operator changes a level', async () => {
    const { client, user } = await login(app, { bot });
    const socket = await connectSocket(app.url, client);
    await setLevel(app, user.id, 1);
    const event = await socket.next('notification:new', (n) => n.title === 'Permission changed');
    expect(event).toMatchObject({
      body: 'Your permission level is now **Moderator**.',
      type: 'info',
      created_by: null,
    });
  });

  it('sends "new login" live to the sessions already open when the account signs in from a new address', async () => {
    const first = await login(app, { bot });
    const socket = await connectSocket(app.url, first.client);
    const elsewhere = new Client(app.url, nextIp(), app.publicApiKey);
    await login(app, { bot, platformUserId: first.platformUserId, client: elsewhere });
    const event = await socket.next('notification:new', (n) => n.title === 'New login');
    expect(event.body).toContain(`**${elsewhere.ip}**`);
    expect((await first.client.get('/v1/notifications/unread')).body).toEqual({ unread: 2 });
  });
});

const clusterOnly = describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'));

/** Three nodes over one backing: C is alive for Redis but answers no cross-node request. */
clusterOnly('broadcast with a node that does not answer', () => {
  let backing: Backing;
  let nodes: TestApp[] = [];
  beforeAll(async () => {
    backing = await createBacking();
    for (let i = 0; i < 3; i++) nodes.push(await startApp({ backing }));
  });
  afterAll(async () => {
    closeAllSockets();
    for (const node of nodes.reverse()) await node.close();
    nodes = [];
    await backing?.release();
  });

  it('reaches the users on the nodes that answered, on the sending node and another', async () => {
    const [a, b, c] = nodes as [TestApp, TestApp, TestApp];
    const adapterOf = (node: TestApp) =>
      node.services.realtime.io.of('/').adapter as unknown as {
        serverCount(): Promise<number>;
        onMessage(message: unknown, offset?: string): void;
      };
    await expect.poll(() => adapterOf(a).serverCount(), { timeout: 20_000 }).toBe(3);
    // C drops what reaches it over pub/sub (the requests of the cross-node reads): as a stalled
    // process it stays subscribed, so it is counted, and never answers. Its stream is read as usual.
    const silent = adapterOf(c);
    const read = silent.onMessage;
    silent.onMessage = function (message, offset) {
      if (offset !== undefined) read.call(this, message, offset);
    };
    const loginBot = await createLoginBot(a);
    const onA = await login(a, { bot: loginBot });
    const onB = await login(a, { bot: loginBot });
    const [sa, sb] = [await connectSocket(a.url, onA.client), await connectSocket(b.url, onB.client.on(b))];
    const res = await operator(a).post('/v1/admin/notifications', {
      title: 'Partial',
      body: 'To all.',
      type: 'system',
    });
    expect(res.status).toBe(200);
    for (const [who, socket] of [
      [onA, sa],
      [onB, sb],
    ] as const) {
      const event = await socket.next('notification:new', (x) => x.title === 'Partial');
      const listed = (await who.client.get('/v1/notifications')).body.notifications[0];
      expect(event).toEqual(listed);
    }
  }, 60_000);
});
