import { once } from 'node:events';
import net from 'node:net';
import { expect, it } from 'vitest';
import { REQUEST_TIMEOUT_MS } from '../src/platform/connections.js';
import { UNAVAILABLE_RETRY_AFTER_SECONDS } from '../src/platform/errors.js';
import { createBacking, describeApp, MODE, startApp } from './support/app.js';
import { bundle, join, keyedChat, member } from './support/chat-flows.js';
import { rawConnection } from './support/raw-http.js';
import { closeAllSockets } from './support/sockets.js';
import { stalledBrowser } from './support/stalled-browser.js';
import { alive, eventually } from './support/vm-browser.js';

const PUBLIC_KEY = 'ppk_test_public_key_0123456789abcdef';

/** A raw HTTP/1.1 request (the test writes its body in parts). */
function request(method: string, path: string, body = '', headers: Record<string, string> = {}) {
  const lines = [`${method} ${path} HTTP/1.1`, 'Host: parlor.test', `Content-Length: ${Buffer.byteLength(body)}`];
  for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** The answers read off a connection until the server ends it: status, headers and body each. */
function answers(text: string) {
  return text
    .split(/(?=HTTP\/1\.1 \d{3} )/)
    .filter(Boolean)
    .map((raw) => {
      const [head = '', body = ''] = raw.split('\r\n\r\n');
      const [statusLine = '', ...headerLines] = head.split('\r\n');
      const headers = Object.fromEntries(
        headerLines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
      );
      return { status: Number(statusLine.split(' ')[1]), headers, body };
    });
}

/** Resolves to 'ended' once the server ends the connection, or 'still open' after 10 s. */
function endOf(closed: Promise<void>): Promise<'ended' | 'still open'> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    closed.then(() => 'ended' as const),
    new Promise<'still open'>((resolve) => {
      timer = setTimeout(() => resolve('still open'), 10_000);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Starts an app whose last preClose hook (Fastify then closes the HTTP server and waits for the
 * requests in flight) tells when it is reached and holds the drain there until `release`.
 */
async function appWithHeldDrain(opts: Parameters<typeof startApp>[0] = {}) {
  let reached: () => void = () => {};
  const draining = new Promise<void>((resolve) => {
    reached = resolve;
  });
  let release: () => void = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const app = await startApp({
    ...opts,
    beforeListen: (built) =>
      built.app.addHook('preClose', async () => {
        reached();
        await released;
      }),
  });
  return { app, draining, release };
}

/** Whether a new TCP connection to `port` is accepted, or the error code it gets. */
function connectOutcome(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve('accepted');
    });
    socket.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
  });
}

describeApp('shutdown', () => {
  it('answers a request in flight when close begins, and one arriving during the drain with 503 ERR_SERVICE_UNAVAILABLE and Retry-After, each with Connection: close', async () => {
    const { app, draining, release } = await appWithHeldDrain();
    const port = Number(new URL(app.url).port);
    const inFlight = rawConnection(port);
    const idle = rawConnection(port);
    await Promise.all([once(inFlight.socket, 'connect'), once(idle.socket, 'connect')]);

    // A request whose body is still on its way (a slow client): in flight when close begins.
    const body = JSON.stringify({ username: 'nobody_here' });
    const arrived = once(app.app.server, 'request');
    inFlight.socket.write(
      request('POST', '/v1/authentication/lookup', body, {
        'Content-Type': 'application/json',
        'X-API-Key': PUBLIC_KEY,
      }) + body.slice(0, 5),
    );
    await arrived;
    const closed = app.close();
    await draining;

    // A request on a connection that was idle when close began: refused, and its connection ended.
    idle.socket.write(request('GET', '/v1/health'));
    expect(await endOf(idle.closed)).toBe('ended');
    const [refused] = answers(idle.received());
    expect(refused?.status, idle.received()).toBe(503);
    expect(refused?.headers.connection).toBe('close');
    // As every 503 of an outage: a client (the SDK's error carries it) knows when to try again.
    expect(refused?.headers['retry-after']).toBe(String(UNAVAILABLE_RETRY_AFTER_SECONDS));
    expect(JSON.parse(refused?.body ?? '{}')).toEqual({
      code: 'ERR_SERVICE_UNAVAILABLE',
      message: 'The service is not available right now.',
    });

    // Past every preClose hook: not listening (since the drain began), the idle connections closed.
    release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(app.app.server.listening).toBe(false);

    // The rest of the body: the request is answered, and its connection ends without the client
    // hanging up (a keep-alive answer would hold close until the client or its 72 s timeout).
    inFlight.socket.write(body.slice(5));
    expect(await endOf(inFlight.closed)).toBe('ended');
    await closed;
    const [answered] = answers(inFlight.received());
    expect(answered?.status, inFlight.received()).toBe(404);
    expect(answered?.headers.connection).toBe('close');
    expect(JSON.parse(answered?.body ?? '{}')).toMatchObject({ code: 'ERR_USER_NOT_FOUND' });
  });

  it('refuses new connections from the moment close begins, while the drain still waits (a background run, the sockets), and still answers an open connection 503', async () => {
    const { app, draining, release } = await appWithHeldDrain();
    const port = Number(new URL(app.url).port);
    const open = rawConnection(port);
    await once(open.socket, 'connect');
    const closed = app.close();
    await draining;
    try {
      expect(await connectOutcome(port)).toBe('ECONNREFUSED');
      // A keep-alive connection open before close began is not cut: its request gets the drain's 503.
      open.socket.write(request('GET', '/v1/health'));
      expect(await endOf(open.closed)).toBe('ended');
      expect(answers(open.received()).map((a) => [a.status, a.headers.connection])).toEqual([[503, 'close']]);
    } finally {
      // Node's close does not end a connection that never sent a request.
      open.socket.destroy();
      release();
      await closed;
    }
  });

  it.skipIf(MODE !== 'cluster')(
    'delivers what a request answered during the drain emits to the other nodes (message:new to a member on another node)',
    async () => {
      const backing = await createBacking();
      const { app: a, draining, release } = await appWithHeldDrain({ backing });
      const b = await startApp({ backing });
      try {
        const { owner, chatId, chatKey, epoch } = await keyedChat(a);
        const listener = await member(b);
        expect((await join(listener, { chat_id: chatId })).ok).toBe(true);

        // A send in flight when close begins, answered once node A has dropped its sockets.
        const body = JSON.stringify({ content: bundle(chatKey, chatId, epoch, 'sent while the node drains') });
        const { socket, received, closed: ended } = rawConnection(Number(new URL(a.url).port));
        await once(socket, 'connect');
        const arrived = once(a.app.server, 'request');
        socket.write(
          request('POST', `/v1/portal/chats/${chatId}/messages`, body, {
            'Content-Type': 'application/json',
            Cookie: `psession=${owner.client.cookie}`,
            'X-Forwarded-For': owner.client.ip,
          }) + body.slice(0, 5),
        );
        await arrived;
        const closed = a.close();
        await draining;
        release();
        socket.write(body.slice(5));
        expect(await endOf(ended)).toBe('ended');
        await closed;

        const [sent] = answers(received());
        expect(sent?.status, received()).toBe(200);
        const id = JSON.parse(sent?.body ?? '{}').id as string;
        await listener.socket.next('message:new', (m) => m.id === id);
      } finally {
        closeAllSockets();
        await b.close();
        await backing.release();
      }
    },
    60_000,
  );

  it('gives a client REQUEST_TIMEOUT_MS to send a whole request (Fastify leaves it unlimited)', async () => {
    const app = await startApp();
    try {
      expect(app.app.server.requestTimeout).toBe(REQUEST_TIMEOUT_MS);
      // Only receiving counts; still, a long-poll's whole life (Socket.IO's 25 s ping interval and
      // 20 s ping timeout) fits in it.
      expect(REQUEST_TIMEOUT_MS).toBeGreaterThan(25_000 + 20_000);
    } finally {
      await app.close();
    }
  });

  it('calls off a room still starting: its start answers 503 ERR_ROOM_START_FAILED, its browser is killed', async () => {
    // A browser that never becomes ready: without the call-off, close would wait its 20 s timeout.
    const browser = stalledBrowser();
    const app = await startApp({ config: { chromiumPath: browser.path, vmAllowPrivateNetworks: true } });
    try {
      const owner = await member(app, { level: 2 });
      const created = await owner.client.post('/v1/portal/chats/create', {
        name: 'Starting at shutdown',
        type: 'public',
      });
      const chatId = created.body.chat.id as number;
      expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
      const start = owner.client.post(`/v1/portal/chats/${chatId}/start`, {});
      const pid = (await eventually(() => browser.pid(), 20_000, 'the browser to start')) as number;
      closeAllSockets();
      await app.close();
      const res = await start;
      expect(res.status).toBe(503);
      expect(res.body).toEqual({
        code: 'ERR_ROOM_START_FAILED',
        message: 'The room start was called off: the room was stopped or this node is shutting down.',
      });
      expect(alive(pid)).toBe(false);
    } finally {
      browser.remove();
    }
  }, 60_000);

  it('stops every background task, retention and the room VM sweep included, all at once in one step', async () => {
    const app = await startApp();
    expect([...app.tasks.names].sort()).toEqual(
      [
        'data-retention',
        'direct-chat-lifecycle',
        'match-queue-deadlines',
        'online-refresh',
        'punishment-expiry',
        'room-vm-sweep',
        'session-expiry',
        'session-socket-expiry',
        'stranger-accounts',
        'subscription-downgrade',
      ].sort(),
    );
    // Two tasks whose stops each wait for a run to end: the second stop must begin before the first ends.
    const order: string[] = [];
    const stopping = (name: string) => async () => {
      order.push(`${name} stopping`);
      await new Promise((resolve) => setImmediate(resolve));
      order.push(`${name} stopped`);
    };
    app.tasks.add('first', stopping('first'));
    app.tasks.add('second', stopping('second'));
    await app.close();
    expect(order).toEqual(['first stopping', 'second stopping', 'first stopped', 'second stopped']);
  });
});
