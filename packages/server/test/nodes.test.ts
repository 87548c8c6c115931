import { Limits } from '@parlor/protocol';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type Backing, createBacking, describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { bundle, join, keyedChat, member } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { createBot, login, operator } from './support/flows.js';
import { closeAllSockets, disconnected } from './support/sockets.js';

/** Two nodes over one PostgreSQL database and one Redis: the cluster mode of DESIGN.md section 1. */
describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'))('two nodes on one PostgreSQL + Redis', () => {
  let backing: Backing;
  let a: TestApp;
  let b: TestApp;

  beforeAll(async () => {
    backing = await createBacking();
    a = await startApp({ backing });
    b = await startApp({ backing });
  });
  afterAll(async () => {
    closeAllSockets();
    await a?.close();
    await b?.close();
    await backing?.release();
  });

  it('shares sessions: a login on node A works on node B, and ending it on A ends it on B', async () => {
    const { client, user } = await login(a);
    const onB = client.on(b);
    expect((await onB.get('/v1/users/me')).body.user.id).toBe(user.id);
    await client.post('/v1/authentication/logout');
    expect((await onB.get('/v1/users/me')).status).toBe(401);
  });

  it('shares login codes: requested on A, fetched by the bot on B, verified on A', async () => {
    const bot = (await createBot(a)).client;
    const botOnB = new Client(b.url, bot.ip, bot.apiKey);
    const site = new Client(a.url, nextIp(), a.publicApiKey);
    await site.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: 'two-node-1' });
    const fetched = await botOnB.post('/v1/authentication/bot/login-code', {
      platform: 'platform_a',
      platform_user_id: 'two-node-1',
      platform_username: 'two',
      platform_avatar_url: '',
    });
    expect(fetched.body.code).toMatch(/^[A-Z0-9]{8}$/);
    expect((await site.post('/v1/authentication/verify', { code: fetched.body.code })).status).toBe(200);
    // Used on A, so gone on B too.
    const again = await new Client(b.url, site.ip, b.publicApiKey).post('/v1/authentication/verify', {
      code: fetched.body.code,
    });
    expect(again.body.code).toBe('ERR_INVALID_CODE');
  });

  it('shares the pending-code limit of an address across nodes', async () => {
    const ip = nextIp();
    const nodes = [a, b, a, b, a].map((n) => new Client(n.url, ip, n.publicApiKey));
    for (const [i, c] of nodes.entries()) {
      expect(
        (await c.post('/v1/authentication/request', { platform: 'platform_a', platform_user_id: `shared-${ip}-${i}` }))
          .status,
      ).toBe(200);
    }
    const sixth = await new Client(b.url, ip, b.publicApiKey).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: `shared-${ip}-x`,
    });
    expect(sixth.status).toBe(429);
    expect(Limits.PENDING_WEB_CODES_PER_IP).toBe(nodes.length);
  });

  it('delivers messages sent on node A to sockets on node B, in order', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(a);
    const reader = await member(b);
    expect((await join(reader, { chat_id: chatId })).ok).toBe(true);
    const sent: string[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
        content: bundle(chatKey, chatId, epoch, `n${i}`),
      });
      expect(res.status).toBe(200);
      sent.push(res.body.id);
    }
    await reader.socket.next('message:new', (m) => m.id === sent[9], 10_000);
    const received = reader.socket.received.filter((r) => r.event === 'message:new').map((r) => r.payload.id);
    expect(received).toEqual(sent);
  });

  it('drops, on node B, the socket of a session ended on node A', async () => {
    const onB = await member(b);
    const onA = onB.client.on(a);
    const gone = disconnected(onB.socket, 10_000);
    await onA.post('/v1/authentication/logout', {});
    await gone;
  });

  it('drops, on node B, the sockets of a user whose level changed on node A', async () => {
    const onB = await member(b, { level: 2 });
    const gone = disconnected(onB.socket, 10_000);
    expect((await operator(a).post(`/v1/admin/users/${onB.user.id}/update`, { permission_level: 0 })).status).toBe(200);
    await gone;
  });

  it('delivers a notification sent through node A to the recipient socket on node B', async () => {
    const target = await member(b);
    const sent = await operator(a).post('/v1/admin/notifications', {
      title: 'Across nodes',
      body: 'Hello from **A**.',
      type: 'info',
      user_id: target.user.id,
    });
    expect(sent.status).toBe(200);
    const note = await target.socket.next('notification:new', (n) => n.title === 'Across nodes', 10_000);
    expect(note).toMatchObject({ title: 'Across nodes', body: 'Hello from **A**.', type: 'info', read_at: null });
  });

  it('shares bot rate limits across nodes', async () => {
    const { apiKey } = await createBot(a, { rate_limit_per_hour: 4 });
    const [onA, onB] = [new Client(a.url, nextIp(), apiKey), new Client(b.url, nextIp(), apiKey)];
    for (const c of [onA, onB, onA, onB]) expect((await c.get('/v1/bot/me')).status).toBe(200);
    expect((await onA.get('/v1/bot/me')).status).toBe(429);
    expect((await onB.get('/v1/bot/me')).status).toBe(429);
  });
});

describeApp('restart', () => {
  // Two app starts inside the test: each may take tens of seconds on a loaded machine.
  it('keeps accounts, sessions, bots and chat history across a restart', async () => {
    const backing = await createBacking();
    try {
      const first = await startApp({ backing, persistEmbedded: true });
      const { client, user } = await login(first);
      const { apiKey } = await createBot(first, { name: 'Survivor' });
      const { owner, chatId, chatKey, epoch } = await keyedChat(first);
      const content = bundle(chatKey, chatId, epoch, 'still here');
      const sent = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, { content });
      closeAllSockets();
      await first.close();
      const second = await startApp({ backing, persistEmbedded: true });
      try {
        const again = Object.assign(new Client(second.url, client.ip), { cookie: client.cookie });
        expect((await again.get('/v1/users/me')).body.user).toMatchObject({ id: user.id, username: user.username });
        expect((await new Client(second.url, nextIp(), apiKey).get('/v1/bot/me')).body.name).toBe('Survivor');
        const reader = Object.assign(new Client(second.url, owner.client.ip), { cookie: owner.client.cookie });
        const history = await reader.get(`/v1/portal/chats/${chatId}/messages`);
        expect(history.body.messages).toEqual([expect.objectContaining({ id: sent.body.id, content })]);
      } finally {
        await second.close();
      }
    } finally {
      await backing.release();
    }
  }, 120_000);
});
