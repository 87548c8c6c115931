import { Limits } from '@parlor/protocol';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeClock } from '../src/platform/clock.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyEpoch, keyedChat } from './support/chat-flows.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
/**
 * The app's clock: the embedded store's limit windows run on it. Redis's run on real time, where
 * these cases could not set the moments they need, so they run on the embedded stores (the Redis
 * limiter's refund has its own case in state.contract.ts).
 */
const clock = new FakeClock(Date.now());
beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

/** One owner with `count` keyed chats it has joined, and a send to any of them. */
async function keyedChats(count: number) {
  expect(count).toBeLessThanOrEqual(Limits.CHAT_SLOTS_ADMIN);
  const first = await keyedChat(app);
  const { owner } = first;
  const chats = [first];
  while (chats.length < count) {
    const created = await owner.client.post('/v1/portal/chats/create', {
      name: `Chat ${chats.length}`,
      type: 'public',
    });
    expect(created.status).toBe(200);
    const chatId: number = created.body.chat.id;
    expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
    chats.push({ owner, chatId, ...(await keyEpoch(owner, chatId)) });
  }
  let n = 0;
  const send = (i: number) => {
    const { chatId, chatKey, epoch } = chats[i] as (typeof chats)[number];
    n += 1;
    return owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch, `m${n}`),
    });
  };
  return Object.assign(send, { userId: owner.user.id });
}

const statuses = async (sends: Promise<{ status: number }>[]) => (await Promise.all(sends)).map((r) => r.status);
const times = <T>(n: number, f: (i: number) => T) => Array.from({ length: n }, (_, i) => f(i));

describeApp('POST /v1/portal/chats/{chat_id}/messages rate limits', () => {
  it.runIf(MODE === 'embedded')(
    'does not count sends refused by the global limit against the per-chat one of a chat they never reached',
    async () => {
      const send = await keyedChats(4);
      const perChat = Limits.MESSAGES_PER_CHAT;
      // The global allowance spent over chats 0-2, none of them over its own limit.
      expect(Limits.MESSAGES_GLOBAL).toBe(3 * perChat);
      expect(await statuses(times(Limits.MESSAGES_GLOBAL, (i) => send(i % 3)))).toEqual(
        times(Limits.MESSAGES_GLOBAL, () => 200),
      );
      // Later in the global window, a whole per-chat allowance of sends to chat 3, all refused by the
      // global limit, 4 s later (were they spent, chat 3 would stay closed 4 s past the global window).
      clock.advance(4_000);
      const refused = await Promise.all(times(perChat, () => send(3)));
      expect(refused.map((r) => [r.status, r.body.code])).toEqual(times(perChat, () => [429, 'ERR_RATE_LIMITED']));
      // Once the global window is over (the wait it told), chat 3 has its whole allowance: nothing was sent there.
      clock.advance(Math.max(...refused.map((r) => r.body.retry_after as number)) * 1000);
      expect(await statuses(times(perChat, () => send(3)))).toEqual(times(perChat, () => 200));
      expect((await send(3)).status).toBe(429);
    },
  );

  it.runIf(MODE === 'embedded')(
    'spends nothing for a send the limit refuses: a point given back meanwhile is usable again',
    async () => {
      const send = await keyedChats(4);
      const global = app.state.limiter('msg-user', Limits.MESSAGES_GLOBAL, Limits.MESSAGE_WINDOW_MS);
      const key = String(send.userId);
      expect(await statuses(times(Limits.MESSAGES_GLOBAL - 1, (i) => send(i % 3)))).toEqual(
        times(Limits.MESSAGES_GLOBAL - 1, () => 200),
      );
      // Another send takes the last point (in flight on another request) …
      const inFlight = await global.consume(key);
      expect(inFlight.allowed).toBe(true);
      // … one sent meanwhile is refused …
      expect((await send(3)).status).toBe(429);
      // … and the first gives its point back (refused by the per-chat limit, say): one send is left.
      await global.refund(key, inFlight.window);
      expect((await send(3)).status).toBe(200);
      expect((await send(3)).status).toBe(429);
    },
  );

  it.runIf(MODE === 'embedded')(
    'answers the longer wait when both limits refuse, so a retry after retry_after goes through',
    async () => {
      const send = await keyedChats(4);
      // Chat 0's window opens 5 s after the global one; that one ends, and the next is spent on chats 1-3.
      expect((await send(1)).status).toBe(200);
      clock.advance(5_000);
      expect(await statuses(times(Limits.MESSAGES_PER_CHAT, () => send(0)))).toEqual(
        times(Limits.MESSAGES_PER_CHAT, () => 200),
      );
      clock.advance(5_500);
      expect(await statuses(times(Limits.MESSAGES_GLOBAL, (i) => send(1 + (i % 3))))).toEqual(
        times(Limits.MESSAGES_GLOBAL, () => 200),
      );
      // Chat 0's window ends in 4 s, the global one in 9.5 s.
      clock.advance(500);
      const both = await send(0);
      expect(both.status).toBe(429);
      expect(both.body).toEqual({ code: 'ERR_RATE_LIMITED', message: expect.any(String), retry_after: 10 });
      expect(both.headers.get('retry-after')).toBe('10');
      clock.advance(both.body.retry_after * 1000);
      expect((await send(0)).status).toBe(200);
    },
  );
});
