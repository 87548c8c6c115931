import { expect, it } from 'vitest';
import { describeApp, type TestApp } from '../../server/test/support/app.js';
import { type BotClient, E2EChatSession, type E2ESessionError, ParlorClient } from '../src/index.js';
import { e2eSuite, loginUser, openSession, type TestUser } from './support.js';

let app: TestApp;
let bot: BotClient;
e2eSuite((started) => {
  ({ app, bot } = started);
});

/**
 * The same login session through a fetch that records every key share request, and answers the
 * next `refuse` of them with the server's 429 ERR_RATE_LIMITED body instead of sending them.
 */
function watchedClient(login: TestUser) {
  const shares: { status: number }[] = [];
  const state = { refuse: 0 };
  const client = new ParlorClient({
    baseUrl: app.url,
    apiKey: app.publicApiKey,
    headers: { ...login.client.headers },
    session: login.client.session,
    fetch: async (input, init) => {
      const share = init?.method === 'POST' && String(input).endsWith('/keys/share');
      if (share && state.refuse > 0) {
        state.refuse--;
        shares.push({ status: 429 });
        const body = { code: 'ERR_RATE_LIMITED', message: 'Too many requests; try again later.', retry_after: 1 };
        return new Response(JSON.stringify(body), { status: 429, headers: { 'content-type': 'application/json' } });
      }
      const res = await fetch(input, init);
      if (share) shares.push({ status: res.status });
      return res;
    },
  });
  return { client, shares, state };
}

describeApp('E2EChatSession: the server’s limits', () => {
  it('spends no share request on join when every session of the ring already holds the key', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const { chat } = await owner.client.createChat({ name: 'No extra share', type: 'public' });
    // A second session of the owner with a registered key: the ring has two sessions.
    await openSession((await loginUser(app, bot, { platformUserId: owner.platformUserId })).client);
    const watched = watchedClient(owner);
    const session = await E2EChatSession.open({ client: watched.client });
    const errors: E2ESessionError[] = [];
    session.on('error', (e) => errors.push(e));
    expect((await session.join({ chat_id: chat.id })).hasKey).toBe(true);
    await session.close(); // waits for the background share, if any
    // The keying share gave both sessions their envelope: no top-up for the other one.
    expect(watched.shares).toEqual([{ status: 200 }]);
    expect(errors).toEqual([]);
  });

  it('sends a keying share refused with ERR_RATE_LIMITED again after its retry_after, within keyWaitMs', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const { chat } = await owner.client.createChat({ name: 'Rate limited keying', type: 'public' });
    const watched = watchedClient(owner);
    const session = await E2EChatSession.open({ client: watched.client, keyWaitMs: 5000 });
    const errors: E2ESessionError[] = [];
    session.on('error', (e) => errors.push(e));
    watched.state.refuse = 1; // the share that keys the epoch, at join
    expect((await session.join({ chat_id: chat.id })).hasKey).toBe(true);
    expect(watched.shares).toEqual([{ status: 429 }, { status: 200 }]);
    await session.close();
    expect(errors).toEqual([]);

    // A retry_after past the bound is not waited for: the refusal reaches the caller.
    const other = await owner.client.createChat({ name: 'Rate limited, short wait', type: 'public' });
    const hurried = watchedClient(owner);
    const short = await E2EChatSession.open({ client: hurried.client, keyWaitMs: 500 });
    hurried.state.refuse = 1;
    await expect(short.join({ chat_id: other.chat.id })).rejects.toMatchObject({ code: 'ERR_RATE_LIMITED' });
    expect(hurried.shares).toEqual([{ status: 429 }]);
    await short.close();
  });

  it('sends a key share refused with ERR_RATE_LIMITED again after its retry_after', async () => {
    const owner = await loginUser(app, bot, { level: 2 });
    const { chat } = await owner.client.createChat({ name: 'Rate limited share', type: 'public' });
    const watched = watchedClient(owner);
    const holder = await E2EChatSession.open({ client: watched.client });
    const errors: E2ESessionError[] = [];
    holder.on('error', (e) => errors.push(e));
    try {
      await holder.join({ chat_id: chat.id });
      watched.state.refuse = 1; // the share for the newcomer (portal:key_added) is refused once
      const newcomer = await openSession((await loginUser(app, bot)).client, { keyWaitMs: 8000 });
      expect((await newcomer.join({ chat_id: chat.id })).hasKey).toBe(true);
      expect(watched.shares).toEqual([{ status: 200 }, { status: 429 }, { status: 200 }]);
      expect(errors).toEqual([]);
    } finally {
      await holder.close();
    }
  });
});
