import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../server/src/platform/clock.js';
import { describeApp, startApp, type TestApp } from '../../server/test/support/app.js';
import { operator, setLevel } from '../../server/test/support/flows.js';
import {
  connect,
  joinRoom,
  TERMINAL_CONNECT_CODES,
  TIMED_OUT_RETRY_MAX_MS,
  TIMED_OUT_RETRY_SPREAD_MS,
  timedOutRetryDelayMs,
} from '../src/client/socket.js';
import {
  type BotClient,
  type E2EChatSession,
  type E2EChatSessionEvents,
  type E2ESessionError,
  isApiError,
} from '../src/index.js';
import { collector, e2eSuite, loginUser, openSession, plaintexts, testBot } from './support.js';

let app: TestApp;
let bot: BotClient;
e2eSuite((started) => {
  ({ app, bot } = started);
});

type Events = E2EChatSessionEvents;

/** Resolves with the next `event` of the session (bounded, so a missing event fails the test). */
function next<K extends keyof Events>(
  session: E2EChatSession,
  event: K,
  timeoutMs = 10_000,
): Promise<Parameters<Events[K]>[0]> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`no ${String(event)} event within ${timeoutMs} ms`));
    }, timeoutMs);
    const off = session.on(event, ((e: Parameters<Events[K]>[0]) => {
      clearTimeout(timer);
      off();
      resolve(e);
    }) as Events[K]);
  });
}

function errorsOf(...sessions: E2EChatSession[]): E2ESessionError[] {
  const errors: E2ESessionError[] = [];
  for (const s of sessions) s.on('error', (e) => errors.push(e));
  return errors;
}

describeApp('E2EChatSession: reconnection', () => {
  it('reconnects after the server drops its socket (a permission change) and receives again', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const bob = await loginUser(app, bot);
    const [a, b] = [await openSession(alice.client), await openSession(bob.client)];
    const errors = errorsOf(a, b);
    const { chat } = await alice.client.createChat({ name: 'Dropped', type: 'public' });
    await a.join({ chat_id: chat.id });
    await b.join({ chat_id: chat.id });

    const disconnected = next(b, 'disconnected');
    const reconnected = next(b, 'reconnected');
    await setLevel(app, bob.user.id, 1); // the server drops the user's sockets to apply the new level
    expect(await disconnected).toEqual({ reason: 'io server disconnect' });
    expect(await reconnected).toEqual({ recovered: false, chats: [chat.id] });
    expect(b.socket.connected).toBe(true);

    const inbox = collector(b, chat.id);
    await a.send(chat.id, 'after the drop');
    expect(plaintexts(await inbox.waitFor(1, (e) => e.kind === 'user'))).toEqual(['after the drop']);
    expect(errors).toEqual([]);
  });

  for (const who of ['the user', 'a bot'] as const) {
    it(`reconnects after a rename by ${who} (the server drops the user's sockets), and both sides read on`, async () => {
      const alice = await loginUser(app, bot, { level: 2 });
      const bob = await loginUser(app, bot);
      const [a, b] = [await openSession(alice.client), await openSession(bob.client)];
      const errors = errorsOf(a, b);
      const { chat } = await alice.client.createChat({ name: 'Renames', type: 'public' });
      await a.join({ chat_id: chat.id });
      await b.join({ chat_id: chat.id });

      const disconnected = next(b, 'disconnected');
      const reconnected = next(b, 'reconnected');
      const username = `rn${bob.user.id}${who === 'a bot' ? 'b' : 'u'}`;
      if (who === 'the user') await bob.client.updateMe({ username });
      else await bot.updateUser(bob.user.id, { username });
      expect(await disconnected).toEqual({ reason: 'io server disconnect' });
      expect(await reconnected).toEqual({ recovered: false, chats: [chat.id] });

      const inbox = collector(b, chat.id);
      await a.send(chat.id, 'after the rename');
      expect(plaintexts(await inbox.waitFor(1, (e) => e.kind === 'user'))).toEqual(['after the rename']);
      const inboxA = collector(a, chat.id);
      await b.send(chat.id, 'renamed speaks');
      expect(plaintexts(await inboxA.waitFor(1, (e) => e.kind === 'user'))).toEqual(['renamed speaks']);
      expect(errors).toEqual([]);
    });
  }

  it('reports a session refused for good on reconnection as closed, and ends its iterators', async () => {
    const carol = await loginUser(app, bot);
    const c = await openSession(carol.client);
    const iterator = c.messages();
    const pending = iterator.next();
    const closed = next(c, 'closed');
    await carol.client.logout(); // ends the session: its socket is dropped, and the handshake refuses it
    expect(await closed).toMatchObject({ reason: 'refused', code: 'ERR_UNAUTHENTICATED' });
    expect(await pending).toEqual({ value: undefined, done: true });
    expect(c.socket.connected).toBe(false);
    expect(c.socket.active).toBe(false);
    await expect(c.send(1, 'x')).rejects.toMatchObject({ code: 'CLOSED' });
  });
  // A dropped transport would be recovered, a new connection would not; with another session's
  // cookie the server recovers neither (nothing of the old session is replayed to it).
  for (const dropped of [true, false]) {
    it(`closes with session_changed when the socket comes back (${dropped ? 'after a dropped transport' : 'a new connection'}) as another login session`, async () => {
      const alice = await loginUser(app, bot, { level: 2 });
      const a = await openSession(alice.client);
      const { chat } = await alice.client.createChat({ name: 'Shared jar', type: 'public' });
      await a.join({ chat_id: chat.id });
      const inbox = collector(a, chat.id);
      await a.send(chat.id, 'an offset to recover from');
      await inbox.waitFor(1);

      // A second login of the same user in the same cookie jar (another tab of one browser): the
      // socket's next handshake sends the new session's cookie.
      const again = await loginUser(app, bot, { platformUserId: alice.platformUserId });
      expect(again.user.id).toBe(alice.user.id);
      const headers = a.socket.io.opts.extraHeaders as Record<string, string>;
      headers.cookie = again.client.cookieHeader() as string;
      const closed = next(a, 'closed');
      const events: string[] = [];
      a.on('reconnected', (e) => events.push(`reconnected ${e.recovered}`));
      if (dropped) a.socket.io.engine.close();
      else {
        a.socket.disconnect();
        a.socket.connect();
      }
      expect(await closed).toEqual({ reason: 'session_changed' });
      // Not recovered: the resync waits for the list, which names another session, and stops.
      expect(a.socket.recovered).toBe(false);
      expect(events).toEqual([]);
      expect(a.socket.connected).toBe(false);
      await expect(a.send(chat.id, 'x')).rejects.toMatchObject({ code: 'CLOSED' });
    });
  }
});

describe('the reconnection delay while timed out', () => {
  it('waits until the timeout ends, spread by up to a second, and at most 10 minutes (a timer cannot wait 30 days)', () => {
    expect(TERMINAL_CONNECT_CODES).not.toContain('ERR_TIMED_OUT');
    expect(timedOutRetryDelayMs(60, 0)).toBe(60_000);
    expect(timedOutRetryDelayMs(1, 0.5)).toBe(1_000 + TIMED_OUT_RETRY_SPREAD_MS / 2);
    expect(TIMED_OUT_RETRY_MAX_MS).toBe(600_000);
    expect(timedOutRetryDelayMs(600, 0.99)).toBe(TIMED_OUT_RETRY_MAX_MS);
    // The longest timeout (30 days): every 10 minutes, never setTimeout's overflow (then 1 ms).
    expect(timedOutRetryDelayMs(2_592_000, 0)).toBe(TIMED_OUT_RETRY_MAX_MS);
    // A refusal that does not say when the timeout ends.
    for (const missing of [undefined, null, '60', -1, Number.NaN]) {
      expect(timedOutRetryDelayMs(missing, 0)).toBe(TIMED_OUT_RETRY_MAX_MS);
    }
  });
});

describeApp('E2EChatSession: a timeout of its user', () => {
  // An app of its own with a clock the test moves: the timeout ends when the test says.
  const clock = new FakeClock(Date.now());
  let timedApp: TestApp;
  let timedBot: BotClient;
  beforeAll(async () => {
    timedApp = await startApp({ clock });
    timedBot = await testBot(timedApp);
  });
  afterAll(async () => {
    await timedApp?.close();
  });

  it('does not close the session: it waits for the timeout’s end the server gives, then reconnects', async () => {
    const dave = await loginUser(timedApp, timedBot);
    const s = await openSession(dave.client);
    const closed: unknown[] = [];
    s.on('closed', (e) => closed.push(e));
    const refusals: { code: string; data: unknown }[] = [];
    s.socket.on('connect_error', (err: Error & { data?: unknown }) =>
      refusals.push({ code: err.message, data: err.data }),
    );
    // The reconnections wait for the test's clock move: the first handshake after the drop reads
    // the clock a second before the timeout's end.
    const connectNow = s.socket.connect.bind(s.socket);
    let release = () => {};
    const moved = new Promise<void>((resolve) => {
      release = resolve;
    });
    s.socket.connect = () => {
      void moved.then(connectNow);
      return s.socket;
    };
    const disconnected = next(s, 'disconnected');
    const reconnected = next(s, 'reconnected', 20_000);

    const res = await operator(timedApp).post('/v1/admin/punishments/timeout', { user_id: dave.user.id, duration: 60 });
    expect(res.status).toBe(200);
    expect(await disconnected).toEqual({ reason: 'io server disconnect' });
    clock.advance(59_000);
    release();
    await expect.poll(() => refusals.length, { timeout: 10_000 }).toBeGreaterThan(0);
    // Not ERR_UNAUTHENTICATED (the end of the session, for good): the SDK tries again in a second.
    expect(refusals[0]).toEqual({ code: 'ERR_TIMED_OUT', data: { retry_after: 1 } });
    expect(closed).toEqual([]);
    // A new connection is refused alike, with when to come back.
    await expect(connect(dave.client, { reconnection: false })).rejects.toMatchObject({
      code: 'ERR_TIMED_OUT',
      retryAfter: 1,
    });

    clock.advance(1_000);
    expect(await reconnected).toEqual({ recovered: false, chats: [] });
    expect(s.socket.connected).toBe(true);
    expect(closed).toEqual([]);
  });
});

describeApp('E2EChatSession: resync after a reconnection that was not recovered', () => {
  it('re-enters only the chats the user is still a member of, and reports the others as left', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const o = await openSession(owner.client);
    const { chat: kept } = await owner.client.createChat({ name: 'Kept', type: 'public' });
    const { chat: leftElsewhere } = await owner.client.createChat({ name: 'Left elsewhere', type: 'public' });
    await o.join({ chat_id: kept.id });
    await o.join({ chat_id: leftElsewhere.id });
    const first = await loginUser(app, bot);
    const second = await loginUser(app, bot, { platformUserId: first.platformUserId });
    const [a, b] = [await openSession(first.client), await openSession(second.client)];
    const errors = errorsOf(o, a, b);
    for (const s of [a, b]) {
      await s.join({ chat_id: kept.id });
      await s.join({ chat_id: leftElsewhere.id });
    }

    a.socket.disconnect(); // a drop the server keeps no recovery state for
    await b.leave(leftElsewhere.id); // the other device leaves while this one is away
    const left = next(a, 'left');
    const reconnected = next(a, 'reconnected');
    a.socket.connect();
    expect(await left).toEqual({ chatId: leftElsewhere.id, reason: 'removed' });
    expect(await reconnected).toEqual({ recovered: false, chats: [kept.id] });

    // It did not join the chat again, and is back in the other one.
    const memberOf = (await second.client.listChats()).chats.map((c) => c.id);
    expect(memberOf).toContain(kept.id);
    expect(memberOf).not.toContain(leftElsewhere.id);
    const inbox = collector(a, kept.id);
    await o.send(kept.id, 'still here');
    expect(plaintexts(await inbox.waitFor(1, (e) => e.kind === 'user'))).toEqual(['still here']);
    expect(errors).toEqual([]);
  });

  it('does not make a member again of a chat left between the chat list and its re-entry', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const o = await openSession(owner.client);
    const { chat } = await owner.client.createChat({ name: 'Left meanwhile', type: 'public' });
    await o.join({ chat_id: chat.id });
    const first = await loginUser(app, bot);
    const second = await loginUser(app, bot, { platformUserId: first.platformUserId });
    const [a, b] = [await openSession(first.client), await openSession(second.client)];
    const errors = errorsOf(o, a, b);
    for (const s of [a, b]) await s.join({ chat_id: chat.id });

    a.socket.disconnect();
    // The other device leaves after the server's chat:list (which still lists the chat) and
    // before this session's room:join for it goes out.
    const emit = a.socket.emit.bind(a.socket) as (event: string, ...args: unknown[]) => unknown;
    let held = false;
    a.socket.emit = ((event: string, ...args: unknown[]) => {
      if (event !== 'room:join' || held) return emit(event, ...args);
      held = true;
      void b.leave(chat.id).then(() => emit(event, ...args));
      return a.socket;
    }) as typeof a.socket.emit;
    const left = next(a, 'left');
    const reconnected = next(a, 'reconnected');
    a.socket.connect();
    // The leave's room:left reaches this session's new socket too.
    expect(await left).toMatchObject({ chatId: chat.id });
    expect(await reconnected).toEqual({ recovered: false, chats: [] });
    expect(held).toBe(true);
    expect((await second.client.listChats()).chats.map((c) => c.id)).not.toContain(chat.id);
    expect(errors).toEqual([]);
  });

  it('goes on with a resync a drop cut short when the next connection is recovered, and receives in every chat', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const o = await openSession(owner.client);
    const { chat: first } = await owner.client.createChat({ name: 'Entered again', type: 'public' });
    const { chat: second } = await owner.client.createChat({ name: 'Not yet', type: 'public' });
    await o.join({ chat_id: first.id });
    await o.join({ chat_id: second.id });
    const a = await openSession((await loginUser(app, bot)).client);
    const errors = errorsOf(o, a);
    await a.join({ chat_id: first.id });
    await a.join({ chat_id: second.id });

    a.socket.disconnect(); // not recoverable: a full resync follows
    // The resync enters the first chat again. The server's room-entry limit refuses the second
    // (429, the resync waits out its retry_after), and the connection drops meanwhile, once the
    // socket has received something in the first chat (an offset to recover from).
    const emit = a.socket.emit.bind(a.socket) as (event: string, ...args: unknown[]) => unknown;
    const inFirst = collector(a, first.id);
    let refused = false;
    a.socket.emit = ((event: string, ...args: unknown[]) => {
      if (event !== 'room:join' || refused || (args[0] as { chat_id?: number }).chat_id !== second.id) {
        return emit(event, ...args);
      }
      refused = true;
      // The acknowledgement-with-timeout flags that emit() would have consumed.
      (a.socket as unknown as { flags: object }).flags = {};
      const ack = args.at(-1) as (err: unknown, answer: unknown) => void;
      void o
        .send(first.id, 'an offset')
        .then(() => inFirst.waitFor(1))
        .then(() => {
          ack(null, { ok: false, code: 'ERR_RATE_LIMITED', message: 'Too many.', retry_after: 60 });
          setImmediate(() => a.socket.io.engine.close()); // a network blip: the next connection is recovered
        });
      return a.socket;
    }) as typeof a.socket.emit;
    const reconnected = next(a, 'reconnected', 20_000);
    a.socket.connect();
    expect(await reconnected).toEqual({ recovered: true, chats: [first.id, second.id] });
    expect(refused).toBe(true);

    const inSecond = collector(a, second.id);
    await o.send(second.id, 'in the second chat');
    expect(plaintexts(await inSecond.waitFor(1, (e) => e.kind === 'user'))).toEqual(['in the second chat']);
    expect(errors).toEqual([]);
  });

  it('after a keying race lost while the socket was away (its room:key missed), the resync reads the key', async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const a = await openSession(alice.client);
    // A wait for room:key longer than this test: only reading the envelope again gets the key.
    const b = await openSession((await loginUser(app, bot)).client, { rekeyJitterMs: 1, keyWaitMs: 120_000 });
    const c = await openSession((await loginUser(app, bot)).client);
    const { chat } = await alice.client.createChat({ name: 'Lost race', type: 'public' });
    for (const s of [a, b, c]) await s.join({ chat_id: chat.id });
    const errors = errorsOf(a, b);
    const epoch = (b.epochOf(chat.id) ?? 0) + 1;

    // At the next epoch b shares first, but its socket drops before the share goes out; a keys the
    // epoch meanwhile (its room:key for b is lost), then b's share is refused with 409.
    let bShares: () => void = () => {};
    const bSharing = new Promise<void>((resolve) => {
      bShares = resolve;
    });
    const aKeyed = new Promise<void>((resolve) => {
      a.on('key', (e) => {
        if (e.chatId === chat.id && e.epoch === epoch) resolve();
      });
    });
    const aShare = a.client.shareKeys.bind(a.client);
    a.client.shareKeys = async (chatId, body) => {
      if (body.epoch === epoch) await bSharing;
      return aShare(chatId, body);
    };
    const bShare = b.client.shareKeys.bind(b.client);
    let lost = false;
    b.client.shareKeys = async (chatId, body) => {
      if (lost || body.epoch !== epoch) return bShare(chatId, body);
      b.socket.disconnect();
      bShares();
      await aKeyed;
      try {
        return await bShare(chatId, body);
      } catch (error) {
        lost = isApiError(error, 'ERR_EPOCH_ALREADY_KEYED');
        b.socket.connect();
        throw error;
      }
    };
    const bKey = next(b, 'key', 20_000);
    const reconnected = next(b, 'reconnected');
    await c.leave(chat.id);
    expect(await reconnected).toEqual({ recovered: false, chats: [chat.id] });
    expect(await bKey).toMatchObject({ chatId: chat.id, epoch, source: 'envelope' });
    expect(lost).toBe(true);
    expect(b.hasKey(chat.id)).toBe(true);

    const inbox = collector(b, chat.id);
    await a.send(chat.id, 'can you read this');
    expect(plaintexts(await inbox.waitFor(1, (e) => e.kind === 'user'))).toEqual(['can you read this']);
    expect(errors).toEqual([]);
  });

  it('after the resync, gives the current key to sessions that came while it was away', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const o = await openSession(owner.client);
    const { chat } = await owner.client.createChat({ name: 'Away', type: 'public' });
    await o.join({ chat_id: chat.id });
    const errors = errorsOf(o);

    o.socket.disconnect(); // the only key holder goes away
    const newcomer = await openSession((await loginUser(app, bot)).client, { keyWaitMs: 300 });
    errorsOf(newcomer);
    // Its portal:key_added reaches nobody who holds the key: it joins without one.
    expect((await newcomer.join({ chat_id: chat.id })).hasKey).toBe(false);

    const reconnected = next(o, 'reconnected');
    o.socket.connect();
    expect(await reconnected).toEqual({ recovered: false, chats: [chat.id] });
    expect(await newcomer.waitForKey(chat.id, 10_000)).toBe(true);
    const inbox = collector(o, chat.id);
    await newcomer.send(chat.id, 'thanks for the key');
    expect(plaintexts(await inbox.waitFor(1, (e) => e.kind === 'user'))).toEqual(['thanks for the key']);
    expect(errors).toEqual([]);
  });
});

describeApp('the socket: a reconnection refused after its recovery', () => {
  it("delivers nothing the refused handshake was sent on the next connection, which is another user's", async () => {
    const alice = await loginUser(app, bot, { level: 2 });
    const bob = await loginUser(app, bot);
    const carol = await loginUser(app, bot);
    const b = await openSession(bob.client);
    const { chat } = await alice.client.createChat({ name: 'Shared browser', type: 'public' });
    await b.join({ chat_id: chat.id });
    const r = await connect(alice.client);
    await joinRoom(r, { chat_id: chat.id });
    const sent = new Map<string, string>();
    const seen: { text: string; socketId: string | undefined }[] = [];
    r.on('message:new', (m) => seen.push({ text: sent.get(m.id) ?? m.id, socketId: r.id }));
    sent.set((await b.send(chat.id, 'before')).id, 'before');
    await expect.poll(() => seen.length).toBe(1);

    // The server restores alice's socket (and replays what it missed) and then refuses the
    // handshake: a store that stops answering during its middleware (ERR_SERVICE_UNAVAILABLE, which
    // the SDK retries).
    let refuse = true;
    app.services.realtime.io.use((socket, next) => {
      if (!refuse || !socket.recovered || socket.data.userId !== alice.user.id) return next();
      refuse = false;
      next(new Error('ERR_SERVICE_UNAVAILABLE'));
    });
    const refusals: string[] = [];
    r.on('connect_error', (err) => refusals.push(err.message));
    // A network blip: the Manager comes back after 1.5-4.5 s, with its recovery offset.
    r.io.reconnectionDelay(3000);
    r.io.engine.close();
    await expect.poll(() => r.connected).toBe(false);
    sent.set((await b.send(chat.id, 'for alice only')).id, 'for alice only');
    await expect.poll(() => refusals, { timeout: 15_000 }).toEqual(['ERR_SERVICE_UNAVAILABLE']);

    // Carol logs in in the same browser meanwhile: the retry carries her cookie, and connects afresh.
    (r.io.opts.extraHeaders as Record<string, string>).cookie = carol.client.cookieHeader() as string;
    await expect.poll(() => r.connected, { timeout: 15_000 }).toBe(true);
    expect(r.recovered).toBe(false);
    const carolSocket = r.id;
    await b.send(chat.id, 'after');
    // A barrier: a notification to carol, sent after 'after' by the same emitter (to a room of this
    // socket). Once it has arrived, a message:new sent to this socket before it would have too.
    const notes: string[] = [];
    r.on('notification:new', (n) => notes.push(n.title));
    const noted = await operator(app).post('/v1/admin/notifications', {
      title: 'After the message',
      body: 'x',
      type: 'info',
      user_id: carol.user.id,
    });
    expect(noted.status).toBe(200);
    await expect.poll(() => notes, { timeout: 15_000 }).toEqual(['After the message']);
    expect(r.id).toBe(carolSocket);
    expect(seen.filter((e) => e.socketId === carolSocket)).toEqual([]);
    r.disconnect();
  }, 30_000);
});
