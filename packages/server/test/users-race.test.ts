import { AuditCodes } from '@parlor/protocol';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, MODE, type Nodes, startNodes, type TestApp } from './support/app.js';
import { type Answer, Client, nextIp } from './support/client.js';
import { createLoginBot, type LoggedIn, login, operator } from './support/flows.js';
import { hold, lockWaiters } from './support/pg-locks.js';
import { closeAllSockets, connectSocket, disconnected } from './support/sockets.js';

let nodes: Nodes;
let app: TestApp;
let bot: Client;
/** PostgreSQL (cluster project): the tests' own connection, to hold rows as another node would. */
let sql: postgres.Sql | undefined;

beforeAll(async () => {
  nodes = await startNodes();
  app = nodes.a;
  bot = await createLoginBot(app);
  if (app.config.databaseUrl) sql = postgres(app.config.databaseUrl, { max: 4, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await sql?.end({ timeout: 1 });
  await nodes?.close();
});

const onPostgres = it.skipIf(MODE !== 'cluster');

const pg = (): postgres.Sql => {
  if (!sql) throw new Error('PostgreSQL only');
  return sql;
};

/** The username the deletion's audit entry (103) recorded: the name the account had when it went. */
const deletedAs = async (id: number): Promise<unknown> => {
  const res = await operator(app).get(`/v1/admin/audit?target_user_id=${id}&code=${AuditCodes.USER_DELETE}`);
  expect(res.status).toBe(200);
  return res.body.entries[0]?.data.username;
};

/**
 * Another node's transaction holds the user's row (a ban, a level change); the deletion queues
 * for it, then a lock of the whole users table after it. `request` starts once those wait and must
 * queue too (`waiting`: how many then wait in all). Let go, the deletion commits, and only then
 * does the users table open again: a statement of the request's that was not under way holding
 * the row finds the user gone.
 */
async function deletedWhileWaiting(who: LoggedIn, request: () => Promise<Answer>, waiting: number) {
  const db = pg();
  const id = who.user.id;
  const holder = hold(db, (tx) => tx`select id from users where id = ${id} for update`);
  await holder.ready;
  const deleted = operator(app).post(`/v1/admin/users/${id}/delete`);
  await lockWaiters(db, 1);
  const table = hold(db, (tx) => tx`lock table users in access exclusive mode`);
  await lockWaiters(db, 2);
  const answer = request();
  await lockWaiters(db, waiting);
  await holder.end();
  // Granted once the deletion has committed (it held the row, and so the table, until then).
  await table.ready;
  await table.end();
  const [d, a] = await Promise.all([deleted, answer]);
  expect(d.status, JSON.stringify(d.body)).toBe(200);
  return a;
}

// docs/api.md Users: a caller whose account is deleted while its request runs answers 401
// ERR_UNAUTHENTICATED (its session ended with it), never 404 for itself; an update that committed
// before the deletion answers what it wrote. PGlite runs one transaction at a time, so nothing
// interleaves there.
describeApp('the own profile routes racing a deletion of the account (PostgreSQL)', () => {
  onPostgres(
    'POST /v1/users/me/update: a deletion ahead of it in the queue for the row answers 401, nothing renamed',
    async () => {
      const db = pg();
      const me = await login(app, { bot });
      const id = me.user.id;
      const holder = hold(db, (tx) => tx`select id from users where id = ${id} for update`);
      await holder.ready;
      const deleted = operator(app).post(`/v1/admin/users/${id}/delete`);
      await lockWaiters(db, 1);
      // The session guard passed; the update waits for the row behind the deletion.
      const updated = me.client.post('/v1/users/me/update', { username: `racer_${id}` });
      await lockWaiters(db, 2);
      await holder.end();
      const [d, u] = await Promise.all([deleted, updated]);
      expect(d.status, JSON.stringify(d.body)).toBe(200);
      expect({ status: u.status, code: u.body.code }).toEqual({ status: 401, code: 'ERR_UNAUTHENTICATED' });
      expect(await deletedAs(id)).toBe(me.user.username);
    },
  );

  onPostgres(
    'POST /v1/users/me/update: a rename committed just before the deletion answers 200 with what it wrote',
    async () => {
      const db = pg();
      const me = await login(app, { bot });
      const id = me.user.id;
      // The update waits for the row first, the deletion behind it, a lock of the whole table last.
      // Let go, the update commits, the deletion takes the row and commits, and only then does the
      // table open again: an answer read after the update's commit would find the user gone.
      const holder = hold(db, (tx) => tx`select id from users where id = ${id} for update`);
      await holder.ready;
      const updated = me.client.post('/v1/users/me/update', { username: `first_${id}`, avatar_source: 'platform_a_2' });
      await lockWaiters(db, 1);
      const deleted = operator(app).post(`/v1/admin/users/${id}/delete`);
      await lockWaiters(db, 2);
      const table = hold(db, (tx) => tx`lock table users in access exclusive mode`);
      await lockWaiters(db, 3);
      await holder.end();
      await table.ready;
      await table.end();
      const [d, u] = await Promise.all([deleted, updated]);
      expect(d.status, JSON.stringify(d.body)).toBe(200);
      // The deletion came after the rename: its audit entry names the user by the new name.
      expect(await deletedAs(id)).toBe(`first_${id}`);
      expect({ status: u.status, code: u.body.code }).toEqual({ status: 200, code: undefined });
      expect(u.body.errors).toBeNull();
      expect(u.body.user).toMatchObject({ id, username: `first_${id}`, avatar_source: 'platform_a_2' });
    },
  );

  onPostgres(
    'GET /v1/users/me: an account deleted while the profile is read answers 401 ERR_UNAUTHENTICATED',
    async () => {
      const me = await login(app, { bot });
      // The session is in the node's cache (the guard needs no SQL), the own profile is not.
      expect((await me.client.get('/v1/users/me/punishments')).status).toBe(200);
      const res = await deletedWhileWaiting(me, () => me.client.get('/v1/users/me'), 3);
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 401, code: 'ERR_UNAUTHENTICATED' });
    },
  );

  onPostgres(
    'GET /v1/users/me/subscription: an account deleted while it is read answers 401 ERR_UNAUTHENTICATED',
    async () => {
      const me = await login(app, { bot });
      expect((await me.client.get('/v1/users/me/punishments')).status).toBe(200);
      const res = await deletedWhileWaiting(me, () => me.client.get('/v1/users/me/subscription'), 3);
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 401, code: 'ERR_UNAUTHENTICATED' });
    },
  );
});

// docs/api.md Subscriptions: a grant or revoke answers the status its own transaction wrote, so a
// deletion of the user right after its commit cannot turn the committed change into an error.
describeApp('subscription grant and revoke racing a deletion of their user (PostgreSQL)', () => {
  /**
   * The change waits for the user's row first, the deletion behind it, a lock of the whole table
   * last. Let go, the change commits, the deletion takes the row and commits, and only then does
   * the table open again: an answer read after the change's commit would find the user gone.
   */
  async function changedJustBeforeDeletion(id: number, change: () => Promise<Answer>) {
    const db = pg();
    const holder = hold(db, (tx) => tx`select id from users where id = ${id} for update`);
    await holder.ready;
    const changed = change();
    await lockWaiters(db, 1);
    const deleted = operator(app).post(`/v1/admin/users/${id}/delete`);
    await lockWaiters(db, 2);
    const table = hold(db, (tx) => tx`lock table users in access exclusive mode`);
    await lockWaiters(db, 3);
    await holder.end();
    await table.ready;
    await table.end();
    const [d, c] = await Promise.all([deleted, changed]);
    expect(d.status, JSON.stringify(d.body)).toBe(200);
    return c;
  }

  onPostgres('a grant committed just before the deletion answers 200 with the status it wrote', async () => {
    const { user } = await login(app, { bot });
    const res = await changedJustBeforeDeletion(user.id, () =>
      operator(app).post('/v1/admin/subscriptions/grant', { user_id: user.id, tier: 'LIFETIME' }),
    );
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 200, code: undefined });
    expect(res.body).toMatchObject({
      user_id: user.id,
      subscription: { tier: 3, has_premium: true, expires_at: null },
    });
  });

  onPostgres('a revoke committed just before the deletion answers 200 with the status it wrote', async () => {
    const { user } = await login(app, { bot });
    const granted = await operator(app).post('/v1/admin/subscriptions/grant', { user_id: user.id, tier: 'LIFETIME' });
    expect(granted.status, JSON.stringify(granted.body)).toBe(200);
    const res = await changedJustBeforeDeletion(user.id, () =>
      operator(app).post('/v1/admin/subscriptions/revoke', { user_id: user.id }),
    );
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 200, code: undefined });
    expect(res.body).toMatchObject({ user_id: user.id, subscription: { tier: 0, has_premium: false } });
  });
});

describeApp('POST /v1/users/me/update racing another rename to the same name (PostgreSQL)', () => {
  onPostgres('the later one gets errors.username "is taken" and its avatar change still applies', async () => {
    const db = pg();
    const [first, second] = [await login(app, { bot }), await login(app, { bot })];
    const name = `wanted_${first.user.id}`;
    // Another node's rename of `first` to the name, not committed yet: `second` finds the name
    // free, then waits on the unique index for that transaction.
    const holder = hold(db, (tx) => tx`update users set username = ${name} where id = ${first.user.id}`);
    await holder.ready;
    const updated = second.client.post('/v1/users/me/update', { username: name, avatar_source: 'platform_a_3' });
    await lockWaiters(db, 1);
    await holder.end();
    const res = await updated;
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.errors).toEqual({ username: 'is taken' });
    expect(res.body.user).toMatchObject({ username: second.user.username, avatar_source: 'platform_a_3' });
    expect((await first.client.get('/v1/users/me')).body.user.username).toBe(name);
  });
});

describeApp('an account deletion on node A, the user on node B', () => {
  it('drops B’s sockets, ends the search and the session there; the profile is gone', async () => {
    const { a, b } = nodes;
    const doomed = await login(a, { bot });
    const peer = await login(a, { bot });
    const onB = doomed.client.on(b);
    const socket = await connectSocket(b.url, onB);
    const peerOnB = peer.client.on(b);
    // Someone else online, or the search is refused (ERR_MATCH_NO_PEERS_ONLINE).
    await connectSocket(b.url, peerOnB);
    const q = await onB.post('/v1/portal/match', { interests: ['deletedonb'] });
    expect(q.status, JSON.stringify(q.body)).toBe(200);
    const before = await peerOnB.get('/v1/portal/match/statistics');
    expect(before.body.top_tags).toContainEqual({ tag: 'deletedonb', searching: 1 });

    expect((await operator(a).post(`/v1/admin/users/${doomed.user.id}/delete`, {})).status).toBe(200);
    await disconnected(socket);
    expect((await onB.get('/v1/users/me')).status).toBe(401);
    const after = await peerOnB.get('/v1/portal/match/statistics');
    expect(after.body.top_tags.find((t: { tag: string }) => t.tag === 'deletedonb')).toBeUndefined();
    const profile = await new Client(b.url, nextIp(), b.publicApiKey).get(`/v1/users/${doomed.user.id}`);
    expect(profile.status).toBe(404);
  });
});
