import { INT32_MAX, Limits } from '@parlor/protocol';
import { generateKeyPair, publicKeyToBase64 } from '@parlor/sdk';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BUNDLE_CT_MIN_BYTES } from '../src/modules/messages/messages.bundle.js';
import { messageId } from '../src/modules/messages/messages.presenter.js';
import { makeMessagesService } from '../src/modules/messages/messages.service.js';
import { makeMessagesStore } from '../src/modules/messages/messages.store.js';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import {
  bundle,
  join,
  keyEpoch,
  keyedChat,
  type Member,
  member,
  receiveKey,
  sessionIdOf,
  shareKey,
} from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows, failInserts } from './support/faults.js';
import { operator } from './support/flows.js';
import { hold, lockWaitersOr, racingUserRow, whileHeldAdvancing } from './support/pg-locks.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

/** Canonical base64 of `n` zero bytes: a `ct` the server takes (it cannot read inside). */
const zeros = (n: number) => Buffer.alloc(n).toString('base64');
const CT = zeros(BUNDLE_CT_MIN_BYTES);

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

describeApp('POST /v1/portal/chats/{chat_id}/messages', () => {
  it('does not count sends refused by the per-chat limit against the global one', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const content = bundle(chatKey, chatId, epoch, 'flood');
    const post = () => owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content });
    for (let i = 0; i < Limits.MESSAGES_PER_CHAT; i++) expect((await post()).status).toBe(200);
    // Enough refusals that, were they counted, the global allowance would be gone.
    const refusals = Limits.MESSAGES_GLOBAL - Limits.MESSAGES_PER_CHAT + 1;
    for (let i = 0; i < refusals; i++) expect((await post()).status).toBe(429);
    const other = (await owner.client.post('/v1/portal/chats/create', { name: 'Other', type: 'public' })).body.chat.id;
    expect((await join(owner, { chat_id: other })).ok).toBe(true);
    const key = await keyEpoch(owner, other);
    const res = await owner.client.post(`/v1/portal/chats/${other}/messages`, {
      content: bundle(key.chatKey, other, key.epoch, 'elsewhere'),
    });
    expect(res.status).toBe(200);
  });

  it(`allows ${Limits.MESSAGES_GLOBAL} messages per window across chats and answers 429 to the next`, async () => {
    // Spread over enough chats that none reaches its own limit, the next send included.
    const chats = Math.ceil((Limits.MESSAGES_GLOBAL + 1) / Limits.MESSAGES_PER_CHAT);
    expect(chats).toBeLessThanOrEqual(Limits.CHAT_SLOTS_ADMIN);
    const first = await keyedChat(app);
    const { owner } = first;
    const keyed = [first];
    while (keyed.length < chats) {
      const created = await owner.client.post('/v1/portal/chats/create', {
        name: `Chat ${keyed.length}`,
        type: 'public',
      });
      expect(created.status).toBe(200);
      const chatId: number = created.body.chat.id;
      expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
      keyed.push({ owner, chatId, ...(await keyEpoch(owner, chatId)) });
    }
    const send = (i: number) => {
      const { chatId, chatKey, epoch } = keyed[i % chats] as (typeof keyed)[number];
      return owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
        content: bundle(chatKey, chatId, epoch, `m${i}`),
      });
    };
    // Sent together, so the whole allowance is spent well inside one window.
    const accepted = await Promise.all(Array.from({ length: Limits.MESSAGES_GLOBAL }, (_, i) => send(i)));
    expect(accepted.map((r) => r.status)).toEqual(Array(Limits.MESSAGES_GLOBAL).fill(200));
    const next = await send(Limits.MESSAGES_GLOBAL);
    expect(next.status).toBe(429);
    expect(next.body).toEqual({
      code: 'ERR_RATE_LIMITED',
      message: expect.any(String),
      retry_after: expect.any(Number),
    });
    expect(Number.isInteger(next.body.retry_after)).toBe(true);
    expect(next.body.retry_after).toBeGreaterThanOrEqual(1);
    expect(next.body.retry_after).toBeLessThanOrEqual(Limits.MESSAGE_WINDOW_MS / 1000);
  });

  it('gives concurrent sends distinct, increasing ids, and history lists them in that order', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const content = bundle(chatKey, chatId, epoch, 'race');
    const sent = await Promise.all(
      Array.from({ length: 10 }, () => owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content })),
    );
    const ids = sent.map((r) => r.body.id as string);
    expect(new Set(ids).size).toBe(10);
    const page = await owner.client.get(`/v1/portal/chats/${chatId}/messages?limit=10`);
    const listed = page.body.messages.map((m: { id: string }) => m.id);
    const key = (id: string) => id.split('-').map(Number) as [number, number];
    const newestFirst = [...ids].sort((a, b) => key(b)[0] - key(a)[0] || key(b)[1] - key(a)[1]);
    expect(listed).toEqual(newestFirst);
  });

  it('answers a chat-banned sender 403 ERR_CHAT_BANNED (spec 7), and ERR_NOT_CHAT_MEMBER once unbanned', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    await shareKey(owner, { chatId, chatKey, epoch }, [guest]);
    // The ban ends the membership in its transaction: the ban is checked first, or it is never told.
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: guest.user.id })).status).toBe(200);
    const send = () =>
      guest.client.post(`/v1/portal/chats/${chatId}/messages`, { content: bundle(chatKey, chatId, epoch, 'x') });
    const banned = await send();
    expect([banned.status, banned.body.code]).toEqual([403, 'ERR_CHAT_BANNED']);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/unban`, { user_id: guest.user.id })).status).toBe(200);
    const unbanned = await send();
    expect([unbanned.status, unbanned.body.code]).toEqual([403, 'ERR_NOT_CHAT_MEMBER']);
  });
});

describeApp('group commit of sends', () => {
  const mute = (userId: number, chatId: number) =>
    app.database.db.execute(
      `insert into moderation_actions (user_id, chat_id, action_type, expires_at, created_at) values (${userId}, ${chatId}, 'CHAT_MUTE', now() + interval '90 seconds', now())` as never,
    );

  it('writes a batch in one statement: the accepted take consecutive ids in order, the refused none', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const keyed = await member(app);
    await join(keyed, { chat_id: chatId });
    const muted = await member(app);
    await join(muted, { chat_id: chatId });
    const keyless = await member(app); // joined after the epoch was keyed: no envelope for its session
    await join(keyless, { chat_id: chatId });
    const outsider = await member(app);
    // Share the key with `keyed` and `muted` only (as a holder does on portal:key_added).
    await shareKey(owner, { chatId, chatKey, epoch }, [keyed, muted]);
    expect((await receiveKey(keyed, chatId)).epoch).toBe(epoch);
    await mute(muted.user.id, chatId);

    const store = makeMessagesStore(app.database.db);
    const item = (m: typeof owner, text: string) => ({ userId: m.user.id, sessionId: m.sessionId, content: text });
    const now = new Date();
    const ids = await store.sendBatch({
      chatId,
      epoch,
      now,
      items: [
        item(owner, 'a'),
        item(muted, 'b'),
        item(keyed, 'c'),
        item(keyless, 'd'),
        item(outsider, 'e'),
        item(owner, 'f'),
      ],
    });
    expect(ids.map((id) => id !== undefined)).toEqual([true, false, true, false, false, true]);
    const [a, , c, , , f] = ids;
    expect(a?.ms).toBe(now.getTime());
    expect([c?.seq, f?.seq]).toEqual([(a?.seq ?? 0) + 1, (a?.seq ?? 0) + 2]);
    const page = await owner.client.get(`/v1/portal/chats/${chatId}/messages?limit=10`);
    expect(page.body.messages.map((m: { content: string }) => m.content)).toEqual(['f', 'c', 'a']);
    // A wrong epoch refuses the whole batch; nothing is written and the chat's counter does not move.
    const stale = await store.sendBatch({ chatId, epoch: epoch + 1, now, items: [item(owner, 'g')] });
    expect(stale).toEqual([undefined]);
    const next = await store.sendBatch({ chatId, epoch, now, items: [item(owner, 'h')] });
    expect(next[0]?.seq).toBe((f?.seq ?? 0) + 1);
  });

  it('answers each of many concurrent senders with its own id or its own refusal', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const others = await Promise.all(Array.from({ length: 4 }, () => member(app)));
    for (const m of others) await join(m, { chat_id: chatId });
    await shareKey(owner, { chatId, chatKey, epoch }, others);
    const mutedOne = others[0] as (typeof others)[number];
    await mute(mutedOne.user.id, chatId);
    const senders = [owner, ...others];
    const sent = await Promise.all(
      senders.flatMap((m) =>
        [1, 2, 3].map(async (i) => ({
          m,
          res: await m.client.post(`/v1/portal/chats/${chatId}/messages`, {
            content: bundle(chatKey, chatId, epoch, `${m.user.id}:${i}`),
          }),
        })),
      ),
    );
    for (const { m, res } of sent) {
      if (m === mutedOne) expect(res.body).toMatchObject({ code: 'ERR_MUTED', ttl: expect.any(Number) });
      else expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    const ids = sent.filter((s) => s.res.status === 200).map((s) => s.res.body.id as string);
    expect(new Set(ids).size).toBe(12);
    for (const id of ids) await owner.socket.next('message:new', (p) => p.id === id);
    const page = await owner.client.get(`/v1/portal/chats/${chatId}/messages?limit=20`);
    expect(page.body.messages.map((m: { id: string }) => m.id).sort()).toEqual([...ids].sort());
  });

  it('fails only the send the database refuses; the others of its batch are stored, answered and published', async () => {
    const key = await keyedChat(app);
    const { owner, chatId, chatKey, epoch } = key;
    const others = [await member(app), await member(app), await member(app)];
    for (const m of others) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    await shareKey(owner, key, others);
    // The service as wiring/chats.ts makes it, over the app's database, state and sockets; called
    // in one turn, so its sends are one batch, one statement. Every send here is written or fails
    // in the database: none is refused by a check, which would ask `access` why.
    const notAsked = async (): Promise<never> => {
      throw new Error('no send of this test is refused by a check');
    };
    const messages = makeMessagesService({
      store: makeMessagesStore(app.database.db),
      clock: { now: () => new Date() },
      state: app.state,
      realtime: app.services.realtime,
      access: { chat: notAsked, isMember: notAsked, hasKey: notAsked },
    });
    const sender = (m: Member) => ({ userId: m.user.id, sessionId: m.sessionId, permissionLevel: 0 });
    const poison = bundle(chatKey, chatId, epoch, 'poison');
    // The database refuses that one row, as a constraint or a failing disk would.
    const lift = await failInserts(app, 'messages', `NEW.content = '${poison}'`);
    let results: PromiseSettledResult<{ id: string }>[];
    try {
      results = await Promise.allSettled([
        messages.send(sender(owner), chatId, bundle(chatKey, chatId, epoch, 'before')),
        messages.send(sender(others[0] as Member), chatId, poison),
        ...others.map((m) => messages.send(sender(m), chatId, bundle(chatKey, chatId, epoch, 'after'))),
      ]);
    } finally {
      await lift();
    }
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled', 'fulfilled']);
    // Its own error (Drizzle's, around the database's), not another send's.
    expect((results[1] as PromiseRejectedResult).reason.cause?.message).toBe('injected fault');
    const ids = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.id] : []));
    for (const id of ids) await (others[2] as Member).socket.next('message:new', (m) => m.id === id);
    const page = await owner.client.get(`/v1/portal/chats/${chatId}/messages?limit=10`);
    const users = page.body.messages.filter((m: { type: string }) => m.type === 'user');
    expect(users.map((m: { id: string }) => m.id)).toEqual([...ids].reverse()); // in arrival order
    const sql = `select count(*) as n from messages where chat_id = ${chatId} and type = 'user'`;
    expect(await countRows(app, sql)).toBe(4);
  });
});

describeApp('GET /v1/portal/chats/{chat_id}/messages', () => {
  it('answers a page in the same shape as message:new, system messages included', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const sent = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch, 'hello'),
    });
    const live = await owner.socket.next('message:new', (m) => m.id === sent.body.id);
    const guest = await member(app);
    await join(guest, { chat_id: chatId });
    expect(await guest.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    const system = await owner.socket.next('message:new', (m) => m.type === 'system' && m.system?.kind === 'leave');
    const page = await owner.client.get(`/v1/portal/chats/${chatId}/messages`);
    expect(page.status).toBe(200);
    expect(page.body.messages.slice(0, 2)).toEqual([system, live]);
    expect(system.system).toEqual({ kind: 'leave', user_id: guest.user.id });
  });

  it('answers concurrent readers of one chat each with its own page and its own right to read', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) {
      const res = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
        content: bundle(chatKey, chatId, epoch, `m${i}`),
      });
      ids.push(res.body.id);
    }
    const newestFirst = [...ids].reverse();
    const reader = await member(app);
    await join(reader, { chat_id: chatId });
    const moderator = await member(app, { level: 1 }); // reads public chats without joining
    const outsider = await member(app);
    const url = `/v1/portal/chats/${chatId}/messages`;
    // Fired together, so the reads of one turn share a statement; each keeps its own cursor and check.
    const [a, b, c, d, e] = await Promise.all([
      owner.client.get(`${url}?limit=5`),
      reader.client.get(`${url}?before=${ids[6]}&limit=3`),
      moderator.client.get(`${url}?before=${ids[2]}`),
      outsider.client.get(`${url}?limit=2`),
      reader.client.get(`${url}?before=${ids[0]}`),
    ]);
    const listed = (r: typeof a) => r.body.messages.map((m: { id: string }) => m.id);
    expect(listed(a)).toEqual(newestFirst.slice(0, 5));
    expect(listed(b)).toEqual(['5', '4', '3'].map((i) => ids[Number(i)]));
    expect(listed(c).slice(0, 2)).toEqual([ids[1], ids[0]]);
    expect([d.status, d.body.code]).toEqual([403, 'ERR_NOT_CHAT_MEMBER']);
    expect(listed(e).every((id: string) => !ids.includes(id))).toBe(true); // only what came before: the chat's system messages
  });

  it('tells why it refuses: not a member, a private chat, a chat that is gone; an empty page is a page', async () => {
    const { owner, chatId } = await keyedChat(app);
    const outsider = await member(app);
    const url = `/v1/portal/chats/${chatId}/messages`;
    expect((await outsider.client.get(url)).body.code).toBe('ERR_NOT_CHAT_MEMBER');
    const priv = (await owner.client.post('/v1/portal/chats/create', { name: 'P', type: 'private' })).body.chat.id;
    const privUrl = `/v1/portal/chats/${priv}/messages`;
    expect((await outsider.client.get(privUrl)).body.code).toBe('ERR_CANNOT_BROWSE_PRIVATE');
    expect((await owner.client.get(`${url}?before=1-0`)).body).toEqual({ messages: [] });
    expect((await owner.client.post(`/v1/portal/chats/${priv}/delete`, {})).status).toBe(200);
    const gone = await owner.client.get(privUrl);
    expect([gone.status, gone.body.code]).toEqual([404, 'ERR_CHAT_NOT_FOUND']);
  });

  it('pages through messages of one millisecond without gaps or repeats; 50 by default, at most 100', async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    // One batch: 101 messages of one millisecond, told apart by their sequence numbers.
    const items = Array.from({ length: 101 }, (_, i) => ({
      userId: owner.user.id,
      sessionId: owner.sessionId,
      content: `c${i}`,
    }));
    const sent = await makeMessagesStore(app.database.db).sendBatch({ chatId, epoch, now: new Date(), items });
    const newestFirst = sent.map((id) => (id ? messageId(id) : 'refused')).reverse();
    expect(new Set(sent.map((id) => id?.ms)).size).toBe(1);
    const page = async (q: string): Promise<string[]> =>
      (await owner.client.get(`/v1/portal/chats/${chatId}/messages?${q}`)).body.messages.map(
        (m: { id: string }) => m.id,
      );
    expect(await page('')).toEqual(newestFirst.slice(0, 50));
    expect(await page('limit=100')).toEqual(newestFirst.slice(0, 100));
    const seen: string[] = [];
    for (let before = ''; seen.length < 101; ) {
      const next = await page(`limit=7${before}`);
      expect(next.length).toBeGreaterThan(0);
      seen.push(...next);
      before = `&before=${next.at(-1)}`;
    }
    expect(seen.slice(0, 101)).toEqual(newestFirst);
    expect(new Set(seen).size).toBe(seen.length);
  });

  it('answers 400 ERR_VALIDATION to a malformed cursor or limit, and a page to any well-formed cursor', async () => {
    const { owner, chatId } = await keyedChat(app);
    const url = `/v1/portal/chats/${chatId}/messages`;
    for (const q of ['limit=1.5', 'before=', 'before=1-2-3', 'before=-1', 'before=1-0&before=2-0', 'limit=1&limit=2']) {
      const res = await owner.client.get(`${url}?${q}`);
      expect([q, res.status, res.body.code]).toEqual([q, 400, 'ERR_VALIDATION']);
    }
    // A cursor past any id (ms beyond 2^53 included) is a page, not a 500.
    for (const q of ['limit=1', 'before=0-0', 'before=9999999999999999-999999999']) {
      const res = await owner.client.get(`${url}?${q}`);
      expect([q, res.status]).toEqual([q, 200]);
    }
  });
});

describeApp('POST /v1/portal/chats/{chat_id}/messages/delete', () => {
  it('deletes a message named twice once, and passes over the id of a message of another chat', async () => {
    const [here, there] = [await keyedChat(app), await keyedChat(app)];
    const [mine, theirs] = [await say(here.owner, here), await say(there.owner, there)];
    const url = `/v1/portal/chats/${here.chatId}/messages/delete`;
    // An Admin (keyedChat's owner), who could delete it in its own chat.
    expect((await here.owner.client.post(url, { ids: [theirs] })).body).toEqual({ deleted: 0, deleted_ids: [] });
    expect(await idsIn(there.owner, there.chatId)).toContain(theirs);
    expect((await here.owner.client.post(url, { ids: [mine, mine, mine] })).body).toEqual({
      deleted: 1,
      deleted_ids: [mine],
    });
  });

  it('tells message:bulk_deleted to the members in the room, not to one who left it', async () => {
    const { owner, chatId } = await keyedChat(app);
    const [stay, gone] = [await member(app), await member(app)];
    for (const m of [stay, gone]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    expect(await gone.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    const key = { chatId, ...(await keyEpoch(owner, chatId)) }; // the leave raised the epoch
    const id = await say(owner, key);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [id] })).body.deleted).toBe(1);
    const told = { room_id: chatId, deleted_ids: [id], deleted_by: owner.user.id };
    expect(await stay.socket.next('message:bulk_deleted', (p) => p.deleted_ids[0] === id)).toEqual(told);
    // A barrier: a notification to the one who left, sent after the delete through the same emitter
    // (to a room of its socket). Once it has arrived, a message:bulk_deleted sent to it would have too.
    const note = await operator(app).post('/v1/admin/notifications', {
      title: 'After the delete',
      body: 'x',
      type: 'info',
      user_id: gone.user.id,
    });
    expect(note.status).toBe(200);
    await gone.socket.next('notification:new', (n) => n.title === 'After the delete');
    expect(gone.socket.received.filter((r) => r.event === 'message:bulk_deleted')).toEqual([]);
  });
});

describeApp('the bundle epoch', () => {
  it(`is a bundle up to ${INT32_MAX} (then 403 ERR_EPOCH_MISMATCH as any other epoch); above, 422 ERR_INVALID_BUNDLE`, async () => {
    const { owner, chatId } = await keyedChat(app);
    const send = (epoch: number | string) =>
      owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content: `{"v":2,"epoch":${epoch},"ct":"${CT}"}` });
    const at = async (epoch: number | string) => {
      const res = await send(epoch);
      return [res.status, res.body.code];
    };
    expect(await at(INT32_MAX)).toEqual([403, 'ERR_EPOCH_MISMATCH']);
    expect(await at(INT32_MAX + 1)).toEqual([422, 'ERR_INVALID_BUNDLE']);
    expect(await at(3_000_000_000)).toEqual([422, 'ERR_INVALID_BUNDLE']);
    expect(await at('2147483648.0')).toEqual([422, 'ERR_INVALID_BUNDLE']);
    expect(await at('1e300')).toEqual([422, 'ERR_INVALID_BUNDLE']);
  });
});

describeApp('the bundle shape', () => {
  it(`takes a ct of ${BUNDLE_CT_MIN_BYTES} bytes and answers 422 ERR_INVALID_BUNDLE to one byte less`, async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const send = (ct: string) =>
      owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content: `{"v":2,"epoch":${epoch},"ct":"${ct}"}` });
    expect((await send(zeros(BUNDLE_CT_MIN_BYTES))).status).toBe(200);
    const short = await send(zeros(BUNDLE_CT_MIN_BYTES - 1));
    expect([short.status, short.body.code]).toEqual([422, 'ERR_INVALID_BUNDLE']);
  });

  it('answers 422 ERR_INVALID_BUNDLE to every text but the one the SDK writes, and stores none', async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const url = `/v1/portal/chats/${chatId}/messages`;
    const before = (await owner.client.get(url)).body.messages;
    const loose = [
      `{"v":2,"epoch":${epoch},"ct":"${CT.slice(0, -4)}AB=="}`, // non-canonical base64 (unused bits set)
      `{"v":2,"epoch":${epoch},"ct":"AAAA"}`, // 3 bytes: less than nonce + tag
      `{"v":2.0,"epoch":${epoch}.0,"ct":"${CT}"}`,
      `{"v":2,"epoch":${epoch}e0,"ct":"${CT}"}`,
      `{"v":2,"epoch":999,"epoch":${epoch},"ct":"${CT}"}`, // duplicate key
      `{"\\u0076":2,"epoch":${epoch},"ct":"${CT}"}`, // escaped key name
      `{"ct":"${CT}","epoch":${epoch},"v":2}`, // another key order
      ` {"v":2,"epoch":${epoch},"ct":"${CT}"} `, // surrounding whitespace
      `{"v": 2, "epoch": ${epoch}, "ct": "${CT}"}`,
    ];
    for (const content of loose) {
      const res = await owner.client.post(url, { content });
      expect([res.status, res.body.code], content).toEqual([422, 'ERR_INVALID_BUNDLE']);
    }
    expect((await owner.client.get(url)).body.messages).toEqual(before);
    expect((await owner.client.post(url, { content: `{"v":2,"epoch":${epoch},"ct":"${CT}"}` })).status).toBe(200);
  });
});

/** A chat owned by a User (a premium one: the chat slot), joined and keyed. */
async function usersChat(type: 'public' | 'private' = 'public') {
  const owner = await member(app);
  const grant = await operator(app).post('/v1/admin/subscriptions/grant', {
    user_id: owner.user.id,
    tier: 'PREMIUM',
    duration_days: 30,
  });
  expect(grant.status, JSON.stringify(grant.body)).toBe(200);
  const created = await owner.client.post('/v1/portal/chats/create', { name: 'Users', type });
  expect(created.status, JSON.stringify(created.body)).toBe(200);
  const chatId: number = created.body.chat.id;
  expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
  return { owner, chatId, ...(await keyEpoch(owner, chatId)) };
}

/** Members who join `chatId` and get its key from `holder`. */
async function joined(holder: Member, key: { chatId: number; chatKey: Uint8Array; epoch: number }, levels: number[]) {
  const members = [];
  for (const level of levels) {
    const m = await member(app, { level });
    expect((await join(m, { chat_id: key.chatId })).ok).toBe(true);
    members.push(m);
  }
  await shareKey(holder, key, members);
  return members;
}

const say = async (m: Member, key: { chatId: number; chatKey: Uint8Array; epoch: number }) => {
  const res = await m.client.post(`/v1/portal/chats/${key.chatId}/messages`, {
    content: bundle(key.chatKey, key.chatId, key.epoch, 'm'),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.id as string;
};

async function directChat(userIds: number[]): Promise<number> {
  const made = await app.services.chats.createDirect(userIds, ['messages']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  return made.chat.id;
}

const idsIn = async (m: Member, chatId: number) =>
  (await m.client.get(`/v1/portal/chats/${chatId}/messages?limit=100`)).body.messages.map((x: { id: string }) => x.id);

describeApp('deleting others\u2019 messages (spec 4.6 rule 2, moderation reach)', () => {
  it('answers 403 to a Moderator who is a member of a private chat, by id and with delete-last, and deletes nothing', async () => {
    const key = await keyedChat(app, 'private');
    const { owner, chatId } = key;
    const guest = await member(app);
    const mod = await member(app, { level: 1 });
    for (const m of [guest, mod]) {
      const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
      expect((await join(m, { invite: invite.body.invite.code })).ok).toBe(true);
    }
    await shareKey(owner, key, [guest, mod]);
    const [o1, g1, m1] = [await say(owner, key), await say(guest, key), await say(mod, key)];
    for (const ids of [[o1], [g1]]) {
      const res = await mod.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids });
      expect([res.status, res.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    }
    const last = await mod.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 100 });
    expect([last.status, last.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect(await idsIn(owner, chatId)).toEqual(expect.arrayContaining([o1, g1, m1]));
    // Its own messages stay its own to delete.
    const own = await mod.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [m1] });
    expect(own.body).toEqual({ deleted: 1, deleted_ids: [m1] });
  });

  it('answers 403 to a Moderator in a public chat whose owner is an Admin', async () => {
    const key = await keyedChat(app);
    const [guest] = await joined(key.owner, key, [0]);
    const g1 = await say(guest as Member, key);
    const mod = await member(app, { level: 1 });
    const byId = await mod.client.post(`/v1/portal/chats/${key.chatId}/messages/delete`, { ids: [g1] });
    expect([byId.status, byId.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    const last = await mod.client.post(`/v1/portal/chats/${key.chatId}/messages/delete-last`, { count: 1 });
    expect([last.status, last.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect(await idsIn(key.owner, key.chatId)).toContain(g1);
  });

  it('refuses by id, all or nothing, messages of users at or above the actor; delete-last passes over them', async () => {
    const key = await usersChat();
    const { owner, chatId } = key;
    const [guest, admin] = (await joined(owner, key, [0, 2])) as [Member, Member];
    const mod = await member(app, { level: 1 }); // acts in a public chat of a User without joining it
    const g1 = await say(guest, key);
    const a1 = await say(admin, key);
    const o1 = await say(owner, key);
    const g2 = await say(guest, key);
    for (const [who, ids] of [
      [mod, [a1]],
      [mod, [g1, a1]],
      [owner, [g2, a1]],
    ] as const) {
      const res = await who.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids });
      expect([res.status, res.body.code, res.body.message]).toEqual([
        403,
        'ERR_FORBIDDEN',
        'That user is out of your reach.',
      ]);
    }
    expect(await idsIn(owner, chatId)).toEqual(expect.arrayContaining([g1, a1, o1, g2]));
    // The newest three the Moderator may delete: the Admin's message is passed over and not counted.
    const last = await mod.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 3 });
    expect(last.status, JSON.stringify(last.body)).toBe(200);
    expect(last.body.deleted).toBe(3);
    expect([...last.body.deleted_ids].sort()).toEqual([g1, o1, g2].sort());
    const left = await idsIn(owner, chatId);
    expect(left).toContain(a1);
    for (const id of [g1, o1, g2]) expect(left).not.toContain(id);
    // A plain member deletes only its own; the Admin deletes it.
    const plain = await guest.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [a1] });
    expect([plain.status, plain.body.message]).toEqual([403, 'You may delete only your own messages.']);
    expect((await admin.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [a1] })).body).toEqual({
      deleted: 1,
      deleted_ids: [a1],
    });
  });
});

/**
 * A member at `level` as its session reads it, its stored level then changed to `stored` behind
 * this node's session cache (as by a commit on another node whose invalidation is still on its
 * way): docs/api.md, "Levels as they are at the commit".
 */
async function changedBehindCache(level: number, stored: number): Promise<Member> {
  const who = await member(app, { level });
  expect((await who.client.get('/v1/users/me')).body.user.permission_level).toBe(level);
  await app.database.db.execute(`update users set permission_level = ${stored} where id = ${who.user.id}` as never);
  expect((await who.client.get('/v1/users/me')).body.user.permission_level).toBe(level);
  return who;
}

describeApp('deleting others\u2019 messages: the moderator\u2019s level as stored', () => {
  it('answers 403 ERR_FORBIDDEN to an Admin demoted to User deleting another member\u2019s message in a private chat (by id, …/messages/delete-last), deleting nothing', async () => {
    const key = await keyedChat(app, 'private');
    const { owner, chatId } = key;
    const guest = await member(app);
    const invite = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {});
    expect((await join(guest, { invite: invite.body.invite.code })).ok).toBe(true);
    await shareKey(owner, key, [guest]);
    const g1 = await say(guest, key);
    const actor = await changedBehindCache(2, 0);
    const last = await actor.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 1 });
    expect([last.status, last.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    const byId = await actor.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [g1] });
    expect([byId.status, byId.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
    expect(await idsIn(guest, chatId)).toContain(g1);
  });

  it('reaches only the senders below the level as stored: an Owner demoted to Admin deletes no Admin\u2019s message', async () => {
    const key = await usersChat();
    const { owner, chatId } = key;
    const [guest, admin] = (await joined(owner, key, [0, 2])) as [Member, Member];
    const a1 = await say(admin, key);
    const g1 = await say(guest, key);
    const actor = await changedBehindCache(3, 2);
    const byId = await actor.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [a1] });
    expect([byId.status, byId.body.message]).toEqual([403, 'That user is out of your reach.']);
    // The newest two it may delete as an Admin: the guest's, and the Admin's is passed over.
    const last = await actor.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 2 });
    expect(last.body).toEqual({ deleted: 1, deleted_ids: [g1] });
    expect(await idsIn(owner, chatId)).toContain(a1);
  });
});

describeApp('deleting others\u2019 messages in direct chats (docs/api.md, Messages: Moderators there too)', () => {
  /** A direct chat of two Users, both in its room, each with a message in it. */
  const directWithMessages = async () => {
    const [a, b] = [await member(app), await member(app)];
    const chatId = await directChat([a.user.id, b.user.id]);
    for (const m of [a, b]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    const key = { chatId, ...(await keyEpoch(a, chatId)) };
    return { a, b, chatId, a1: await say(a, key), b1: await say(b, key) };
  };
  const refusal = (res: { status: number; body: { code?: string } }) => [res.status, res.body.code];

  it('lets a Moderator who is not in it delete by id and with delete-last, and tells the chat', async () => {
    const { a, b, chatId, a1, b1 } = await directWithMessages();
    const mod = await member(app, { level: 1 });
    // It may not read the chat (reading stays for members): it deletes as its moderator.
    expect(refusal(await mod.client.get(`/v1/portal/chats/${chatId}/messages`))).toEqual([
      403,
      'ERR_CANNOT_BROWSE_PRIVATE',
    ]);
    const byId = await mod.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [a1] });
    expect(byId.status, JSON.stringify(byId.body)).toBe(200);
    expect(byId.body).toEqual({ deleted: 1, deleted_ids: [a1] });
    const told = { room_id: chatId, deleted_ids: [a1], deleted_by: mod.user.id };
    expect(await b.socket.next('message:bulk_deleted', (p) => p.deleted_ids[0] === a1)).toEqual(told);
    const last = await mod.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 1 });
    expect(last.status, JSON.stringify(last.body)).toBe(200);
    expect(last.body).toEqual({ deleted: 1, deleted_ids: [b1] });
    expect(await a.socket.next('message:bulk_deleted', (p) => p.deleted_ids[0] === b1)).toEqual({
      room_id: chatId,
      deleted_ids: [b1],
      deleted_by: mod.user.id,
    });
    const left = await idsIn(a, chatId);
    for (const id of [a1, b1]) expect(left).not.toContain(id);
  });

  it('answers 403 to a User not in it, and to a Moderator in a User\u2019s private chat; deletes nothing', async () => {
    const { a, chatId, a1, b1 } = await directWithMessages();
    const outsider = await member(app);
    const key = await usersChat('private');
    const mod = await member(app, { level: 1 });
    const o1 = await say(key.owner, key);
    for (const [who, id, msgId] of [
      [outsider, chatId, a1],
      [mod, key.chatId, o1],
    ] as const) {
      const byId = await who.client.post(`/v1/portal/chats/${id}/messages/delete`, { ids: [msgId] });
      expect(refusal(byId)).toEqual([403, 'ERR_CANNOT_BROWSE_PRIVATE']);
      const last = await who.client.post(`/v1/portal/chats/${id}/messages/delete-last`, { count: 1 });
      expect(refusal(last)).toEqual([403, 'ERR_CANNOT_BROWSE_PRIVATE']);
    }
    expect(await idsIn(a, chatId)).toEqual(expect.arrayContaining([a1, b1]));
    expect(await idsIn(key.owner, key.chatId)).toContain(o1);
  });
});

describeApp('strangers sending (docs/api.md, Strangers)', () => {
  /** An anonymous stranger session with a registered key and a connected socket. */
  const stranger = async (): Promise<Member> => {
    const client = new Client(app.url, nextIp(), app.publicApiKey);
    const made = await client.post('/v1/portal/stranger', {});
    expect(made.status).toBe(200);
    const keys = generateKeyPair();
    const reg = await client.post('/v1/portal/keys', { public_key: publicKeyToBase64(keys.publicKey) });
    expect(reg.body.status).toBe('registered');
    const socket = await connectSocket(app.url, client);
    return {
      client,
      user: made.body.user,
      platformUserId: '',
      keys,
      socket,
      sessionId: await sessionIdOf(app, client),
    };
  };
  const send = (m: Member, chatId: number) =>
    m.client.post(`/v1/portal/chats/${chatId}/messages`, { content: `{"v":2,"epoch":1,"ct":"${CT}"}` });

  it('answers 401 ERR_UNAUTHENTICATED to a stranger sending to a public chat, and spends no rate limit on it', async () => {
    const { chatId } = await keyedChat(app);
    const s = await stranger();
    // More than the per-chat limit: were the refusals counted, the last would be 429.
    for (let i = 0; i <= Limits.MESSAGES_PER_CHAT; i++) {
      const res = await send(s, chatId);
      expect([res.status, res.body.code], `send ${i}`).toEqual([401, 'ERR_UNAUTHENTICATED']);
    }
  });

  it('answers 401 outside its own direct chats (private, others\u2019 direct), and sends in its own', async () => {
    const s = await stranger();
    const peer = await member(app);
    const own = await directChat([s.user.id, peer.user.id]);
    const others = await directChat([(await member(app)).user.id, (await member(app)).user.id]);
    const priv = await keyedChat(app, 'private');
    for (const chatId of [priv.chatId, others]) {
      const res = await send(s, chatId);
      expect([res.status, res.body.code], String(chatId)).toEqual([401, 'ERR_UNAUTHENTICATED']);
    }
    expect((await join(peer, { chat_id: own })).ok).toBe(true);
    const key = { chatId: own, ...(await keyEpoch(s, own)) };
    const sent = await say(s, key);
    expect((await peer.socket.next('message:new', (m) => m.id === sent)).sender_id).toBe(s.user.id);
  });
});

describeApp('system messages', () => {
  it('answers 403 to deleting a system message by id, even among deletable ones, and keeps it through every delete', async () => {
    const key = await keyedChat(app);
    const { owner, chatId } = key;
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    expect(await guest.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    const page = (await owner.client.get(`/v1/portal/chats/${chatId}/messages`)).body.messages;
    const system = page.find((m: { type: string; system: { kind: string } | null }) => m.system?.kind === 'leave');
    expect(system).toBeDefined();
    const { chatKey, epoch } = await keyEpoch(owner, chatId); // the leave moved the chat to a new epoch
    const mine = await say(owner, { chatId, chatKey, epoch });
    for (const ids of [[system.id], [mine, system.id]]) {
      const res = await owner.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids });
      expect([res.status, res.body.code, res.body.message]).toEqual([
        403,
        'ERR_FORBIDDEN',
        'System messages cannot be deleted.',
      ]);
    }
    expect(await idsIn(owner, chatId)).toEqual(expect.arrayContaining([system.id, mine]));
    const last = await owner.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 100 });
    expect(last.body.deleted_ids).toEqual([mine]);
    await owner.client.post(`/v1/portal/chats/${chatId}/messages/delete-mine`, {});
    expect(await idsIn(owner, chatId)).toContain(system.id);
  });
});

describeApp('an archived (read-only) direct chat', () => {
  it('answers 403 ERR_CHAT_READ_ONLY to delete, delete-mine and delete-last, and deletes nothing', async () => {
    const [a, b] = [await member(app, { level: 1 }), await member(app)];
    const made = await app.services.chats.createDirect([a.user.id, b.user.id], ['read-only']);
    if ('refused' in made) throw new Error(`refused: ${JSON.stringify(made)}`);
    const chatId = made.chat.id;
    const key = { chatId, ...(await keyEpoch(a, chatId)) };
    const [a1, b1] = [await say(a, key), await say(b, key)];
    expect((await a.client.post('/v1/portal/match/leave', { chat_id: chatId })).status).toBe(200);
    const before = await idsIn(b, chatId);
    expect(before).toEqual(expect.arrayContaining([a1, b1]));
    for (const [who, path, body] of [
      [a, 'delete', { ids: [a1] }],
      [a, 'delete', { ids: [b1] }],
      [b, 'delete', { ids: [b1] }],
      [a, 'delete-mine', {}],
      [b, 'delete-mine', {}],
      [a, 'delete-last', { count: 100 }],
    ] as const) {
      const res = await who.client.post(`/v1/portal/chats/${chatId}/messages/${path}`, body);
      expect([res.status, res.body.code], path).toEqual([403, 'ERR_CHAT_READ_ONLY']);
    }
    expect(await idsIn(b, chatId)).toEqual(before);
    expect(await idsIn(a, chatId)).toEqual(before); // the one who left reads it too
  });
});

// PostgreSQL, fake clock: a delete that races an expiry, a promotion or another delete. A
// transaction of the test's own (another node's) holds rows to fix the interleaving; PGlite runs
// one transaction at a time, so nothing interleaves there.
describeApp('deletes racing an expiry, a promotion or another delete (PostgreSQL, fake clock)', () => {
  let timed: TestApp;
  let pg: postgres.Sql | undefined;
  const clock = new FakeClock(Date.now());
  beforeAll(async () => {
    if (MODE !== 'cluster') return;
    timed = await startApp({ clock });
    if (timed.config.databaseUrl) pg = postgres(timed.config.databaseUrl, { max: 3, onnotice: () => {} });
  });
  afterAll(async () => {
    await pg?.end({ timeout: 1 });
    await timed?.close();
  });

  /** Which of `ids` are still stored in the chat. */
  const kept = async (chatId: number, ids: string[]) => {
    const rows = await (pg as postgres.Sql)<{ id: string }[]>`
      select ms::text || '-' || seq::text as id from messages where chat_id = ${chatId}`;
    return rows.map((r) => r.id).filter((id) => ids.includes(id));
  };

  /** A keyed chat of an Admin (its owner) with a User who joined it and holds its key. */
  const chatWithUser = async () => {
    const key = await keyedChat(timed);
    const user = await member(timed);
    expect((await join(user, { chat_id: key.chatId })).ok).toBe(true);
    await shareKey(key.owner, key, [user]);
    return { key, owner: key.owner, chatId: key.chatId, user };
  };

  it.skipIf(MODE !== 'cluster')(
    'answers 403 ERR_CHAT_READ_ONLY to delete, delete-mine and delete-last that wait while the direct chat expires, and deletes nothing',
    async () => {
      const cases = [
        // Each waits where it would for another node's transaction: a delete by id and delete-mine
        // for the message's row (as another delete holds it), delete-last for its caller's users
        // row (it skips a message row another transaction holds).
        { path: 'delete', who: 'b', held: 'message' },
        { path: 'delete-mine', who: 'b', held: 'message' },
        { path: 'delete-last', who: 'a', held: 'caller' },
      ] as const;
      for (const { path, who, held } of cases) {
        // a is a Moderator (it moderates direct chats: delete-last), b a User.
        const [a, b] = [await member(timed, { level: 1 }), await member(timed)];
        const made = await timed.services.chats.createDirect([a.user.id, b.user.id], ['expiry']);
        if ('refused' in made) throw new Error(`refused: ${JSON.stringify(made.refused)}`);
        const chatId = made.chat.id;
        const b1 = await say(b, { chatId, ...(await keyEpoch(b, chatId)) });
        // The chat expires 5 s from now (the clock's), and 10 s pass while the delete waits.
        const expiresAt = new Date(clock.now().getTime() + 5_000).toISOString();
        await (pg as postgres.Sql)`update chats set expires_at = ${expiresAt} where id = ${chatId}`;
        const actor = who === 'a' ? a : b;
        const lock =
          held === 'message'
            ? `select ms from messages where chat_id = ${chatId} and sender_id = ${b.user.id} for update`
            : `select id from users where id = ${actor.user.id} for update`;
        const body = { delete: { ids: [b1] }, 'delete-mine': {}, 'delete-last': { count: 1 } }[path];
        const res = await whileHeldAdvancing(pg as postgres.Sql, lock, clock, 10_000, () =>
          actor.client.post(`/v1/portal/chats/${chatId}/messages/${path}`, body),
        );
        expect({ path, status: res.status, code: res.body.code, kept: await kept(chatId, [b1]) }).toEqual({
          path,
          status: 403,
          code: 'ERR_CHAT_READ_ONLY',
          kept: [b1],
        });
      }
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'refuses a delete by id (403, out of reach) whose sender is promoted to the Admin’s level while it waits for the Admin’s row, and deletes nothing',
    async () => {
      const { key, owner, chatId, user } = await chatWithUser(); // its owner is an Admin
      const m1 = await say(user, key);
      // Another node promotes the sender to Admin in a transaction that also holds the owner's row:
      // the delete reads both levels after that commits.
      const res = await racingUserRow(
        pg as postgres.Sql,
        owner.user.id,
        `update users set permission_level = 2 where id = ${user.user.id}`,
        () => owner.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [m1] }),
      );
      expect({ status: res.status, body: res.body, kept: await kept(chatId, [m1]) }).toEqual({
        status: 403,
        body: expect.objectContaining({ code: 'ERR_FORBIDDEN', message: 'That user is out of your reach.' }),
        kept: [m1],
      });
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'holds the senders’ users rows: a delete by id waits for a promotion of the sender that holds only the sender’s row, and is refused (403) after it',
    async () => {
      const { key, owner, chatId, user } = await chatWithUser(); // its owner is an Admin
      const m1 = await say(user, key);
      const sql = pg as postgres.Sql;
      const promotion = hold(sql, (tx) => tx`update users set permission_level = 2 where id = ${user.user.id}`);
      await promotion.ready;
      const answer = owner.client.post(`/v1/portal/chats/${chatId}/messages/delete`, { ids: [m1] });
      // The delete waits for the sender's row (one that does not take it answers first).
      await lockWaitersOr(sql, 1, answer);
      await promotion.end();
      const res = await answer;
      expect({ status: res.status, body: res.body, kept: await kept(chatId, [m1]) }).toEqual({
        status: 403,
        body: expect.objectContaining({ code: 'ERR_FORBIDDEN', message: 'That user is out of your reach.' }),
        kept: [m1],
      });
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'holds the senders’ users rows: delete-last waits for a promotion of the newest message’s sender out of reach, then passes that message over and deletes the next one it may',
    async () => {
      const { key, owner, chatId, user } = await chatWithUser(); // its owner is an Admin
      const o1 = await say(owner, key);
      const m1 = await say(user, key);
      const sql = pg as postgres.Sql;
      // Another node promotes the newest message's sender to Admin, holding only the sender's row.
      const promotion = hold(sql, (tx) => tx`update users set permission_level = 2 where id = ${user.user.id}`);
      await promotion.ready;
      const answer = owner.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 1 });
      // The delete-last waits for the sender's row (one that does not take it answers first).
      await lockWaitersOr(sql, 1, answer);
      await promotion.end();
      const res = await answer;
      expect({ status: res.status, body: res.body, kept: await kept(chatId, [o1, m1]) }).toEqual({
        status: 200,
        body: { deleted: 1, deleted_ids: [o1] },
        kept: [m1],
      });
    },
  );

  it.skipIf(MODE !== 'cluster')(
    'delete-last {count: 1} while another delete holds the newest message deletes the next newest: both are gone once that commits',
    async () => {
      const key = await keyedChat(timed);
      const { owner, chatId } = key;
      const [m1, m2] = [await say(owner, key), await say(owner, key)];
      const [ms, seq] = (m2 as string).split('-').map(Number) as [number, number];
      // Another node's delete-last {count: 1} has taken the newest message and not committed yet.
      const sql = pg as postgres.Sql;
      const other = hold(
        sql,
        (tx) => tx`delete from messages where chat_id = ${chatId} and ms = ${ms} and seq = ${seq}`,
      );
      await other.ready;
      const answer = owner.client.post(`/v1/portal/chats/${chatId}/messages/delete-last`, { count: 1 });
      // One that chose the held row would wait for it, then find it gone and delete nothing.
      await lockWaitersOr(sql, 1, answer);
      await other.end();
      const res = await answer;
      expect({ status: res.status, body: res.body, kept: await kept(chatId, [m1, m2]) }).toEqual({
        status: 200,
        body: { deleted: 1, deleted_ids: [m1] },
        kept: [],
      });
    },
  );
});
