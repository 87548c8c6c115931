import { AuditCodes, Limits, PermissionLevel } from '@parlor/protocol';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { join, keyedChat, member } from './support/chat-flows.js';
import type { Client } from './support/client.js';
import { countRows } from './support/faults.js';
import { createBot, operator } from './support/flows.js';
import { closeAllSockets } from './support/sockets.js';

/** What an account deletion (POST /v1/admin/users/{user_id}/delete) leaves behind it. */

let app: TestApp;
let op: Client;

beforeAll(async () => {
  app = await startApp();
  op = operator(app);
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

const deleteAccount = async (userId: number) => {
  const res = await op.post(`/v1/admin/users/${userId}/delete`);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
};

describeApp('POST /v1/admin/users/{user_id}/delete: the account’s bots', () => {
  it('audits only the live bots it released; a bot deleted before keeps no owner id either', async () => {
    const gone = await member(app);
    const [live, deleted] = [await createBot(app, { name: 'Live' }), await createBot(app, { name: 'Deleted' })];
    for (const bot of [live, deleted]) {
      const res = await op.post(`/v1/admin/bots/${bot.id}/update`, { owner_user_id: gone.user.id });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    expect((await op.post(`/v1/admin/bots/${deleted.id}/delete`)).status).toBe(200);

    await deleteAccount(gone.user.id);
    const audit = await op.get(`/v1/admin/audit?target_user_id=${gone.user.id}&code=${AuditCodes.USER_DELETE}`);
    expect(audit.body.entries).toEqual([
      expect.objectContaining({ data: expect.objectContaining({ released_bots: [live.id] }) }),
    ]);
    const owned = `select count(*) as n from bots where owner_user_id = ${gone.user.id}`;
    expect(await countRows(app, owned)).toBe(0);
  });
});

describeApp('POST /v1/admin/users/{user_id}/delete: the account’s invites', () => {
  const createInvite = (who: { client: Client }, chatId: number) =>
    who.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
  const seedInvites = (chatId: number, createdBy: number, n: number) =>
    app.database.db.execute(
      `insert into chat_invites (code, chat_id, created_by, created_at)
       select 'del_' || ${chatId} || '_' || ${createdBy} || '_' || g, ${chatId}, ${createdBy}, now()
       from generate_series(1, ${n}) g` as never,
    );
  const liveOf = (chatId: number, createdBy: number) =>
    countRows(
      app,
      `select count(*) as n from chat_invites where chat_id = ${chatId} and created_by = ${createdBy} and revoked_at is null`,
    );

  it(`revokes its invites to private chats, which no join honours any more: they free their places of the ${Limits.INVITES_PER_CHAT}`, async () => {
    const owner = await member(app);
    await app.database.db.execute(
      `update users set subscription_tier = 2, subscription_expires_at = now() + interval '7 days' where id = ${owner.user.id}` as never,
    );
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'Private', type: 'private' });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const chatId: number = created.body.chat.id;
    // An Admin filled the chat's invites but one, the owner the last place.
    const admin = await member(app, { level: PermissionLevel.ADMIN });
    await seedInvites(chatId, admin.user.id, Limits.INVITES_PER_CHAT - 1);
    const own = await createInvite(owner, chatId);
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    expect((await createInvite(owner, chatId)).body.code).toBe('ERR_INVITE_LIMIT');

    await deleteAccount(admin.user.id);
    // The Admin's invites open nothing now (its account is gone): revoked, they count no more.
    const next = await createInvite(owner, chatId);
    expect(next.status, JSON.stringify(next.body)).toBe(200);
    expect(await liveOf(chatId, admin.user.id)).toBe(0);
    // The owner's own invites stay, listed and honoured.
    const listed = await owner.client.get(`/v1/portal/chats/${chatId}/invites`);
    expect(listed.body.invites.map((i: { code: string }) => i.code).sort()).toEqual(
      [own.body.invite.code, next.body.invite.code].sort(),
    );
    expect((await join(await member(app), { invite: own.body.invite.code })).ok).toBe(true);
  });

  it('revokes the invites of a private chat’s owner, whose chat is left without one; an Admin invites again', async () => {
    const owner = await member(app);
    await app.database.db.execute(
      `update users set subscription_tier = 2, subscription_expires_at = now() + interval '7 days' where id = ${owner.user.id}` as never,
    );
    const chatId: number = (await owner.client.post('/v1/portal/chats/create', { name: 'Orphan', type: 'private' }))
      .body.chat.id;
    await seedInvites(chatId, owner.user.id, Limits.INVITES_PER_CHAT);
    const admin = await member(app, { level: PermissionLevel.ADMIN });
    expect((await createInvite(admin, chatId)).body.code).toBe('ERR_INVITE_LIMIT');

    await deleteAccount(owner.user.id);
    const made = await createInvite(admin, chatId);
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    expect(await liveOf(chatId, owner.user.id)).toBe(0);
  });

  it('keeps its invites to a public chat, which anyone may join: they still open it', async () => {
    const owner = await member(app, { level: 2 });
    const chatId: number = (await owner.client.post('/v1/portal/chats/create', { name: 'Open', type: 'public' })).body
      .chat.id;
    const inviter = await member(app);
    expect((await join(inviter, { chat_id: chatId })).ok).toBe(true);
    const invite = await createInvite(inviter, chatId);
    expect(invite.status, JSON.stringify(invite.body)).toBe(200);

    await deleteAccount(inviter.user.id);
    expect(await liveOf(chatId, inviter.user.id)).toBe(1);
    expect((await join(await member(app), { invite: invite.body.invite.code })).ok).toBe(true);
  });
});

describeApp('POST /v1/admin/users/{user_id}/delete: the account’s memberships', () => {
  const historyOf = async (owner: { client: Client }, chatId: number) => {
    const res = await owner.client.get(`/v1/portal/chats/${chatId}/activity`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.activity.map((a: any) => [a.user_id, a.action, a.actor_user_id]);
  };

  it('closes each of its memberships in the chat’s history with a leave by the deleting caller', async () => {
    const { owner, chatId } = await keyedChat(app);
    const other = await keyedChat(app);
    const gone = await member(app);
    const stays = await member(app);
    for (const id of [chatId, other.chatId]) expect((await join(gone, { chat_id: id })).ok).toBe(true);
    expect((await join(stays, { chat_id: chatId })).ok).toBe(true);
    // Left before: the deletion writes no second leave there.
    expect(await gone.socket.emitWithAck('room:leave', { chat_id: other.chatId })).toEqual({ ok: true });

    await deleteAccount(gone.user.id);
    expect((await historyOf(owner, chatId)).slice(0, 3)).toEqual([
      [gone.user.id, 'leave', null],
      [stays.user.id, 'join', null],
      [gone.user.id, 'join', null],
    ]);
    expect((await historyOf(other.owner, other.chatId)).slice(0, 2)).toEqual([
      [gone.user.id, 'leave', null],
      [gone.user.id, 'join', null],
    ]);

    // By an Admin: the leave names it.
    const admin = await member(app, { level: PermissionLevel.ADMIN });
    const next = await member(app);
    expect((await join(next, { chat_id: chatId })).ok).toBe(true);
    const res = await admin.client.post(`/v1/admin/users/${next.user.id}/delete`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect((await historyOf(owner, chatId))[0]).toEqual([next.user.id, 'leave', admin.user.id]);
  });
});
