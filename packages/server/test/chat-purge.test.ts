import { afterAll, beforeAll, expect, it } from 'vitest';
import { CHAT_PURGE_AFTER_MS, DIRECT_SWEEP_TASK } from '../src/modules/chats/chats.direct.js';
import { FAILED_CHAT_RETRY_MS } from '../src/modules/chats/chats.purge.js';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyedChat, member } from './support/chat-flows.js';
import { countRows, failDeletes } from './support/faults.js';
import { operator } from './support/flows.js';
import { captureLog, LEVEL } from './support/logs.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
const clock = new FakeClock(Date.now());
/** The app's log: what the sweep logs of a chat it could not purge. */
const logged = captureLog();

beforeAll(async () => {
  app = await startApp({ clock, logger: logged.log });
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

const sweep = (opts?: { batch?: number; maxBatches?: number; purgeRows?: number }) =>
  app.services.chats.sweepDirect(opts);
/** Rows of `table` that belong to chat `chatId`. */
const rowsOf = (table: string, chatId: number) =>
  countRows(app, `select count(*) as n from ${table} where chat_id = ${chatId}`);
const CHAT_TABLES = ['messages', 'key_envelopes', 'chat_members', 'chat_activity', 'chat_invites'];

/** A keyed chat with a second member, `sent` messages, an invite and a chat mute given in it. */
async function usedChat(type: 'public' | 'private', sent: number) {
  const chat = await keyedChat(app, type);
  const { owner, chatId, chatKey, epoch } = chat;
  const guest = await member(app);
  const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
  expect(invite.status).toBe(200);
  expect((await join(guest, { invite: invite.body.invite.code })).ok).toBe(true);
  for (let i = 0; i < sent; i++) {
    const res = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch, `m${i}`),
    });
    expect(res.status).toBe(200);
  }
  const mute = await owner.client.post(`/v1/portal/chats/${chatId}/mute`, { user_id: guest.user.id, duration: 300 });
  expect(mute.status).toBe(200);
  return { ...chat, guest };
}

describeApp('the purge of deleted chats', () => {
  it('deletes public and private chats 7 days after their deletion, with everything in them', async () => {
    // Whatever earlier tests left due is handled first.
    await sweep({ batch: 1000, maxBatches: 100 });
    const pub = await usedChat('public', 3);
    const priv = await usedChat('private', 2);
    const kept = await usedChat('public', 1);
    expect((await pub.owner.client.post(`/v1/portal/chats/${pub.chatId}/delete`, {})).status).toBe(200);
    expect((await operator(app).post(`/v1/admin/chats/${priv.chatId}/delete`)).status).toBe(200);
    for (const table of CHAT_TABLES) expect(await rowsOf(table, pub.chatId), table).toBeGreaterThan(0);

    clock.advance(CHAT_PURGE_AFTER_MS - 1);
    expect(await sweep()).toMatchObject({ cleared: 0, purged: 0 });
    expect(await rowsOf('messages', pub.chatId)).toBe(4); // 3 and the mute's system message
    clock.advance(1);
    expect(await sweep()).toMatchObject({ purged: 2 });
    for (const chatId of [pub.chatId, priv.chatId]) {
      expect(await countRows(app, `select count(*) as n from chats where id = ${chatId}`)).toBe(0);
      for (const table of CHAT_TABLES) expect(await rowsOf(table, chatId), table).toBe(0);
      // The punishment stays in the user's history with the bare chat id; the audit log is kept.
      expect(await rowsOf('moderation_actions', chatId)).toBe(1);
    }
    expect(
      await countRows(
        app,
        `select count(*) as n from audit_log where code = 603 and data->>'chat_id' = '${priv.chatId}'`,
      ),
    ).toBe(1);
    // The live chat and the users are untouched (their sessions have expired by now).
    expect(
      await countRows(app, `select count(*) as n from chats where id = ${kept.chatId} and deleted_at is null`),
    ).toBe(1);
    for (const table of CHAT_TABLES) expect(await rowsOf(table, kept.chatId), table).toBeGreaterThan(0);
    const users = [pub.owner, pub.guest, priv.owner].map((m) => m.user.id).join(',');
    expect(await countRows(app, `select count(*) as n from users where id in (${users})`)).toBe(3);
  });

  it('takes a chat’s rows apart in bounded batches, members and history too, before the chat itself', async () => {
    await sweep({ batch: 1000, maxBatches: 100 });
    const big = await usedChat('public', 5);
    const invite = await big.owner.client.post(`/v1/portal/chats/${big.chatId}/invites/create`, {});
    for (let i = 0; i < 4; i++)
      expect((await join(await member(app), { invite: invite.body.invite.code })).ok).toBe(true);
    expect((await big.owner.client.post(`/v1/portal/chats/${big.chatId}/delete`, {})).status).toBe(200);
    const before = new Map<string, number>();
    for (const table of CHAT_TABLES) before.set(table, await rowsOf(table, big.chatId));
    // Members and history span more than one tick of 2 statements of 2 rows; every table fits in two.
    expect(before.get('chat_members')).toBe(6);
    expect(before.get('chat_activity')).toBeGreaterThan(4);
    for (const [table, n] of before) expect(n, table).toBeLessThanOrEqual(8);
    clock.advance(CHAT_PURGE_AFTER_MS);
    const left = (n: number, ticks: number) => Math.max(n - 4 * ticks, 0);
    const clearedIn = (tick: number) =>
      [...before.values()].reduce((sum, n) => sum + left(n, tick - 1) - left(n, tick), 0);

    expect(await sweep({ purgeRows: 2, maxBatches: 2 })).toMatchObject({ cleared: clearedIn(1), purged: 0 });
    for (const [table, n] of before) expect(await rowsOf(table, big.chatId), table).toBe(left(n, 1));
    expect(await countRows(app, `select count(*) as n from chats where id = ${big.chatId}`)).toBe(1);
    expect(await sweep({ purgeRows: 2, maxBatches: 2 })).toMatchObject({ cleared: clearedIn(2), purged: 1 });
    for (const table of CHAT_TABLES) expect(await rowsOf(table, big.chatId), table).toBe(0);
    expect(await countRows(app, `select count(*) as n from chats where id = ${big.chatId}`)).toBe(0);
  });

  it('purges the chats whose rows are gone while another chat’s rows in one table cannot be deleted', async () => {
    await sweep({ batch: 1000, maxBatches: 100 });
    const stuck = await usedChat('public', 2);
    const empty = await keyedChat(app, 'public');
    for (const { owner, chatId } of [stuck, empty])
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/delete`, {})).status).toBe(200);
    // The chat whose rows go is one with no messages: the messages' clear fails for both at once.
    expect(await rowsOf('messages', empty.chatId)).toBe(0);
    expect(await rowsOf('key_envelopes', empty.chatId)).toBeGreaterThan(0);
    clock.advance(CHAT_PURGE_AFTER_MS);
    const lift = await failDeletes(app, 'messages', `old.chat_id = ${stuck.chatId}`);
    try {
      expect(await sweep()).toMatchObject({ purged: 1 });
    } finally {
      await lift();
    }
    expect(await countRows(app, `select count(*) as n from chats where id = ${empty.chatId}`)).toBe(0);
    // The other chat keeps only the rows that could not go, and goes once they can.
    expect(await rowsOf('messages', stuck.chatId)).toBeGreaterThan(0);
    for (const table of CHAT_TABLES.filter((t) => t !== 'messages'))
      expect(await rowsOf(table, stuck.chatId), table).toBe(0);
    clock.advance(FAILED_CHAT_RETRY_MS);
    expect(await sweep()).toMatchObject({ purged: 1 });
    expect(await countRows(app, `select count(*) as n from chats where id = ${stuck.chatId}`)).toBe(0);
  });

  /** The lines the lifecycle sweep logged since `from` (an index into the captured log). */
  const sweepLines = (from: number) =>
    logged
      .lines()
      .slice(from)
      .filter((line) => line.task === DIRECT_SWEEP_TASK);

  it('clears and purges the other due chats in the same sweep when one chat’s rows in a table cannot be deleted', async () => {
    await sweep({ batch: 1000, maxBatches: 100 });
    const stuck = await usedChat('public', 2);
    const other = await usedChat('private', 2);
    for (const { owner, chatId } of [stuck, other])
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/delete`, {})).status).toBe(200);
    clock.advance(CHAT_PURGE_AFTER_MS);
    const from = logged.lines().length;
    const lift = await failDeletes(app, 'messages', `old.chat_id = ${stuck.chatId}`);
    try {
      expect(await sweep()).toMatchObject({ purged: 1 });
    } finally {
      await lift();
    }
    expect(await countRows(app, `select count(*) as n from chats where id = ${other.chatId}`)).toBe(0);
    for (const table of CHAT_TABLES) expect(await rowsOf(table, other.chatId), table).toBe(0);
    // The chat that failed keeps only the messages that could not go, and the failure is logged
    // with its id and step, the database's error as the cause.
    expect(await rowsOf('messages', stuck.chatId)).toBe(3);
    for (const table of CHAT_TABLES.filter((t) => t !== 'messages'))
      expect(await rowsOf(table, stuck.chatId), table).toBe(0);
    const lines = sweepLines(from);
    expect(lines).toEqual([
      expect.objectContaining({
        level: LEVEL.error,
        msg: 'background task failed',
        err: expect.objectContaining({
          errors: [expect.objectContaining({ step: 'clear messages', chatId: stuck.chatId, cause: expect.anything() })],
        }),
      }),
    ]);
    expect(JSON.stringify(lines[0]?.err)).toContain('injected fault');
    // Still due, held out of this node's sweeps for FAILED_CHAT_RETRY_MS: then purged once its rows can go.
    expect(await sweep()).toMatchObject({ purged: 0 });
    expect(await rowsOf('messages', stuck.chatId)).toBe(3);
    clock.advance(FAILED_CHAT_RETRY_MS);
    expect(await sweep()).toMatchObject({ purged: 1 });
    expect(await countRows(app, `select count(*) as n from chats where id = ${stuck.chatId}`)).toBe(0);
  });

  it('purges the other emptied chats in the same sweep when one chat’s own row cannot be deleted', async () => {
    await sweep({ batch: 1000, maxBatches: 100 });
    const stuck = await keyedChat(app, 'public');
    const other = await keyedChat(app, 'public');
    for (const { owner, chatId } of [stuck, other])
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/delete`, {})).status).toBe(200);
    clock.advance(CHAT_PURGE_AFTER_MS);
    const from = logged.lines().length;
    const lift = await failDeletes(app, 'chats', `old.id = ${stuck.chatId}`);
    try {
      expect(await sweep()).toMatchObject({ purged: 1 });
    } finally {
      await lift();
    }
    expect(await countRows(app, `select count(*) as n from chats where id = ${other.chatId}`)).toBe(0);
    expect(await countRows(app, `select count(*) as n from chats where id = ${stuck.chatId}`)).toBe(1);
    expect(sweepLines(from)).toEqual([
      expect.objectContaining({
        level: LEVEL.error,
        msg: 'background task failed',
        err: expect.objectContaining({
          errors: [expect.objectContaining({ step: 'purge', chatId: stuck.chatId, cause: expect.anything() })],
        }),
      }),
    ]);
    clock.advance(FAILED_CHAT_RETRY_MS);
    expect(await sweep()).toMatchObject({ purged: 1 });
    expect(await countRows(app, `select count(*) as n from chats where id = ${stuck.chatId}`)).toBe(0);
  });

  it('reaches the chats behind a batch’s worth of older ones that each fail alone, in the same sweep', async () => {
    await sweep({ batch: 1000, maxBatches: 100 });
    const stuck = [await usedChat('public', 2), await usedChat('public', 2)];
    const other = await usedChat('private', 2);
    for (const { owner, chatId } of [...stuck, other]) {
      expect((await owner.client.post(`/v1/portal/chats/${chatId}/delete`, {})).status).toBe(200);
      clock.advance(1_000);
    }
    clock.advance(CHAT_PURGE_AFTER_MS);
    const lift = await failDeletes(app, 'messages', `old.chat_id in (${stuck.map((c) => c.chatId).join(', ')})`);
    try {
      // Two chats a batch: the two oldest fail alone, and the list read again names the third.
      expect(await sweep({ batch: 2 })).toMatchObject({ purged: 1 });
    } finally {
      await lift();
    }
    expect(await countRows(app, `select count(*) as n from chats where id = ${other.chatId}`)).toBe(0);
    for (const { chatId } of stuck) expect(await rowsOf('messages', chatId)).toBe(3);
    clock.advance(FAILED_CHAT_RETRY_MS);
    expect(await sweep()).toMatchObject({ purged: 2 });
  });
});
