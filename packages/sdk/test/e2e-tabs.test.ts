import { expect, it } from 'vitest';
import { describeApp, type TestApp } from '../../server/test/support/app.js';
import { type BotClient, type E2EChatSessionEvents, type E2ESessionError, generateKeyPair } from '../src/index.js';
import { collector, e2eSuite, loginUser, openSession, until } from './support.js';

let app: TestApp;
let bot: BotClient;
e2eSuite((started) => {
  ({ app, bot } = started);
});

type Closed = Parameters<E2EChatSessionEvents['closed']>[0];

describeApp('E2EChatSession: two tabs on one login session', () => {
  it('closes the first with reason key_replaced when the second registers another key for the session', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const bob = await loginUser(app, bot);
    const tab1 = await openSession(alice.client, { rekeyJitterMs: 3000, keyWaitMs: 2000 });
    const b = await openSession(bob.client, { rekeyJitterMs: 1 });
    const { chat } = await alice.client.createChat({ name: 'Two tabs', type: 'public' });
    expect((await tab1.join({ chat_id: chat.id })).hasKey).toBe(true);
    expect((await b.join({ chat_id: chat.id })).hasKey).toBe(true);
    const errors: E2ESessionError[] = [];
    const closed: Closed[] = [];
    tab1.on('error', (e) => errors.push(e));
    tab1.on('closed', (e) => closed.push(e));

    // The second tab: the same cookie (login session), a new keypair. The server replaces the
    // session's key and raises the chat's epoch.
    const tab2 = await openSession(alice.client, { rekeyJitterMs: 1 });
    expect(tab2.sessionId).toBe(tab1.sessionId);
    await until('the first tab to close', () => closed.length > 0);
    expect(closed).toMatchObject([{ reason: 'key_replaced', code: 'KEY_REPLACED' }]);
    expect((closed[0]?.error as E2ESessionError | undefined)?.details).toEqual({
      sessionId: tab1.sessionId,
      publicKey: tab2.publicKey,
    });
    await expect(tab1.send(chat.id, 'from the first tab')).rejects.toMatchObject({ code: 'CLOSED' });
    expect(errors.map((e) => e.code)).not.toContain('ENVELOPE_REJECTED');

    // The second tab takes over.
    expect((await tab2.join({ chat_id: chat.id })).hasKey).toBe(true);
    const inbox = collector(tab2, chat.id);
    const sent = await b.send(chat.id, 'after the second tab opened');
    expect(await inbox.waitFor(1, (e) => e.message.id === sent.id)).toMatchObject([
      { kind: 'user', plaintext: 'after the second tab opened' },
    ]);
  });

  it('keeps both open, and both reading, when they share one keypair', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const bob = await loginUser(app, bot);
    const keyPair = generateKeyPair();
    const tab1 = await openSession(alice.client, { keyPair });
    const b = await openSession(bob.client);
    const { chat } = await alice.client.createChat({ name: 'Shared keypair', type: 'public' });
    await tab1.join({ chat_id: chat.id });
    await b.join({ chat_id: chat.id });
    const closed: Closed[] = [];
    const errors: E2ESessionError[] = [];
    tab1.on('closed', (e) => closed.push(e));
    tab1.on('error', (e) => errors.push(e));

    const tab2 = await openSession(alice.client, { keyPair });
    tab2.on('error', (e) => errors.push(e));
    expect(tab2.sessionId).toBe(tab1.sessionId);
    expect((await tab2.join({ chat_id: chat.id })).hasKey).toBe(true);
    const inboxes = [collector(tab1, chat.id), collector(tab2, chat.id)];
    const sent = await b.send(chat.id, 'both tabs read this');
    for (const inbox of inboxes) {
      expect(await inbox.waitFor(1, (e) => e.message.id === sent.id)).toMatchObject([{ kind: 'user' }]);
    }
    expect((await tab1.send(chat.id, 'tab1 still sends')).epoch).toBe(tab1.epochOf(chat.id));
    expect(closed).toEqual([]);
    expect(errors).toEqual([]);
  });
});

describeApp('E2EChatSession: a chat’s answer holding another chat’s messages', () => {
  it('history(A) shows a message of chat B as undecryptable, and decrypt/open check the expected chat', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const s = await openSession(alice.client);
    const { chat: a } = await alice.client.createChat({ name: 'Chat A', type: 'public' });
    const { chat: b } = await alice.client.createChat({ name: 'Chat B', type: 'public' });
    await s.join({ chat_id: a.id });
    await s.join({ chat_id: b.id });
    const sent = await s.send(b.id, 'said only in chat B');

    // A server that answers chat A's history with chat B's page.
    const history = alice.client.history.bind(alice.client);
    alice.client.history = async (chatId, input) => history(chatId === a.id ? b.id : chatId, input);
    const entries = await s.history(a.id);
    const moved = entries.find((e) => e.message.id === sent.id);
    expect(moved).toMatchObject({ kind: 'undecryptable', chatId: b.id, error: { code: 'DECRYPT_FAILED' } });
    expect(entries.filter((e) => e.kind !== 'undecryptable')).toEqual([]);

    const message = moved?.message;
    if (!message) throw new Error('the message of chat B is missing');
    expect(() => s.decrypt(message, a.id)).toThrow(expect.objectContaining({ code: 'DECRYPT_FAILED' }));
    expect(s.decrypt(message, b.id)).toBe('said only in chat B');
    expect(s.open(message)).toMatchObject({ kind: 'user', chatId: b.id });
  });
});
