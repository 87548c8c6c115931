import { Limits } from '@parlor/protocol';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { CHAT_PURGE_AFTER_MS } from '../src/modules/chats/chats.direct.js';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { countRows } from './support/faults.js';
import { type LoggedIn, login } from './support/flows.js';

let app: TestApp;
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => app?.close());

const sweep = (opts?: { batch?: number; maxBatches?: number }) => app.services.chats.sweepDirect(opts);
/** Rows of `table` that belong to chat `chatId`. */
const rowsOf = (table: string, chatId: number) =>
  countRows(app, `select count(*) as n from ${table} where chat_id = ${chatId}`);

async function matched(a: LoggedIn, b: LoggedIn): Promise<number> {
  const made = await app.services.chats.createDirect([a.user.id, b.user.id], ['lifecycle']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  return made.chat.id;
}

describeApp('the direct-chat lifecycle sweep', () => {
  it('ends both memberships when it removes a chat, and deletes the chat and its rows 7 days later', async () => {
    const [a, b] = [await login(app), await login(app)];
    const chatId = await matched(a, b);
    clock.advance(Limits.DIRECT_CHAT_TTL_MS);
    await sweep();
    clock.advance(Limits.DIRECT_ARCHIVE_TTL_MS);
    await sweep();
    expect((await a.client.get(`/v1/portal/chats/${chatId}`)).status).toBe(404);
    // The users' chat lists (read on every socket connect) no longer reach the removed chat's rows.
    expect(await rowsOf('chat_members', chatId)).toBe(2);
    expect(
      await countRows(app, `select count(*) as n from chat_members where chat_id = ${chatId} and left_at is null`),
    ).toBe(0);
    expect(await rowsOf('messages', chatId)).toBe(1);

    clock.advance(CHAT_PURGE_AFTER_MS - 1);
    expect((await sweep()).purged).toBe(0);
    expect(await rowsOf('chat_activity', chatId)).toBe(2);
    clock.advance(1);
    expect((await sweep()).purged).toBe(1);
    expect(await countRows(app, `select count(*) as n from chats where id = ${chatId}`)).toBe(0);
    for (const table of ['messages', 'chat_members', 'chat_activity', 'key_envelopes', 'chat_invites'])
      expect(await rowsOf(table, chatId), table).toBe(0);
    // The users stay, and their lists answer.
    expect((await a.client.get('/v1/portal/chats')).status).toBe(200);
    expect((await b.client.get('/v1/users/me')).status).toBe(200);
  });

  it('handles more than one batch a tick while batches come back full, up to maxBatches', async () => {
    // Whatever earlier tests left due is handled first.
    await sweep({ batch: 1000, maxBatches: 100 });
    // A pair each: a free account has one active direct chat at a time.
    for (let i = 0; i < 5; i++) await matched(await login(app), await login(app));
    clock.advance(Limits.DIRECT_CHAT_TTL_MS);
    expect((await sweep({ batch: 2, maxBatches: 2 })).archived).toBe(4);
    expect((await sweep({ batch: 2, maxBatches: 2 })).archived).toBe(1);
    clock.advance(Limits.DIRECT_ARCHIVE_TTL_MS);
    expect((await sweep({ batch: 2, maxBatches: 5 })).removed).toBe(5);
    clock.advance(CHAT_PURGE_AFTER_MS);
    expect((await sweep({ batch: 2, maxBatches: 5 })).purged).toBe(5);
  });
});
