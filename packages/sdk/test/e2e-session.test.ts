import { expect, it } from 'vitest';
import { describeApp, type TestApp } from '../../server/test/support/app.js';
import {
  type BotClient,
  type ChatEntry,
  connect,
  decryptMessage,
  type E2EChatSession,
  E2EError,
  type E2ESessionError,
  generateKeyPair,
  joinRoom,
  type Message,
  parseBundle,
  publicKeyToBase64,
} from '../src/index.js';
import { collector, e2eSuite, loginUser, openSession, plaintexts, storedContents, until } from './support.js';

let app: TestApp;
let bot: BotClient;
e2eSuite((started) => {
  ({ app, bot } = started);
});

/** A user logged in on two sessions, each with its E2E session open. */
async function twoSessionUser(level?: number): Promise<{ userId: number; sessions: [E2EChatSession, E2EChatSession] }> {
  const first = await loginUser(app, bot, { level });
  const second = await loginUser(app, bot, { platformUserId: first.platformUserId });
  return { userId: first.user.id, sessions: [await openSession(first.client), await openSession(second.client)] };
}

/** Fails the test on any background error of these sessions. */
function noErrors(...sessions: E2EChatSession[]): E2ESessionError[] {
  const errors: E2ESessionError[] = [];
  for (const s of sessions) s.on('error', (e) => errors.push(e));
  return errors;
}

const userMessages = (entries: ChatEntry[]) => entries.filter((e) => e.kind === 'user');

describeApp('E2EChatSession', () => {
  it('lets two users with two sessions each read every message, and stores only ciphertext', async () => {
    const [alice, bob] = await Promise.all([twoSessionUser(2), twoSessionUser()]);
    const all = [...alice.sessions, ...bob.sessions];
    const errors = noErrors(...all);
    const { chat } = await alice.sessions[0].client.createChat({ name: 'Four sessions', type: 'public' });
    const inboxes = all.map((s) => collector(s, chat.id));
    const joins = await Promise.all(all.map((s) => s.join({ chat_id: chat.id })));
    expect(joins.map((j) => j.hasKey)).toEqual([true, true, true, true]);
    expect(new Set(all.map((s) => s.sessionId).filter((id) => id !== null)).size).toBe(4);
    // Everyone holds the same key of the same epoch.
    const epoch = all[0]?.epochOf(chat.id) as number;
    const keys = all.map((s) => Buffer.from(s.chatKeys(chat.id).get(epoch) ?? []).toString('hex'));
    expect(new Set(keys).size).toBe(1);

    const texts = all.map((_, i) => `secret message ${i} — ünïcødé ✓`);
    const sent = await Promise.all(all.map((s, i) => s.send(chat.id, texts[i] as string)));
    expect(sent.every((m) => m.epoch === epoch)).toBe(true);
    for (const inbox of inboxes) {
      const got = await inbox.waitFor(4, (e) => e.kind === 'user');
      expect(plaintexts(got)).toEqual([...texts].sort());
    }

    const stored = await storedContents(app);
    for (const text of texts) expect(stored.some((c) => c.includes(text) || c.includes('secret message'))).toBe(false);
    const mine = stored.filter((c) => c !== '').map((c) => parseBundle(c));
    expect(mine.length).toBeGreaterThanOrEqual(4);
    expect(errors).toEqual([]);
  });

  it('rekeys when a member leaves: the leaver cannot read what is sent afterwards', async () => {
    const [alice, bob] = await Promise.all([twoSessionUser(2), twoSessionUser()]);
    const errors = noErrors(...alice.sessions, ...bob.sessions);
    const { chat } = await alice.sessions[0].client.createChat({ name: 'Leaving', type: 'public' });
    for (const s of [...alice.sessions, ...bob.sessions]) await s.join({ chat_id: chat.id });
    const before = await alice.sessions[0].send(chat.id, 'before the leave');
    const inbox = collector(alice.sessions[1], chat.id);

    await bob.sessions[0].leave(chat.id);
    const after = await alice.sessions[0].send(chat.id, 'after the leave');
    expect(after.epoch).toBeGreaterThan(before.epoch);
    const [entry] = await inbox.waitFor(1, (e) => e.kind === 'user' && e.message.id === after.id);
    expect(entry).toMatchObject({ kind: 'user', plaintext: 'after the leave', epoch: after.epoch });

    const { messages } = await alice.sessions[0].client.history(chat.id, { limit: 10 });
    const afterMessage = messages.find((m) => m.id === after.id) as Message;
    const beforeMessage = messages.find((m) => m.id === before.id) as Message;
    for (const leaver of bob.sessions) {
      expect(leaver.decrypt(beforeMessage)).toBe('before the leave');
      expect(() => leaver.decrypt(afterMessage)).toThrow(expect.objectContaining({ code: 'NO_KEY_FOR_EPOCH' }));
      // Not with any key it ever held either.
      const held = [...leaver.chatKeys(chat.id).values()];
      expect(held.length).toBeGreaterThan(0);
      for (const chatKey of held) {
        const content = afterMessage.content.replace(`"epoch":${after.epoch}`, `"epoch":${before.epoch}`);
        expect(() => decryptMessage({ chatKey, chatId: chat.id, content: afterMessage.content })).toThrow(E2EError);
        expect(() => decryptMessage({ chatKey, chatId: chat.id, content })).toThrow(E2EError);
      }
      expect(leaver.chatKeys(chat.id).has(after.epoch)).toBe(false);
    }
    // The server no longer answers the leaver's key requests.
    const leftOut = await bob.sessions[0].client.chatKey(chat.id).catch((e: unknown) => e);
    expect(leftOut).toMatchObject({ code: 'ERR_NOT_CHAT_MEMBER' });
    expect(errors).toEqual([]);
  });

  it('gives a late joiner and a late session the current key through portal:key_added', async () => {
    const alice = await twoSessionUser(2);
    const errors = noErrors(...alice.sessions);
    const { chat } = await alice.sessions[0].client.createChat({ name: 'Late', type: 'public' });
    for (const s of alice.sessions) await s.join({ chat_id: chat.id });
    const early = await alice.sessions[0].send(chat.id, 'sent before anyone else came');
    const epoch = alice.sessions[0].epochOf(chat.id) as number;
    const aliceKey = alice.sessions[0].chatKeys(chat.id).get(epoch);

    const bobLogin = await loginUser(app, bot);
    const bob = await openSession(bobLogin.client);
    const sources: string[] = [];
    bob.on('key', (e) => sources.push(e.source));
    const joined = await bob.join({ chat_id: chat.id });
    expect(joined.hasKey).toBe(true);
    expect(sources).toEqual(['envelope']);
    expect(bob.chatKeys(chat.id).get(epoch)).toEqual(aliceKey);
    const history = await bob.history(chat.id);
    expect(history.find((e) => e.message.id === early.id)).toMatchObject({
      kind: 'user',
      plaintext: 'sent before anyone else came',
    });

    // A second session of a member: registering its key prompts the holders to share with it,
    // before it even joins the room.
    const bobAgain = await loginUser(app, bot, { platformUserId: bobLogin.platformUserId });
    const bob2 = await openSession(bobAgain.client);
    const deadline = Date.now() + 15_000;
    while ((await bobAgain.client.chatKey(chat.id)).envelope === null && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 25));
    }
    expect((await bobAgain.client.chatKey(chat.id)).envelope).not.toBeNull();
    expect((await bob2.join({ chat_id: chat.id })).hasKey).toBe(true);
    const inbox = collector(alice.sessions[1], chat.id);
    const fromBob2 = await bob2.send(chat.id, 'hello from the new device');
    expect((await inbox.waitFor(1, (e) => e.message.id === fromBob2.id))[0]).toMatchObject({
      plaintext: 'hello from the new device',
    });
    expect(errors).toEqual([]);
  });

  it('decrypts history, reports epochs it never held, and delivers through the iterator', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const a1 = await openSession(alice.client);
    const { chat } = await alice.client.createChat({ name: 'History', type: 'public' });
    await a1.join({ chat_id: chat.id });
    const bobLogin = await loginUser(app, bot);
    const bob = await openSession(bobLogin.client);
    await bob.join({ chat_id: chat.id });
    await a1.send(chat.id, 'epoch one');
    await bob.leave(chat.id); // the chat moves to epoch two

    const stream = a1.messages(chat.id);
    await a1.send(chat.id, 'epoch two');
    const seen: ChatEntry[] = [];
    for await (const entry of stream) {
      seen.push(entry);
      if (entry.kind === 'user') break;
    }
    expect(seen.at(-1)).toMatchObject({ kind: 'user', plaintext: 'epoch two' });

    // A newcomer at epoch two reads it, and reports epoch one as never held.
    const carol = await openSession((await loginUser(app, bot)).client);
    expect((await carol.join({ chat_id: chat.id })).hasKey).toBe(true);
    const history = await carol.history(chat.id, { limit: 10 });
    expect(history.map((e) => e.kind)).toEqual(['user', 'system', 'undecryptable']);
    expect(history[0]).toMatchObject({ kind: 'user', plaintext: 'epoch two' });
    expect(history[1]).toMatchObject({
      kind: 'system',
      message: { system: { kind: 'leave', user_id: bobLogin.user.id } },
    });
    const old = history[2];
    expect(old?.kind === 'undecryptable' && old.error.code).toBe('NO_KEY_FOR_EPOCH');
    expect(() => carol.decrypt(history[1]?.message as Message)).toThrow(
      expect.objectContaining({ code: 'SYSTEM_MESSAGE' }),
    );
    expect(() => carol.decrypt(history[2]?.message as Message)).toThrow(
      expect.objectContaining({ code: 'NO_KEY_FOR_EPOCH' }),
    );
    // The first session kept the older key.
    expect(userMessages(await a1.history(chat.id)).map((e) => e.kind === 'user' && e.plaintext)).toEqual([
      'epoch two',
      'epoch one',
    ]);
  });

  it('retries a send refused with ERR_EPOCH_MISMATCH after keying the new epoch itself', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const a1 = await openSession(alice.client);
    const { chat } = await alice.client.createChat({ name: 'Missed rekey', type: 'public' });
    await a1.join({ chat_id: chat.id });
    const bob = await openSession((await loginUser(app, bot)).client);
    await bob.join({ chat_id: chat.id });
    const first = await a1.send(chat.id, 'one');
    // This session misses the room:rekey event (as if it were lost), so it sends at the old epoch.
    a1.socket.off('room:rekey');
    await bob.leave(chat.id);
    const second = await a1.send(chat.id, 'two');
    expect(second.epoch).toBe(first.epoch + 1);
    expect(userMessages(await a1.history(chat.id)).map((e) => e.kind === 'user' && e.plaintext)).toEqual([
      'two',
      'one',
    ]);
  });

  it('keeps every session in step through leaves, rejoins and a logout', async () => {
    const users = await Promise.all([twoSessionUser(2), twoSessionUser(), twoSessionUser()]);
    const sessions = users.map((u) => [...u.sessions]);
    const errors = noErrors(...sessions.flat());
    const owner = users[0]?.sessions[0] as E2EChatSession;
    const { chat } = await owner.client.createChat({ name: 'Churn', type: 'public' });
    await Promise.all(sessions.flat().map((s) => s.join({ chat_id: chat.id })));
    let lastEpoch = 1;
    for (const round of [0, 1, 2]) {
      const user = sessions[1 + (round % 2)] as E2EChatSession[];
      if (round === 2) {
        // One session logs out (its key goes, the epoch rises); the user logs in on a new one.
        const gone = user[1] as E2EChatSession;
        const { user: me } = await gone.client.me();
        await gone.client.logout();
        await gone.close();
        const platformUserId = me.linked_platforms[0]?.platform_user_id;
        const fresh = await openSession((await loginUser(app, bot, { platformUserId })).client);
        fresh.on('error', (e) => errors.push(e));
        user[1] = fresh;
        await fresh.join({ chat_id: chat.id });
      } else {
        await user[0]?.leave(chat.id);
        await Promise.all(user.map((s) => s.join({ chat_id: chat.id })));
      }
      const all = sessions.flat();
      const inboxes = all.map((s) => collector(s, chat.id));
      const sent = await Promise.all(all.map((s, i) => s.send(chat.id, `round ${round} from ${i}`)));
      const epochs = new Set(sent.map((m) => m.epoch));
      expect(epochs.size).toBe(1);
      expect([...epochs][0]).toBeGreaterThan(lastEpoch);
      lastEpoch = [...epochs][0] as number;
      for (const inbox of inboxes) {
        const got = await inbox.waitFor(
          all.length,
          (e) => e.kind === 'user' && e.plaintext.startsWith(`round ${round} `),
        );
        expect(got).toHaveLength(all.length);
      }
    }
    expect(errors).toEqual([]);
  });

  it('restores a session from its keypair (same login) and the chat keys it kept', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const keyPair = generateKeyPair();
    const first = await openSession(alice.client, { keyPair });
    const { chat } = await alice.client.createChat({ name: 'Restore', type: 'public' });
    await first.join({ chat_id: chat.id });
    const bob = await openSession((await loginUser(app, bot)).client);
    await bob.join({ chat_id: chat.id });
    const old = await first.send(chat.id, 'epoch one');
    await bob.leave(chat.id);
    const recent = await first.send(chat.id, 'epoch two');
    const kept = first.chatKeys(chat.id);
    await first.close();

    const again = await openSession(alice.client, { keyPair });
    expect(again.publicKey).toBe(first.publicKey);
    expect((await again.join({ chat_id: chat.id })).hasKey).toBe(true);
    const read = async () =>
      Object.fromEntries(
        (await again.history(chat.id)).map((e) => [e.message.id, e.kind === 'user' ? e.plaintext : e.kind]),
      );
    expect(await read()).toMatchObject({ [recent.id]: 'epoch two', [old.id]: 'undecryptable' });
    again.importKeys(chat.id, kept);
    expect(await read()).toMatchObject({ [recent.id]: 'epoch two', [old.id]: 'epoch one' });
  });

  it('a new session given kept keys sends once a holder has shared the key with it (its envelope), not before', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const { chat } = await alice.client.createChat({ name: 'Imported', type: 'public' });
    const keyPair = generateKeyPair();
    const first = await openSession(alice.client, { keyPair });
    await first.join({ chat_id: chat.id });
    const kept = first.chatKeys(chat.id);
    await first.close();

    // Another device of alice's: a new login and session key, given the kept keys. Nobody online
    // holds the epoch, so the server has no envelope for this session and refuses its messages.
    const device = await loginUser(app, bot, { platformUserId: alice.platformUserId });
    const restored = await openSession(device.client, { keyWaitMs: 1500 });
    restored.importKeys(chat.id, kept);
    expect((await restored.join({ chat_id: chat.id })).hasKey).toBe(true);
    await expect(restored.send(chat.id, 'nobody shared yet')).rejects.toMatchObject({ code: 'NO_CHAT_KEY' });

    // The next send is refused at first; then the first device comes back and shares on join.
    let onRefused = () => {};
    const refused = new Promise<void>((resolve) => {
      onRefused = resolve;
    });
    const sendMessage = device.client.sendMessage.bind(device.client);
    device.client.sendMessage = async (...args) =>
      sendMessage(...args).catch((error: unknown) => {
        onRefused();
        throw error;
      });
    const sending = restored.send(chat.id, 'after the share');
    await refused;
    const back = await openSession(alice.client, { keyPair });
    await back.join({ chat_id: chat.id });
    const sent = await sending;
    expect(sent.epoch).toBe([...kept.keys()][0]);
    const read = (await back.history(chat.id)).find((e) => e.message.id === sent.id);
    expect(read).toMatchObject({ kind: 'user', plaintext: 'after the share' });
  });

  it('a session given kept keys gives the key to members announced before the import and to later ones', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const keyPair = generateKeyPair();
    const first = await openSession(alice.client, { keyPair });
    const { chat } = await alice.client.createChat({ name: 'Import flush', type: 'public' });
    expect((await first.join({ chat_id: chat.id })).hasKey).toBe(true);
    const kept = first.chatKeys(chat.id);
    await first.close();

    // Another device of alice's joins while nobody online holds the key.
    const device = await loginUser(app, bot, { platformUserId: alice.platformUserId });
    const restored = await openSession(device.client, { keyWaitMs: 500, rekeyJitterMs: 1 });
    const errors = noErrors(restored);
    const announced = new Set<number>();
    restored.socket.on('portal:key_added', (e) => announced.add(e.session_id));
    let envelopes = 0;
    restored.socket.on('room:key', () => envelopes++);
    expect((await restored.join({ chat_id: chat.id })).hasKey).toBe(false);

    // Bob joins: his session is announced to the device, which lacks the key and keeps it waiting.
    const bob = await openSession((await loginUser(app, bot)).client, { keyWaitMs: 4000 });
    await bob.join({ chat_id: chat.id }, { waitForKey: false });
    await until('the announcement of Bob’s session', () => announced.has(bob.sessionId as number));
    await new Promise((r) => setTimeout(r, 100)); // its share, gathered for 15 ms, finds no key
    restored.importKeys(chat.id, kept);

    // The first device comes back and shares on join: the restored device and Bob get envelopes.
    const back = await openSession(alice.client, { keyPair });
    expect((await back.join({ chat_id: chat.id })).hasKey).toBe(true);
    expect(await bob.waitForKey(chat.id, 4000)).toBe(true);
    await until('the restored device’s envelope', () => envelopes > 0);
    await back.close();
    await bob.close();

    // Dave joins later: the restored device is the only holder online, and gives him the key.
    const dave = await openSession((await loginUser(app, bot)).client, { keyWaitMs: 4000 });
    await dave.join({ chat_id: chat.id }, { waitForKey: false });
    expect(await dave.waitForKey(chat.id, 4000)).toBe(true);
    const inbox = collector(dave, chat.id);
    const sent = await restored.send(chat.id, 'hello dave');
    expect(sent.epoch).toBe([...kept.keys()][0]);
    expect(await inbox.waitFor(1, (e) => e.message.id === sent.id)).toMatchObject([
      { kind: 'user', plaintext: 'hello dave' },
    ]);
    expect(errors).toEqual([]);
  });

  it('bounds its waits: send without any key holder fails with NO_CHAT_KEY, and close() ends everything', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const { chat } = await alice.client.createChat({ name: 'Bounded', type: 'public' });
    const bobLogin = await loginUser(app, bot);
    // Alice keys the epoch, then goes offline: Bob finds it keyed and nobody to share with him.
    const a1 = await openSession(alice.client);
    await a1.join({ chat_id: chat.id });
    await a1.close();
    const bob = await openSession(bobLogin.client, { keyWaitMs: 500 });
    const joined = await bob.join({ chat_id: chat.id });
    expect(joined.hasKey).toBe(false);
    await expect(bob.send(chat.id, 'nobody can read this')).rejects.toMatchObject({ code: 'NO_CHAT_KEY' });
    const stream = bob.messages();
    const pending = stream.next();
    await bob.close();
    expect(await pending).toEqual({ value: undefined, done: true });
    expect(bob.socket.connected).toBe(false);
    await expect(bob.send(chat.id, 'x')).rejects.toMatchObject({ code: 'CLOSED' });
  });
});

describeApp('E2EChatSession: deletions', () => {
  it('emits deleted {chatId, ids, deletedBy} for the server’s message:bulk_deleted', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const bobLogin = await loginUser(app, bot);
    const { chat } = await alice.client.createChat({ name: 'Deleting', type: 'public' });
    const [a, b] = [await openSession(alice.client), await openSession(bobLogin.client)];
    const errors = noErrors(a, b);
    await a.join({ chat_id: chat.id });
    await b.join({ chat_id: chat.id });
    const inbox = collector(b, chat.id);
    const deleted: unknown[] = [];
    b.on('deleted', (e) => deleted.push(e));
    const sent = await a.send(chat.id, 'soon gone');
    await inbox.waitFor(1, (e) => e.kind === 'user');

    expect((await alice.client.deleteMine(chat.id)).deleted_ids).toEqual([sent.id]);
    const end = Date.now() + 10_000;
    while (deleted.length === 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    expect(deleted).toEqual([{ chatId: chat.id, ids: [sent.id], deletedBy: alice.user.id }]);
    expect(errors).toEqual([]);
  });
});

describeApp('E2EChatSession: its own session id', () => {
  it('takes it from the key registration: known before any chat is joined, the one the server holds', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const session = await openSession(alice.client);
    const result = (await app.database.db.execute(
      `select session_id from session_keys where public_key = '${session.publicKey}'` as never,
    )) as unknown as { rows: { session_id: number }[] } | { session_id: number }[];
    const rows = 'rows' in result ? result.rows : result;
    expect(rows.map((r) => Number(r.session_id))).toEqual([session.sessionId]);
    const { chat } = await alice.client.createChat({ name: 'Own id', type: 'public' });
    const joined = await session.join({ chat_id: chat.id });
    expect(joined.key_ring[String(alice.user.id)]).toEqual({ [String(session.sessionId)]: session.publicKey });
  });
});

describeApp('E2EChatSession: an archived direct chat', () => {
  it('a new session joins it without a key and without errors; holders do not share there (read-only)', async () => {
    const [alice, bob] = [await loginUser(app, bot), await loginUser(app, bot)];
    const [a, b] = [await openSession(alice.client), await openSession(bob.client)];
    const errors = noErrors(a, b);
    const made = await app.services.chats.createDirect([alice.user.id, bob.user.id], ['sdkarchive']);
    if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
    const chatId = made.chat.id;
    expect((await a.join({ chat_id: chatId })).hasKey).toBe(true);
    expect((await b.join({ chat_id: chatId })).hasKey).toBe(true);
    const sent = await b.send(chatId, 'before the archive');
    await app.services.chats.leaveDirect(alice.user.id, chatId);

    // Bob on another device: its key reaches a and b (portal:key_added), whose shares are refused.
    const device = await loginUser(app, bot, { platformUserId: bob.platformUserId });
    const late = await openSession(device.client, { keyWaitMs: 1000 });
    const lateErrors = noErrors(late);
    expect((await late.join({ chat_id: chatId })).hasKey).toBe(false);
    expect(await b.waitForKey(chatId, 0)).toBe(true);
    expect(await late.waitForKey(chatId, 500)).toBe(false);
    // The sessions that held the key still read the history.
    expect((await a.history(chatId)).find((e) => e.message.id === sent.id)).toMatchObject({
      kind: 'user',
      plaintext: 'before the archive',
    });
    expect([...errors, ...lateErrors]).toEqual([]);
  });
});

describeApp('E2EChatSession: a top-up naming a session that left the key ring', () => {
  it('is sent again, once, to the sessions still in the ring (the server refuses it whole)', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const a = await openSession(alice.client);
    const errors = noErrors(a);
    const { chat } = await alice.client.createChat({ name: 'Expiring', type: 'public' });
    expect((await a.join({ chat_id: chat.id })).hasKey).toBe(true);

    // Bob: an idle session with a registered key, and a session that joins the chat.
    const bobLogin = await loginUser(app, bot);
    const idle = await bobLogin.client.registerKey(publicKeyToBase64(generateKeyPair().publicKey));
    const b = await openSession((await loginUser(app, bot, { platformUserId: bobLogin.platformUserId })).client);

    // The join announces both of Bob's sessions to Alice, who tops them up in one share. The idle
    // session expires just before that share arrives (the sweep has not ended it yet, so the epoch
    // stays): it is out of the ring, and the server refuses the share whole (409
    // ERR_KEY_RING_CHANGED).
    const shares: number[][] = [];
    const share = alice.client.shareKeys.bind(alice.client);
    alice.client.shareKeys = async (chatId, body) => {
      const named = body.envelopes.map((e) => e.session_id).sort((x, y) => x - y);
      if (shares.length === 0 && named.includes(idle.session_id)) {
        await app.database.db.execute(
          `update sessions set expires_at = now() - interval '1 second' where id = ${idle.session_id}` as never,
        );
      }
      shares.push(named);
      return share(chatId, body);
    };
    const joined = await b.join({ chat_id: chat.id });
    const bId = b.sessionId as number;

    // Alice read the ring again and gave the key to the session still in it.
    expect(shares).toEqual([[idle.session_id, bId].sort((x, y) => x - y), [bId]]);
    expect(joined.hasKey).toBe(true);
    const epoch = a.epochOf(chat.id) as number;
    expect(b.chatKeys(chat.id).get(epoch)).toEqual(a.chatKeys(chat.id).get(epoch));
    expect(errors).toEqual([]);
  });
});

describeApp('E2EChatSession: a member kicked while a holder lacked the current key', () => {
  it('never wraps a key of an epoch after the kick for the kicked member’s sessions (what the client sends)', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const a = await openSession(alice.client, { rekeyJitterMs: 1, keyWaitMs: 15_000 });
    const errors = noErrors(a);
    const { chat } = await alice.client.createChat({ name: 'Kick', type: 'public' });
    expect((await a.join({ chat_id: chat.id })).hasKey).toBe(true);
    const first = a.epochOf(chat.id) as number;

    // Every share Alice's client sends; and her reads of GET …/keys, which the test can hold.
    const shares: { epoch: number; sessions: number[] }[] = [];
    const share = alice.client.shareKeys.bind(alice.client);
    alice.client.shareKeys = async (chatId, body) => {
      shares.push({ epoch: body.epoch, sessions: body.envelopes.map((e) => e.session_id) });
      return share(chatId, body);
    };
    let hold: Promise<void> | null = null;
    let release: () => void = () => {};
    const read = alice.client.chatKey.bind(alice.client);
    alice.client.chatKey = async (chatId) => {
      if (hold) await hold;
      return read(chatId);
    };
    const announced = new Set<number>();
    a.socket.on('portal:key_added', (e) => announced.add(e.session_id));

    // Mallory, a member with a session of hers that Alice gives the key to.
    const mallory = await loginUser(app, bot);
    const m1 = await mallory.client.registerKey(publicKeyToBase64(generateKeyPair().publicKey));
    const socket = await connect(mallory.client, { reconnection: false });
    try {
      await joinRoom(socket, { chat_id: chat.id });
      await until('Alice’s share to Mallory', () => shares.some((s) => s.sessions.includes(m1.session_id)));

      // Alice cannot read the key state for a while: the epoch Mallory's key replacement starts
      // stays without a key at Alice's.
      hold = new Promise((resolve) => {
        release = resolve;
      });
      await mallory.client.registerKey(publicKeyToBase64(generateKeyPair().publicKey));
      await until('the rekey of the replaced key', () => a.epochOf(chat.id) === first + 1);
      // A second session of Mallory's registers a key: announced to Alice, who lacks the key of
      // that epoch, so she keeps it waiting for one.
      const second = await loginUser(app, bot, { platformUserId: mallory.platformUserId });
      const m2 = await second.client.registerKey(publicKeyToBase64(generateKeyPair().publicKey));
      await until('the announcement of Mallory’s second session', () => announced.has(m2.session_id));
      expect(a.hasKey(chat.id)).toBe(false);

      // Alice kicks Mallory: the next epoch's ring lists none of Mallory's sessions.
      await alice.client.request('POST', `/v1/portal/chats/${chat.id}/kick`, { body: { user_id: mallory.user.id } });
      const kickEpoch = first + 2;
      await until('the rekey of the kick', () => a.epochOf(chat.id) === kickEpoch);
      hold = null;
      release();

      // Alice keys the epoch after the kick, and (close waits for them) sends whatever shares follow.
      await until('Alice’s key of the epoch after the kick', () => a.chatKeys(chat.id).has(kickEpoch));
      await a.close();
      const mallorys = [m1.session_id, m2.session_id];
      const toMallory = shares.filter((s) => s.epoch >= kickEpoch && s.sessions.some((id) => mallorys.includes(id)));
      expect(toMallory).toEqual([]);
      expect(shares.filter((s) => s.epoch === kickEpoch)).toEqual([{ epoch: kickEpoch, sessions: [a.sessionId] }]);
      expect(errors).toEqual([]);
    } finally {
      release();
      socket.disconnect();
    }
  });
});

describeApp('E2EChatSession: a new member announced before the answer to a holder’s join', () => {
  it('gets the key from that holder although the join’s key ring lacks it', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const keyPair = generateKeyPair();
    const first = await openSession(alice.client, { keyPair });
    const { chat } = await alice.client.createChat({ name: 'Join race', type: 'public' });
    expect((await first.join({ chat_id: chat.id })).hasKey).toBe(true);
    await first.close();

    // Alice's holder enters the room and the server reads the ring; its answer is held on the
    // server's socket (as a handler slow after its ring read would send it late).
    const a = await openSession(alice.client, { keyPair });
    const errors = noErrors(a);
    const announced = new Set<number>();
    a.socket.on('portal:key_added', (e) => announced.add(e.session_id));
    type Packet = { type: number };
    const serverSocket = app.services.realtime.io.of('/').sockets.get(a.socket.id as string) as unknown as {
      packet: (packet: Packet, opts?: unknown) => void;
    };
    const send = serverSocket.packet.bind(serverSocket);
    const held: [Packet, unknown][] = [];
    let holding = true;
    const ACK = 3; // socket.io-parser PacketType.ACK
    serverSocket.packet = (packet, opts) => {
      if (holding && packet.type === ACK) held.push([packet, opts]);
      else send(packet, opts);
    };
    const joining = a.join({ chat_id: chat.id });
    await until('the held join answer', () => held.length === 1);

    // Bob becomes a member now: his session is announced to the room Alice's socket is in.
    const bobLogin = await loginUser(app, bot);
    const bob = await openSession(bobLogin.client, { keyWaitMs: 4000 });
    await bob.join({ chat_id: chat.id }, { waitForKey: false });
    await until('the announcement of Bob’s session', () => announced.has(bob.sessionId as number));
    holding = false;
    for (const [packet, opts] of held.splice(0)) send(packet, opts);
    const joined = await joining;
    expect(joined.hasKey).toBe(true);
    expect(joined.key_ring[String(bobLogin.user.id)]).toBeUndefined();
    expect(await bob.waitForKey(chat.id, 4000)).toBe(true);
    expect(bob.chatKeys(chat.id).get(joined.epoch)).toEqual(a.chatKeys(chat.id).get(joined.epoch));
    expect(errors).toEqual([]);
  });
});
