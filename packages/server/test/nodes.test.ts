import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Limits } from '@parlor/protocol';
import { Redis } from 'ioredis';
import { io, type Socket } from 'socket.io-client';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { NODE_ALIVE_TTL_MS } from '../src/platform/node-presence.js';
import {
  type Backing,
  createBacking,
  describeApp,
  MODE,
  type Nodes,
  startApp,
  startNodes,
  type TestApp,
} from './support/app.js';
import { bundle, join, keyEpoch, keyedChat, member, shareKey } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows } from './support/faults.js';
import { createBot, createLoginBot, login, operator } from './support/flows.js';
import { runNode, waitFor } from './support/process.js';
import { closeAllSockets, connectSocket, disconnected } from './support/sockets.js';
import { holdReader } from './support/stream-reader.js';

const MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../dist/main.js');
const clusterOnly = describe.skipIf(MODE !== 'cluster' || !inject('servicesAvailable'));

/** Whether `p` resolves (true) or rejects (false). */
const settles = (p: Promise<unknown>) =>
  p.then(
    () => true,
    () => false,
  );

/** Two nodes over one PostgreSQL database and one Redis: the cluster mode of DESIGN.md section 1. */
clusterOnly('two nodes on one PostgreSQL + Redis', () => {
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
    const bot = await createLoginBot(a);
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

  it('refuses login codes on B to a bot made community on A, from its next request (bots are read per request, never cached)', async () => {
    const { id, apiKey } = await createBot(a, { name: 'Demoted on A', type: 'official' });
    const onB = new Client(b.url, nextIp(), apiKey);
    const send = () => onB.post('/v1/authentication/bot/send-code', { platform: 'platform_a', platform_user_id: 'x' });
    // Official: past the type check (the identity is unknown, so 404 and nothing made).
    expect((await send()).body.code).toBe('ERR_PLATFORM_IDENTITY_NOT_FOUND');
    expect((await operator(a).post(`/v1/admin/bots/${id}/update`, { type: 'community' })).status).toBe(200);
    const refused = await send();
    expect([refused.status, refused.body.code]).toEqual([403, 'ERR_FORBIDDEN']);
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
    expect((await onA.post('/v1/authentication/logout', {})).status).toBe(200);
    expect(await gone).toBe('io server disconnect');
  });

  it("drops, on node B, the socket of a session ended on node A when A's drop message to B was lost", async () => {
    const onB = await member(b);
    const onA = onB.client.on(a);
    // A's adapter fails to send its next socket drop (DISCONNECT_SOCKETS), as in a Redis error.
    const adapter = a.services.realtime.io.of('/').adapter as unknown as {
      doPublish(message: { type: number }): Promise<string>;
    };
    const send = adapter.doPublish;
    let lost = 0;
    adapter.doPublish = (message) => {
      if (message.type !== 6 || lost > 0) return send(message);
      lost += 1;
      return Promise.reject(new Error('publish lost'));
    };
    try {
      const gone = disconnected(onB.socket, 10_000);
      expect((await onA.post('/v1/authentication/logout', {})).status).toBe(200);
      expect(await gone).toBe('io server disconnect');
      expect(lost).toBe(1);
    } finally {
      adapter.doPublish = send;
    }
  });

  it('drops, on node B, the sockets of a user whose level changed on node A', async () => {
    const onB = await member(b, { level: 2 });
    const gone = disconnected(onB.socket, 10_000);
    expect((await operator(a).post(`/v1/admin/users/${onB.user.id}/update`, { permission_level: 0 })).status).toBe(200);
    await gone;
  });

  it('drops, on node B, the sockets of users timed out and banned on node A; B refuses their handshakes as A does', async () => {
    const [timedOut, banned] = [await member(b), await member(b)];
    const gone = [disconnected(timedOut.socket, 10_000), disconnected(banned.socket, 10_000)];
    const punish = (kind: string, userId: number) =>
      operator(a).post(`/v1/admin/punishments/${kind}`, { user_id: userId, duration: 60 });
    expect((await punish('timeout', timedOut.user.id)).status).toBe(200);
    expect((await punish('ban', banned.user.id)).status).toBe(200);
    await Promise.all(gone);
    const handshake = (client: Client) =>
      connectSocket(b.url, client).then(
        () => 'connected',
        (err: Error) => err.message,
      );
    // The timed-out session lives on (it connects again when the timeout ends); the ban ended the other.
    expect(await handshake(timedOut.client)).toBe('ERR_TIMED_OUT');
    expect(await handshake(banned.client)).toBe('ERR_UNAUTHENTICATED');
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

clusterOnly('a node that shuts down (a rolling deploy), seen from the other node', () => {
  let backing: Backing | null = null;
  let a: TestApp | null = null;
  let b: TestApp | null = null;
  const opened: Socket[] = [];
  afterEach(async () => {
    for (const s of opened.splice(0)) s.close();
    closeAllSockets();
    await a?.close().catch(() => {});
    await b?.close().catch(() => {});
    await backing?.release();
    a = b = backing = null;
  });

  it("drops only its own sockets, which reconnect to the other node and recover; the other node's stay", async () => {
    backing = await createBacking();
    const nodeA = await startApp({ backing });
    a = nodeA;
    b = await startApp({ backing });
    const chat = await keyedChat(b);
    const send = async (text: string) => {
      const res = await chat.owner.client.post(`/v1/portal/chats/${chat.chatId}/messages`, {
        content: bundle(chat.chatKey, chat.chatId, chat.epoch, text),
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.id as string;
    };
    // On B: a member who must not notice A going away.
    const onB = await member(b);
    expect((await join(onB, { chat_id: chat.chatId })).ok).toBe(true);
    const reasonsOnB: string[] = [];
    onB.socket.on('disconnect', (r) => reasonsOnB.push(r));
    // On A: a member whose client reconnects by itself (as the SDK's does), and whom the load
    // balancer sends to B once A is gone.
    const mover = await member(nodeA);
    mover.socket.close();
    const socket = io(nodeA.url, {
      transports: ['websocket'],
      extraHeaders: { cookie: `psession=${mover.client.cookie}` },
      forceNew: true,
      reconnectionDelay: 1_000,
      randomizationFactor: 0,
    });
    opened.push(socket);
    const ids: string[] = [];
    socket.io.on('packet', (p: { type: number; data?: any[] }) => {
      if (p.type === 2 && p.data?.[0] === 'message:new' && p.data[1].type === 'user') ids.push(p.data[1].id);
    });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
    });
    expect(((await socket.emitWithAck('room:join', { chat_id: chat.chatId })) as { ok: boolean }).ok).toBe(true);
    // On A: a member whose client does not come back: B's members hear it go offline.
    const leaver = await member(nodeA);
    expect((await join(leaver, { chat_id: chat.chatId })).ok).toBe(true);
    const one = await send('one');
    await expect.poll(() => ids.includes(one)).toBe(true);

    const dropped = new Promise<string>((resolve) =>
      socket.once('disconnect', (reason) => {
        (socket.io as unknown as { uri: string }).uri = b?.url ?? '';
        resolve(reason);
      }),
    );
    // Connected again (on B): the namespace's connect, after the handshake and the recovery.
    const back = dropped.then(() => new Promise<void>((resolve) => socket.once('connect', () => resolve())));
    const closing = nodeA.close();
    a = null;
    // A transport close, which the client recovers from by itself (a server-side disconnect would
    // be "io server disconnect", after which it stays away).
    expect(await dropped).toBe('transport close');
    const missed = await send('missed');
    await closing;
    await back;
    expect(socket.recovered).toBe(true);
    const after = await send('after');
    await expect.poll(() => ids.includes(after)).toBe(true);
    expect(ids).toEqual([one, missed, after]);

    await chat.owner.socket.next('portal:presence', (p) => p.session_id === leaver.sessionId && p.online === false);
    const again = await join(chat.owner, { chat_id: chat.chatId });
    const listed = (again.members as { session_id: number }[]).map((m) => m.session_id);
    expect(listed).toContain(mover.sessionId);
    expect(listed).not.toContain(leaver.sessionId);
    expect({ connected: onB.socket.connected, reasons: reasonsOnB }).toEqual({ connected: true, reasons: [] });
  }, 60_000);
});

clusterOnly('connection state recovery on a node whose stream reader is behind', () => {
  let backing: Backing;
  let a: TestApp;
  let b: TestApp;
  const opened: Socket[] = [];
  beforeAll(async () => {
    backing = await createBacking();
    a = await startApp({ backing });
    b = await startApp({ backing });
  });
  afterAll(async () => {
    for (const s of opened) s.close();
    closeAllSockets();
    await a?.close();
    await b?.close();
    await backing?.release();
  });

  for (const when of ['once connected', 'during the handshake'] as const) {
    it(`replays each missed event once and in order, its node delivering them late (${when})`, async () => {
      const who = await login(a);
      const notify = async (title: string) => {
        const res = await operator(a).post('/v1/admin/notifications', {
          title,
          body: title,
          type: 'info',
          user_id: who.user.id,
        });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        return res.body.id as number;
      };
      const socket = io(b.url, {
        transports: ['websocket'],
        extraHeaders: { cookie: `psession=${who.client.cookie}` },
        reconnection: false,
        forceNew: true,
      });
      opened.push(socket);
      const ids: number[] = [];
      socket.io.on('packet', (p: { type: number; data?: any[] }) => {
        if (p.type === 2 && p.data?.[0] === 'notification:new') ids.push(p.data[1].id);
      });
      const connected = () =>
        new Promise<string | null>((resolve) => {
          socket.once('connect', () => resolve(null));
          socket.once('connect_error', (err) => resolve(err.message));
        });
      expect(await connected()).toBeNull();
      // A first event gives the client its recovery offset.
      const one = await notify('one');
      await expect.poll(() => ids.includes(one)).toBe(true);

      // The client drops; meanwhile node A notifies it twice, and node B's reader has read neither.
      const sid = socket.id ?? '';
      socket.io.engine.close();
      await expect.poll(() => b.services.realtime.io.of('/').sockets.has(sid)).toBe(false);
      const reader = holdReader(b);
      try {
        const missed = [await notify(`missed ${who.user.id} 1`), await notify(`missed ${who.user.id} 2`)];
        await expect.poll(() => reader.holds(`missed ${who.user.id} 2`)).toBe(true);
        // Back on node B, whose reader delivers them once the socket is connected, or while its
        // handshake runs (a middleware after the app's own).
        let armed = when === 'during the handshake';
        b.services.realtime.io.use((s, next) => {
          if (armed && s.recovered) {
            armed = false;
            reader.release();
          }
          next();
        });
        const back = connected();
        socket.connect();
        expect(await back).toBeNull();
        expect(socket.recovered).toBe(true);
        expect(armed).toBe(false);
        reader.release();
        const last = await notify('last');
        await expect.poll(() => ids.includes(last)).toBe(true);
        // From the first on: a notification of the login, sent through node A's stream, may reach
        // node B's new socket after it connected, before `one`.
        expect(ids.slice(ids.indexOf(one))).toEqual([one, ...missed, last]);
      } finally {
        reader.release();
      }
    });
  }
});

clusterOnly('a node that shuts down with a client that does not answer', () => {
  let backing: Backing | null = null;
  let a: TestApp | null = null;
  let b: TestApp | null = null;
  afterEach(async () => {
    closeAllSockets();
    await a?.close().catch(() => {});
    await b?.close().catch(() => {});
    await backing?.release();
    a = b = backing = null;
  });

  it("still tells the other node's members that the client's session went offline", async () => {
    backing = await createBacking();
    const nodeA = await startApp({ backing });
    a = nodeA;
    b = await startApp({ backing });
    const chat = await keyedChat(b);
    // On A: a member in the chat over long-polling, who stops polling (its connection cannot close).
    const stuck = await member(nodeA);
    stuck.socket.close();
    const client = await pollingClient(nodeA.url, stuck.client.cookie ?? '');
    await client.emit('room:join', { chat_id: chat.chatId });
    await chat.owner.socket.next('portal:presence', (p) => p.session_id === stuck.sessionId && p.online === true);

    await nodeA.close();
    a = null;

    await chat.owner.socket.next('portal:presence', (p) => p.session_id === stuck.sessionId && p.online === false);
  }, 60_000);
});

/**
 * A Socket.IO client over raw HTTP long-polling that polls only when told: between polls the
 * server cannot write to it or close it (a peer that stopped answering).
 */
async function pollingClient(base: string, cookie: string) {
  const headers = { cookie: `psession=${cookie}` };
  const url = (sid?: string) => `${base}/socket.io/?EIO=4&transport=polling${sid ? `&sid=${sid}` : ''}`;
  const open = await (await fetch(url(), { headers })).text();
  const { sid } = JSON.parse(open.slice(1)) as { sid: string };
  const post = async (packet: string) => {
    const res = await fetch(url(sid), { method: 'POST', headers, body: packet });
    expect(await res.text()).toBe('ok');
  };
  // The namespace's connect, answered on the next poll ("40{...}"; "44..." would be a refusal).
  await post('40');
  expect(await (await fetch(url(sid), { headers })).text()).toMatch(/^40\{/);
  return { emit: (event: string, payload: unknown) => post(`42${JSON.stringify([event, payload])}`) };
}

clusterOnly('a node that is alive for Redis but does not answer (a stopped process)', () => {
  let backing: Backing | null = null;
  let a: TestApp | null = null;
  let child: ReturnType<typeof runNode> | null = null;
  const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-frozen-node-'));
  afterAll(async () => {
    closeAllSockets();
    if (child) {
      child.child.kill('SIGCONT');
      child.child.kill('SIGKILL');
      await child.exited;
    }
    await a?.close();
    await backing?.release();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('answers room:join ok on a healthy node, with the presence this node holds, while another node is stopped', async () => {
    backing = await createBacking();
    const node = await startApp({ backing });
    a = node;
    // The second node: a process of the built server (dist/main.js), stopped with SIGSTOP below;
    // its Redis connections stay open, so it still counts as a node that will answer.
    child = runNode([MAIN], {
      DATA_DIR: dataDir,
      PORT: '0',
      DATABASE_URL: backing.databaseUrl ?? '',
      REDIS_URL: backing.redisUrl ?? '',
      REDIS_PREFIX: backing.redisPrefix,
      PUBLIC_API_KEY: node.publicApiKey,
      OPERATOR_TOKEN: node.operatorToken,
    });
    await waitFor(() => /serving http/.test(child?.out() ?? ''), 60_000);
    const adapter = node.services.realtime.io.of('/').adapter as unknown as { serverCount(): Promise<number> };
    await expect.poll(() => adapter.serverCount(), { timeout: 20_000 }).toBe(2);

    const { chatId, owner } = await keyedChat(node);
    const guest = await member(node);
    child.child.kill('SIGSTOP');

    const ack = await join(guest, { chat_id: chatId });
    expect(ack.ok, JSON.stringify(ack)).toBe(true);
    expect((ack.members as { session_id: number }[]).map((m) => m.session_id).sort((x, y) => x - y)).toEqual(
      [owner.sessionId, guest.sessionId].sort((x, y) => x - y),
    );
    const rows = await countRows(
      node,
      `select count(*) as n from chat_members where chat_id = ${chatId} and user_id = ${guest.user.id} and left_at is null`,
    );
    expect(rows).toBe(1);
    // A leave on the healthy node is answered and announced too.
    const leave = (await guest.socket.emitWithAck('room:leave', { chat_id: chatId })) as { ok: boolean };
    expect(leave.ok).toBe(true);
    await owner.socket.next('portal:presence', (p) => p.session_id === guest.sessionId && p.online === false);
  }, 120_000);
});

clusterOnly('room changes of another node while this node reads the stream late', () => {
  let nodes: Nodes;
  let a: TestApp;
  let b: TestApp;
  beforeAll(async () => {
    nodes = await startNodes();
    ({ a, b } = nodes);
  });
  afterAll(async () => {
    closeAllSockets();
    await nodes?.close();
  });

  for (const action of ['kick', 'ban', 'leave'] as const) {
    it(`a ${action} on A of a member whose socket is on B, whose reader is behind: the chat hears its session go offline`, async () => {
      const { owner, chatId } = await keyedChat(a);
      const guest = await member(b);
      expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
      await owner.socket.next('portal:presence', (p) => p.session_id === guest.sessionId && p.online === true);
      // B's reader holds the removal's socketsLeave, while B answers the cross-node reads at once.
      const reader = holdReader(b);
      try {
        if (action === 'leave') {
          // Left through a socket of the same session on A (one in no chat room).
          const onA = await connectSocket(a.url, guest.client);
          const left = (await onA.emitWithAck('room:leave', { chat_id: chatId })) as { ok: boolean };
          expect(left.ok).toBe(true);
        } else {
          const res = await owner.client.post(`/v1/portal/chats/${chatId}/${action}`, { user_id: guest.user.id });
          expect(res.status, JSON.stringify(res.body)).toBe(200);
        }
        await expect.poll(() => reader.count() > 0).toBe(true);
      } finally {
        reader.release();
      }
      await owner.socket.next('portal:presence', (p) => p.session_id === guest.sessionId && p.online === false);
      const again = await join(owner, { chat_id: chatId });
      expect((again.members as { session_id: number }[]).map((m) => m.session_id)).not.toContain(guest.sessionId);
    });
  }

  it('a kick on A of members on B (reader not held, five in a row): each session is said offline once, after its online', async () => {
    const { owner, chatId } = await keyedChat(a);
    const kicked: number[] = [];
    const closed: string[] = [];
    for (let i = 0; i < 5; i++) {
      const guest = await member(b);
      kicked.push(guest.sessionId);
      expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
      await owner.socket.next('portal:presence', (p) => p.session_id === guest.sessionId && p.online === true);
      const res = await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: guest.user.id, reason: 'x' });
      expect(res.status).toBe(200);
      await owner.socket.next('portal:presence', (p) => p.session_id === guest.sessionId && p.online === false);
      closed.push(guest.socket.id ?? '');
      guest.socket.close();
    }
    // Barrier: once B has dropped the kicked sessions' sockets (whose disconnect would say them
    // offline a second time, from B, if B still had them in the room), a session joins through B:
    // B's deltas reach the owner's socket on A in the order B sent them, so a late offline of a
    // kicked session sent by B arrives before this online.
    const nsB = b.services.realtime.io.of('/');
    await expect.poll(() => closed.filter((id) => nsB.sockets.has(id))).toEqual([]);
    const last = await member(b);
    expect((await join(last, { chat_id: chatId })).ok).toBe(true);
    await owner.socket.next('portal:presence', (p) => p.session_id === last.sessionId && p.online === true);
    // Every presence delta the owner heard of each kicked session, from before its join to now.
    const heard = owner.socket.received
      .filter((r) => r.event === 'portal:presence' && r.payload.chat_id === chatId)
      .map((r) => r.payload as { session_id: number; online: boolean });
    const perSession = kicked.map((sessionId) => {
      const seq = heard.filter((p) => p.session_id === sessionId).map((p) => p.online);
      return {
        sessionId,
        seq,
        offline: seq.filter((online) => !online).length,
        offlineAfterLastOnline: seq.lastIndexOf(false) > seq.lastIndexOf(true) && seq.includes(true),
      };
    });
    expect(perSession).toEqual(
      kicked.map((sessionId) => ({
        sessionId,
        seq: expect.anything(),
        offline: 1,
        offlineAfterLastOnline: true,
      })),
    );
  });

  it('kicked on A, joining again at once through B, whose reader is behind: the socket stays in the room and hears the chat', async () => {
    const { owner, chatId } = await keyedChat(a);
    const guest = await member(b);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    const reader = holdReader(b);
    let late: NodeJS.Timeout | undefined;
    try {
      const kick = await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: guest.user.id, reason: 'x' });
      expect(kick.status).toBe(200);
      await expect.poll(() => reader.count() > 0).toBe(true);
      // The reader catches up half a second later, while the join below runs.
      late = setTimeout(() => reader.release(), 500);
      // A kick is no ban: the guest joins again at once, on B, which has not applied the kick's leave.
      const again = await join(guest, { chat_id: chatId });
      expect(again.ok, JSON.stringify(again)).toBe(true);
    } finally {
      clearTimeout(late);
      reader.release();
    }
    const { chatKey, epoch } = await keyEpoch(owner, chatId);
    const sent = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, {
      content: bundle(chatKey, chatId, epoch, 'welcome back'),
    });
    expect(sent.status).toBe(200);
    const heard = await settles(guest.socket.next('message:new', (m) => m.id === sent.body.id));
    const inRoom = b.services.realtime.io
      .of('/')
      .adapter.rooms.get(`chat:${chatId}`)
      ?.has(guest.socket.id ?? '');
    expect({ heard, inRoom }).toEqual({ heard: true, inRoom: true });
  });

  it('keys reach a member whose socket is on the other node (key_added, room:key)', async () => {
    const chat = await keyedChat(a);
    const onB = await member(b);
    expect((await join(onB, { chat_id: chat.chatId })).ok).toBe(true);
    await chat.owner.socket.next('portal:key_added', (e) => e.session_id === onB.sessionId);
    await shareKey({ ...chat.owner, client: chat.owner.client.on(b) }, chat, [onB]);
    await onB.socket.next('room:key', (e) => e.chat_id === chat.chatId && e.epoch === chat.epoch);
  });

  it('gives unique ids and consistent history pages while both nodes send', async () => {
    const chat = await keyedChat(a);
    const { owner, chatId, chatKey, epoch } = chat;
    const others = [await member(b), await member(a)];
    for (const o of others) expect((await join(o, { chat_id: chatId })).ok).toBe(true);
    await shareKey(owner, chat, others);
    const senders = [owner.client, owner.client.on(b), ...others.flatMap((o) => [o.client.on(a), o.client.on(b)])];
    const ids: string[] = [];
    const walks: string[][] = [];
    let sending = true;
    // Rounds 3 to 5 wait for a walk that found messages to end, so at least one walk reads a
    // history that is there in part: neither empty nor the whole.
    let walked = () => {};
    const partWalked = new Promise<void>((resolve) => {
      walked = resolve;
    });
    const sendAll = (async () => {
      try {
        for (let round = 0; round < 6; round++) {
          if (round === 3) await partWalked;
          const res = await Promise.all(
            senders.map((c, i) =>
              c.post(`/v1/portal/chats/${chatId}/messages`, {
                content: bundle(chatKey, chatId, epoch, `${round}.${i}`),
              }),
            ),
          );
          for (const r of res) ids.push(r.body.id);
        }
      } finally {
        sending = false;
      }
    })();
    // History read from the newest down, page by page, alternating nodes, while the sends go on.
    while (sending) {
      const walk: string[] = [];
      let before: string | undefined;
      for (;;) {
        const q = before ? `?limit=5&before=${before}` : '?limit=5';
        const page = await (before ? owner.client.on(b) : owner.client).get(`/v1/portal/chats/${chatId}/messages${q}`);
        const got = (page.body.messages as { id: string }[]).map((m) => m.id);
        if (got.length === 0) break;
        walk.push(...got);
        before = got.at(-1);
      }
      walks.push(walk);
      if (walk.length > 0) walked();
    }
    await sendAll;
    expect(new Set(ids).size).toBe(senders.length * 6);
    const all = (
      (await owner.client.get(`/v1/portal/chats/${chatId}/messages?limit=100`)).body.messages as { id: string }[]
    ).map((m) => m.id);
    expect(all).toHaveLength(ids.length);
    // At least one walk overlapped the sends: it found some messages, not all of them.
    expect(walks.filter((walk) => walk.length > 0 && walk.length < all.length)).not.toEqual([]);
    for (const walk of walks.filter((w) => w.length > 0)) {
      // Each page walk is a suffix of the final history: ordered, no gap, no duplicate.
      const top = walk[0] as string;
      expect(all).toContain(top);
      expect(walk).toEqual(all.slice(all.indexOf(top)));
    }
  }, 60_000);
});

clusterOnly('a node killed outright (SIGKILL), seen from the other node', () => {
  let backing: Backing | null = null;
  let a: TestApp | null = null;
  let child: ReturnType<typeof runNode> | null = null;
  const dataDir = mkdtempSync(path.join(tmpdir(), 'parlor-killed-node-'));
  afterAll(async () => {
    closeAllSockets();
    if (child) {
      child.child.kill('SIGKILL');
      await child.exited;
    }
    await a?.close();
    await backing?.release();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("tells the chats' members its sessions went offline once its heartbeat key expires (the presence TTL), and not those also present on a live node", async () => {
    backing = await createBacking();
    const node = await startApp({ backing });
    a = node;
    child = runNode([MAIN], {
      DATA_DIR: dataDir,
      PORT: '0',
      DATABASE_URL: backing.databaseUrl ?? '',
      REDIS_URL: backing.redisUrl ?? '',
      REDIS_PREFIX: backing.redisPrefix,
      PUBLIC_API_KEY: node.publicApiKey,
      OPERATOR_TOKEN: node.operatorToken,
    });
    await waitFor(() => /serving http/.test(child?.out() ?? ''), 60_000);
    const url = /serving (http:\/\/\S+)/.exec(child.out())?.[1] ?? '';
    const adapter = node.services.realtime.io.of('/').adapter as unknown as { serverCount(): Promise<number> };
    await expect.poll(() => adapter.serverCount(), { timeout: 20_000 }).toBe(2);

    const { owner, chatId } = await keyedChat(node);
    // One member only on the node to be killed; one with a socket on each node.
    const gone = await member(node);
    gone.socket.close();
    gone.socket = await connectSocket(url, gone.client);
    expect((await join(gone, { chat_id: chatId })).ok).toBe(true);
    const both = await member(node);
    expect((await join(both, { chat_id: chatId })).ok).toBe(true);
    const second = await connectSocket(url, both.client);
    expect(((await second.emitWithAck('room:join', { chat_id: chatId })) as { ok: boolean }).ok).toBe(true);
    await owner.socket.next('portal:presence', (p) => p.session_id === gone.sessionId && p.online === true);

    // The killed node's heartbeat key (node-presence.ts): both nodes are registered, the child's alive.
    const presence = `${backing.redisPrefix}presence:`;
    const redis = new Redis(backing.redisUrl ?? '');
    try {
      const registered = await redis.smembers(`${presence}nodes`);
      const ownId = node.services.realtime.nodePresence?.nodeId;
      expect(ownId).toBeDefined();
      expect(registered).toHaveLength(2);
      expect(registered).toContain(ownId);
      const childId = registered.find((id) => id !== ownId);
      const aliveKey = `${presence}alive:${childId}`;
      const ttl = await redis.pttl(aliveKey);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(NODE_ALIVE_TTL_MS);

      child.child.kill('SIGKILL');
      await child.exited;
      const saidOffline = () =>
        owner.socket.received.some(
          (r) => r.event === 'portal:presence' && r.payload.session_id === gone.sessionId && r.payload.online === false,
        );
      // Nothing says the session offline while the dead node's heartbeat key lives: the news comes
      // through its expiry (NODE_ALIVE_TTL_MS after the last beat), not from anything sooner. The
      // event list is read before each look at the key, so an event is never counted as earlier than it was.
      let heardWhileAlive = false;
      for (;;) {
        const heard = saidOffline();
        if ((await redis.exists(aliveKey)) === 0) break;
        heardWhileAlive ||= heard;
        await new Promise((r) => setTimeout(r, 250));
      }
      expect(heardWhileAlive).toBe(false);
      // The key expired: the next sweep (a heartbeat of the live node) tells the chat.
      await owner.socket.next('portal:presence', (p) => p.session_id === gone.sessionId && p.online === false);
      // Swept: the dead node is no longer registered, the live one is.
      expect(await redis.smembers(`${presence}nodes`)).toEqual([ownId]);
    } finally {
      redis.disconnect();
    }
    // The sweep is done: the session still present on the live node was not said offline.
    await node.services.realtime.nodePresence?.beat();
    const wrongly = owner.socket.received.filter(
      (r) => r.event === 'portal:presence' && r.payload.session_id === both.sessionId && r.payload.online === false,
    );
    expect(wrongly).toEqual([]);
  }, 120_000);
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
