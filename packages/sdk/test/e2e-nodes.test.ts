import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type Backing, createBacking, MODE, startApp, type TestApp } from '../../server/test/support/app.js';
import { holdReader } from '../../server/test/support/stream-reader.js';
import { type E2EChatSessionEvents, type E2ESessionError, ParlorClient } from '../src/index.js';
import { closeSessions, collector, loginUser, openSession, plaintexts, testBot, until } from './support.js';

/** The E2E session across two nodes over one PostgreSQL + Redis (cluster mode only). */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))('E2EChatSession on two nodes', () => {
  let backing: Backing;
  let a: TestApp;
  let b: TestApp;

  beforeAll(async () => {
    backing = await createBacking();
    [a, b] = await Promise.all([startApp({ backing }), startApp({ backing })]);
  });
  afterAll(async () => {
    await closeSessions();
    await a?.close();
    await b?.close();
    await backing?.release();
  });

  /** Alice (an Admin, who creates the chat), Bob and Carol, logged in on node A. */
  const threeUsers = async () => {
    const bot = await testBot(a);
    return Promise.all([loginUser(a, bot, { level: 2 }), loginUser(a, bot), loginUser(a, bot)]);
  };

  /** The same session (cookie and address) talking to another node. */
  const onNode = (node: TestApp, client: ParlorClient) =>
    new ParlorClient({ baseUrl: node.url, headers: { ...client.headers }, session: client.session });

  it('keys, shares, rekeys and delivers when the members sit on different nodes', async () => {
    const [alice, bob, carol] = await threeUsers();
    const onA = await openSession(alice.client);
    const onB = await openSession(onNode(b, bob.client));
    const { chat } = await alice.client.createChat({ name: 'Two nodes', type: 'public' });
    expect((await onA.join({ chat_id: chat.id })).hasKey).toBe(true);
    // Bob's envelope is made on node A (portal:key_added crossed to A, room:key crossed back to B).
    expect((await onB.join({ chat_id: chat.id })).hasKey).toBe(true);
    const carolOnB = await openSession(onNode(b, carol.client));
    expect((await carolOnB.join({ chat_id: chat.id })).hasKey).toBe(true);

    const inboxA = collector(onA, chat.id);
    const inboxB = collector(onB, chat.id);
    await onA.send(chat.id, 'from node A');
    await onB.send(chat.id, 'from node B');
    expect(plaintexts(await inboxA.waitFor(2, (e) => e.kind === 'user'))).toEqual(['from node A', 'from node B']);
    expect(plaintexts(await inboxB.waitFor(2, (e) => e.kind === 'user'))).toEqual(['from node A', 'from node B']);

    // Carol leaves on node B; node A's member sees the rekey and the next epoch works for both.
    const before = onA.epochOf(chat.id) as number;
    await carolOnB.leave(chat.id);
    const sent = await onB.send(chat.id, 'after carol left');
    expect(sent.epoch).toBe(before + 1);
    const [entry] = await inboxA.waitFor(1, (e) => e.message.id === sent.id);
    expect(entry).toMatchObject({ kind: 'user', plaintext: 'after carol left' });
    expect(carolOnB.chatKeys(chat.id).has(sent.epoch)).toBe(false);
  });

  it('a member kicked on one node whose rekey reaches it before room:left ends its keying without an error event', async () => {
    const [alice, bob, carol] = await threeUsers();
    const onA = await openSession(alice.client);
    const bobOnB = onNode(b, bob.client);
    const bobB = await openSession(bobOnB, { rekeyJitterMs: 1 });
    const carolB = await openSession(onNode(b, carol.client));
    const { chat } = await alice.client.createChat({ name: 'Lagging kick', type: 'public' });
    for (const s of [onA, bobB, carolB]) expect((await s.join({ chat_id: chat.id })).hasKey).toBe(true);
    const errors: E2ESessionError[] = [];
    bobB.on('error', (e) => errors.push(e));
    const left: Parameters<E2EChatSessionEvents['left']>[0][] = [];
    bobB.on('left', (e) => left.push(e));
    const refused: string[] = [];
    const read = bobOnB.chatKey.bind(bobOnB);
    bobOnB.chatKey = (chatId) =>
      read(chatId).catch((error: { code?: string }) => {
        refused.push(String(error.code));
        throw error;
      });

    // Node B reads nothing from the stream for a while: Alice's kick on node A (its room:left) does
    // not reach Bob yet, while Carol's leave through node B sends its room:rekey at once. Bob's
    // keying of that epoch reads the key state, which the server refuses: he is no member now.
    const hold = holdReader(b);
    try {
      await alice.client.kick(chat.id, { user_id: bob.user.id });
      await carolB.leave(chat.id);
      await until('Bob’s refused key read', () => refused.length > 0);
    } finally {
      hold.release();
    }
    await until('Bob’s room:left', () => left.length > 0);
    await new Promise((r) => setTimeout(r, 100));
    expect(refused).toEqual(['ERR_NOT_CHAT_MEMBER']);
    expect(left).toEqual([{ chatId: chat.id, reason: 'kicked' }]);
    expect(errors).toEqual([]);
  });
});
