import { and, eq, isNull } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { schema } from '../src/platform/db/index.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyEpoch, keyedChat, type Member, member } from './support/chat-flows.js';
import { hold as holdTx, lockWaiters as waitForLocks } from './support/pg-locks.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

let app: TestApp;
let sql: postgres.Sql;
beforeAll(async () => {
  app = await startApp();
  if (app.config.databaseUrl) sql = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await sql?.end({ timeout: 1 });
  await app?.close();
});

const lockWaiters = (n: number) => waitForLocks(sql, n);
const hold = (work: (tx: postgres.TransactionSql) => Promise<unknown>) => holdTx(sql, work);

async function isMember(chatId: number, userId: number): Promise<boolean> {
  const rows =
    await sql`select 1 from chat_members where chat_id = ${chatId} and user_id = ${userId} and left_at is null`;
  return rows.length > 0;
}

async function chatOf(owner: Member): Promise<number> {
  const created = await owner.client.post('/v1/portal/chats/create', { name: 'Raced', type: 'public' });
  expect(created.status).toBe(200);
  return created.body.chat.id;
}

// PGlite runs one transaction at a time, so the embedded store cannot interleave a ban with a
// join; on PostgreSQL the test fixes each interleaving with locks and waits on pg_stat_activity.
describeApp('a chat ban racing a join (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')(
    'a ban committed after the join checked for bans but before it added the member refuses the join',
    async () => {
      const owner = await member(app, { level: 2 });
      const chatId = await chatOf(owner);
      const target = await member(app);
      // The ban as the ban route writes it (the chat row first, then its record), not yet committed.
      const ban = hold(async (tx) => {
        await tx`select id from chats where id = ${chatId} for update`;
        await tx`insert into moderation_actions (user_id, chat_id, action_type, created_at)
               values (${target.user.id}, ${chatId}, 'CHAT_BAN', now())`;
      });
      await ban.ready;
      // The join reads no ban yet (it is not committed); it must then wait for the chat row.
      const joining = join(target, { chat_id: chatId });
      await Promise.race([joining, lockWaiters(1)]);
      await ban.end();
      expect(await joining).toMatchObject({ ok: false, code: 'ERR_CHAT_BANNED' });
      expect(await isMember(chatId, target.user.id)).toBe(false);
    },
  );

  it.skipIf(MODE === 'embedded')(
    'a ban that comes while a join is adding the member ends that membership',
    async () => {
      const owner = await member(app, { level: 2 });
      const chatId = await chatOf(owner);
      const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
      const code: string = invite.body.invite.code;
      const target = await member(app);
      // The join (with an invite) stops at the invite row, which this transaction holds.
      const invites = hold((tx) => tx`select code from chat_invites where code = ${code} for update`);
      await invites.ready;
      const joining = join(target, { invite: code });
      await lockWaiters(1);
      // Now the ban, while the join's transaction is open and has not added the member.
      const banning = owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: target.user.id });
      await Promise.race([banning, lockWaiters(2)]);
      await invites.end();
      const [joined, banned] = await Promise.all([joining, banning]);
      expect(banned.status, JSON.stringify(banned.body)).toBe(200);
      // Whichever way the join ends, the banned user is not a member after the ban.
      expect(joined.ok === true || joined.code === 'ERR_CHAT_BANNED').toBe(true);
      expect(await isMember(chatId, target.user.id)).toBe(false);
    },
  );
});

describeApp('a join racing the deletion of the joining account (PostgreSQL)', () => {
  // The deletion (the users row going, as POST /v1/admin/users/{id}/delete ends it) is held open
  // by the test; the join, which passed its checks, waits in its transaction before adding the
  // member. Once the deletion commits the join must find the account gone, not hit the foreign key
  // of chat_members.
  it.skipIf(MODE === 'embedded')(
    'a join whose account is deleted before it adds the member answers ERR_UNAUTHENTICATED and adds nobody',
    async () => {
      const owner = await member(app, { level: 2 });
      const chatId = await chatOf(owner);
      const joiner = await member(app);
      const deletion = hold((tx) => tx`delete from users where id = ${joiner.user.id}`);
      await deletion.ready;
      const joining = join(joiner, { chat_id: chatId });
      await Promise.race([joining, lockWaiters(1)]);
      await deletion.end();
      expect(await joining).toMatchObject({ ok: false, code: 'ERR_UNAUTHENTICATED' });
      expect(await isMember(chatId, joiner.user.id)).toBe(false);
    },
  );
});

/** A member now (read through the app's own database handle: both stores). */
async function memberNow(chatId: number, userId: number): Promise<boolean> {
  const m = schema.chatMembers;
  const rows = await app.database.db
    .select({ userId: m.userId })
    .from(m)
    .where(and(eq(m.chatId, chatId), eq(m.userId, userId), isNull(m.leftAt)));
  return rows.length > 0;
}

type Join = TestApp['services']['chats']['join'];

/** Runs `wrap` instead of the chats service's join for `userId`'s joins (the socket route calls it) until restored. */
function interceptJoin(userId: number, wrap: (original: Join, ...args: Parameters<Join>) => ReturnType<Join>) {
  const chats = app.services.chats;
  const original = chats.join;
  chats.join = (data, payload, enter) =>
    data.userId === userId ? wrap(original, data, payload, enter) : original(data, payload, enter);
  return () => {
    chats.join = original;
  };
}

/**
 * `target`'s socket is outside the chat's room: the room VM's control request, which checks the
 * socket room first, refuses it (a socket in the room would hear ERR_ROOM_NOT_RUNNING), and a
 * message sent now reaches the owner's socket but not the target's.
 */
async function expectOutsideRoom(owner: Member, target: Member, chatId: number): Promise<void> {
  const request = () => target.socket.emitWithAck('vm:control:request', { chat_id: chatId }) as Promise<any>;
  expect(await request()).toMatchObject({ ok: false, code: 'ERR_NOT_CHAT_MEMBER' });
  const { chatKey, epoch } = await keyEpoch(owner, chatId);
  const sent = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
    content: bundle(chatKey, chatId, epoch, 'after the kick'),
  });
  expect(sent.status, JSON.stringify(sent.body)).toBe(200);
  await owner.socket.next('message:new', (m) => m.id === sent.body.id);
  // The room's sockets are sent it together; one round trip on the target's socket comes after.
  await request();
  expect(target.socket.received.filter((r) => r.event === 'message:new' && r.payload.id === sent.body.id)).toEqual([]);
}

/** An Admin's public chat whose socket is in its room, and a user with a key and a socket. */
async function roomAndTarget() {
  const owner = await member(app, { level: 2 });
  const chatId = await chatOf(owner);
  expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
  const target = await member(app);
  return { owner, chatId, target };
}

/** The kick's room:left reached `target` (its sockets left the chat's room before it was sent). */
const leftRoom = (target: Member, chatId: number) =>
  target.socket.next('room:left', (e) => e.chat_id === chatId && e.reason === 'kicked');

const kick = (owner: Member, chatId: number, target: Member) =>
  owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: target.user.id });

// Spec 4.6 rule 1: a removed member gets none of the chat's events. A kick takes the user's
// sockets out of the chat's room after it commits, so a join must be in the room by then.
describeApp('a kick racing a join: the socket room follows the membership', () => {
  it.each([
    ['a member entering again (a reconnect, another tab)', true],
    ['a new member', false],
  ])(
    '%s: a kick committed after the join made or read the membership leaves the socket outside, and the join answers ERR_NOT_CHAT_MEMBER',
    async (_, before) => {
      const { owner, chatId, target } = await roomAndTarget();
      if (before) expect((await join(target, { chat_id: chatId })).ok).toBe(true);
      // The kick commits once the join has done its work, before the socket route answers.
      let kicked: number | undefined;
      const restore = interceptJoin(target.user.id, async (original, ...args) => {
        const out = await original(...args);
        kicked = (await kick(owner, chatId, target)).status;
        // The kick's sockets-leave is done (on the cluster adapter it is applied after a Redis write).
        await leftRoom(target, chatId);
        return out;
      });
      const joined = await join(target, { chat_id: chatId }).finally(restore);
      expect(kicked).toBe(200);
      // The membership ended before the join answered: it says so, never ok.
      expect(joined).toMatchObject({ ok: false, code: 'ERR_NOT_CHAT_MEMBER' });
      await leftRoom(target, chatId);
      expect(await memberNow(chatId, target.user.id)).toBe(false);
      await expectOutsideRoom(owner, target, chatId);
    },
  );

  // On PostgreSQL the kick is seen to wait for the membership row the join holds while its socket
  // enters; PGlite runs one transaction at a time, so there the kick simply comes after the join.
  it('a kick that comes while a member’s join is entering the room waits for it, then takes the socket out', async () => {
    const { owner, chatId, target } = await roomAndTarget();
    expect((await join(target, { chat_id: chatId })).ok).toBe(true);
    let kicking: Promise<{ status: number }> | undefined;
    const restore = interceptJoin(target.user.id, (original, data, payload, enter) =>
      original(data, payload, async (id, fresh) => {
        kicking = kick(owner, chatId, target);
        // PostgreSQL: the kick waits for the membership row this join holds. Were it not held, the
        // kick would commit and its user's sockets leave the room (room:left follows) before this
        // socket enters.
        if (MODE === 'cluster') await Promise.race([kicking.then(() => leftRoom(target, chatId)), lockWaiters(1)]);
        return enter(id, fresh);
      }),
    );
    const joined = await join(target, { chat_id: chatId }).finally(restore);
    expect(joined.ok).toBe(true);
    expect((await kicking)?.status).toBe(200);
    await leftRoom(target, chatId);
    expect(await memberNow(chatId, target.user.id)).toBe(false);
    await expectOutsideRoom(owner, target, chatId);
  });

  it.skipIf(MODE === 'embedded')(
    'a kick that waits for a new member’s join to commit: whichever way the join ends, its socket is outside',
    async () => {
      const { owner, chatId, target } = await roomAndTarget();
      const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
      const code: string = invite.body.invite.code;
      // The join (with an invite) holds the chat row and stops at the invite row, held here.
      const invites = hold((tx) => tx`select code from chat_invites where code = ${code} for update`);
      await invites.ready;
      const joining = join(target, { invite: code });
      await Promise.race([joining, lockWaiters(1)]);
      // The kick waits for the chat row; it comes right after the join's commit.
      const kicking = kick(owner, chatId, target);
      await Promise.race([kicking, lockWaiters(2)]);
      await invites.end();
      const [joined, kicked] = await Promise.all([joining, kicking]);
      expect(kicked.status, JSON.stringify(kicked.body)).toBe(200);
      expect(joined.ok === true || joined.code === 'ERR_NOT_CHAT_MEMBER', JSON.stringify(joined)).toBe(true);
      await leftRoom(target, chatId);
      expect(await memberNow(chatId, target.user.id)).toBe(false);
      await expectOutsideRoom(owner, target, chatId);
    },
  );
});

/** The `portal:presence` deltas a socket got about one session in one chat, in order. */
const presenceDeltas = (m: Member, chatId: number, sessionId: number) =>
  m.socket.received
    .filter((r) => r.event === 'portal:presence' && r.payload.chat_id === chatId && r.payload.session_id === sessionId)
    .map((r) => r.payload.online as boolean);

// The join of a member re-entering says its session online as its socket enters, under the
// membership's hold, then reads the chat and its key ring; a leave that commits then takes the
// socket out and says the session offline, after that online, before the join answers.
describeApp('a leave committing while a member’s join reads the key ring (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')(
    'the join answers ERR_NOT_CHAT_MEMBER, and the leave’s offline comes after the join’s online: the session ends offline',
    async () => {
      const { owner, chatId } = await keyedChat(app);
      const g = await member(app);
      expect((await join(g, { chat_id: chatId })).ok).toBe(true);
      // Another socket of the same session (a tab), not in the room yet.
      const tab = await connectSocket(app.url, g.client);
      await tab.next('chat:list');
      const ringLock = hold((tx) => tx`lock table session_keys in access exclusive mode`);
      await ringLock.ready;
      const joining = tab.emitWithAck('room:join', { chat_id: chatId, rejoin: true } as never) as Promise<any>;
      await lockWaiters(1);
      expect(await g.socket.emitWithAck('room:leave', { chat_id: chatId } as never)).toEqual({ ok: true });
      await owner.socket.next(
        'portal:presence',
        (e) => e.chat_id === chatId && e.session_id === g.sessionId && !e.online,
      );
      await ringLock.end();
      expect(await joining).toMatchObject({ ok: false, code: 'ERR_NOT_CHAT_MEMBER' });
      // A later joiner's delta reaches the owner after any the tab's join sent.
      const late = await member(app);
      const ack = await join(late, { chat_id: chatId });
      expect(ack.members.map((m: any) => m.session_id)).not.toContain(g.sessionId);
      await owner.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === late.sessionId);
      // The first join's online and the leave's offline: the tab of a session already online in the
      // chat said nothing as it entered.
      expect(presenceDeltas(owner, chatId, g.sessionId)).toEqual([true, false]);
    },
  );
});

// Each join checks for a membership again once it has the chat row: only the first makes one.
describeApp('joins of one chat sent at once', () => {
  it('a new member’s joins of one chat sent at once all answer ok, with one membership and one history entry', async () => {
    const { chatId } = await keyedChat(app);
    const m = await member(app);
    const acks = await Promise.all(Array.from({ length: 10 }, () => join(m, { chat_id: chatId })));
    expect(acks.map((a) => a.ok || a.code)).toEqual(Array(10).fill(true));
    const a = schema.chatActivity;
    const joins = await app.database.db
      .select({ id: a.id })
      .from(a)
      .where(and(eq(a.chatId, chatId), eq(a.userId, m.user.id)));
    expect(joins).toHaveLength(1);
    expect(await memberNow(chatId, m.user.id)).toBe(true);
  });
});

/** A member whose socket's handshake read it at Admin level, and a private chat of another Admin's. */
async function adminAndPrivateChat() {
  const { chatId } = await keyedChat(app, 'private');
  return { chatId, admin: await member(app, { level: 2 }) };
}

// A new member's join decides on its user's level and state as stored under the join's lock, never
// on what the socket's handshake read: a demotion, ban or timeout written by another node (or
// between the handshake's look-up and the socket's re-check) is not yet known to the socket here.
describeApp('a join by a socket whose user changed since its handshake', () => {
  it.each([
    [
      'demoted to User: a private chat by id answers ERR_CANNOT_BROWSE_PRIVATE',
      { permissionLevel: 0 },
      'ERR_CANNOT_BROWSE_PRIVATE',
    ],
    ['Banned: ERR_BANNED', { state: 2 }, 'ERR_BANNED'],
    ['timed out: ERR_TIMED_OUT', { state: 1, stateExpiresAt: new Date(Date.now() + 3_600_000) }, 'ERR_TIMED_OUT'],
  ] as const)('%s, and no membership', async (_, change, code) => {
    const { chatId, admin } = await adminAndPrivateChat();
    await app.database.db.update(schema.users).set(change).where(eq(schema.users.id, admin.user.id));
    expect(await join(admin, { chat_id: chatId })).toMatchObject({ ok: false, code });
    expect(await memberNow(chatId, admin.user.id)).toBe(false);
  });

  it('a timeout past its deadline refuses nothing (the state as the session guard reads it)', async () => {
    const { chatId, admin } = await adminAndPrivateChat();
    const lapsed = { state: 1, stateExpiresAt: new Date(Date.now() - 1_000) };
    await app.database.db.update(schema.users).set(lapsed).where(eq(schema.users.id, admin.user.id));
    expect((await join(admin, { chat_id: chatId })).ok).toBe(true);
  });

  it.skipIf(MODE === 'embedded').each([
    [
      'committed while the join waits for the chat row',
      (chatId: number, userId: number) =>
        hold(async (tx) => {
          await tx`select id from chats where id = ${chatId} for update`;
          await tx`update users set permission_level = 0 where id = ${userId}`;
        }),
    ],
    [
      'holding the user row when the join reaches it',
      (_: number, userId: number) => hold((tx) => tx`update users set permission_level = 0 where id = ${userId}`),
    ],
  ])('an Admin demoted by another node, %s, does not join a private chat by id', async (_, demote) => {
    const { chatId, admin } = await adminAndPrivateChat();
    const demotion = demote(chatId, admin.user.id);
    await demotion.ready;
    const joining = join(admin, { chat_id: chatId });
    await Promise.race([joining, lockWaiters(1)]);
    await demotion.end();
    expect(await joining).toMatchObject({ ok: false, code: 'ERR_CANNOT_BROWSE_PRIVATE' });
    expect(await memberNow(chatId, admin.user.id)).toBe(false);
  });
});

describeApp('a join racing a change of the chat (PostgreSQL)', () => {
  it.skipIf(MODE === 'embedded')(
    'a chat made private while the join waits for its lock is not joined: ERR_CANNOT_BROWSE_PRIVATE, no member',
    async () => {
      const { chatId, target } = await roomAndTarget();
      // The join reads the chat as public, then waits for its row, which is made private here.
      const change = hold((tx) => tx`update chats set type = 'private' where id = ${chatId}`);
      await change.ready;
      const joining = join(target, { chat_id: chatId });
      await Promise.race([joining, lockWaiters(1)]);
      await change.end();
      expect(await joining).toMatchObject({ ok: false, code: 'ERR_CANNOT_BROWSE_PRIVATE' });
      expect(await memberNow(chatId, target.user.id)).toBe(false);
    },
  );

  it.skipIf(MODE === 'embedded')(
    'a member’s invite to a chat made private while the join waits for its lock opens nothing: ERR_INVITE_NOT_FOUND, no use spent',
    async () => {
      const { chatId } = await roomAndTarget();
      const plain = await member(app);
      expect((await join(plain, { chat_id: chatId })).ok).toBe(true);
      const made = await plain.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
      expect(made.status).toBe(200);
      const code: string = made.body.invite.code;
      const guest = await member(app);
      // Made private by another node, not committed yet (no invite revoked: the join alone decides).
      const change = hold((tx) => tx`update chats set type = 'private' where id = ${chatId}`);
      await change.ready;
      const joining = join(guest, { invite: code });
      await Promise.race([joining, lockWaiters(1)]);
      await change.end();
      expect(await joining).toMatchObject({ ok: false, code: 'ERR_INVITE_NOT_FOUND' });
      expect(await memberNow(chatId, guest.user.id)).toBe(false);
      const [invite] = await sql<{ uses: number }[]>`select uses from chat_invites where code = ${code}`;
      expect(invite?.uses).toBe(0);
    },
  );

  it.skipIf(MODE === 'embedded')(
    'an invite join waiting for the chat row while the chat is deleted answers ERR_CHAT_NOT_FOUND and spends no use',
    async () => {
      const { owner, chatId } = await keyedChat(app, 'private');
      const made = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, { max_uses: 1 });
      const code: string = made.body.invite.code;
      const guest = await member(app);
      const deletion = hold((tx) => tx`update chats set deleted_at = now() where id = ${chatId}`);
      await deletion.ready;
      const joining = join(guest, { invite: code });
      await Promise.race([joining, lockWaiters(1)]);
      await deletion.end();
      expect(await joining).toMatchObject({ ok: false, code: 'ERR_CHAT_NOT_FOUND' });
      expect(await memberNow(chatId, guest.user.id)).toBe(false);
      const [invite] = await sql<{ uses: number }[]>`select uses from chat_invites where code = ${code}`;
      expect(invite?.uses).toBe(0);
    },
  );

  it.skipIf(MODE === 'embedded')(
    'a rekey committed while the join waits for the chat row: the ack carries the new epoch',
    async () => {
      const { chatId, target } = await roomAndTarget();
      const [before] = await sql<{ epoch: number }[]>`select epoch from chats where id = ${chatId}`;
      const rekey = hold((tx) => tx`update chats set epoch = epoch + 1 where id = ${chatId}`);
      await rekey.ready;
      const joining = join(target, { chat_id: chatId });
      await Promise.race([joining, lockWaiters(1)]);
      await rekey.end();
      const joined = await joining;
      expect(joined.ok).toBe(true);
      expect(joined.epoch).toBe((before?.epoch ?? 0) + 1);
      expect(joined.chat.id).toBe(chatId);
    },
  );
});
