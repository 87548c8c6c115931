import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { rawConnection, rawExchange } from '../../test/support/raw-http.js';
import { answerClientError, installDrain } from './connections.js';

// A plain Node server with a short request timeout (the app's is REQUEST_TIMEOUT_MS) and the
// app's client-error answer, so that a stalled request is cut while the test waits for it.
// Like Fastify, it answers once the body is in; /partial begins its answer and never ends it.
const server = createServer({ requestTimeout: 300, connectionsCheckingInterval: 50 }, (req, res) => {
  if (req.url === '/partial') res.writeHead(200, { 'content-type': 'text/plain' }).write('partial');
  else req.resume().on('end', () => res.end('ok'));
});
server.on('clientError', answerClientError);
server.listen(0, '127.0.0.1');
await once(server, 'listening');
const port = (server.address() as AddressInfo).port;
afterAll(() => new Promise((resolve) => server.close(resolve)));

const exchange = (text: string) => rawExchange(port, text);

describe('answerClientError', () => {
  it('answers a request that does not arrive in time with 408 ERR_REQUEST_TIMEOUT and ends the connection', async () => {
    const received = await exchange('POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{"trick');
    const [head = '', body = ''] = received.split('\r\n\r\n');
    expect(head.split('\r\n')[0]).toBe('HTTP/1.1 408 Request Timeout');
    expect(head).toContain('Connection: close');
    expect(JSON.parse(body)).toEqual({ code: 'ERR_REQUEST_TIMEOUT', message: 'The request did not arrive in time.' });
  });

  it('answers what is not HTTP with 400 ERR_VALIDATION in the API error body and ends the connection', async () => {
    const [head = '', body = ''] = (await exchange('NOT HTTP AT ALL\r\n\r\n')).split('\r\n\r\n');
    expect(head.split('\r\n')[0]).toBe('HTTP/1.1 400 Bad Request');
    expect(head).toContain('Connection: close');
    expect(JSON.parse(body)).toEqual({ code: 'ERR_VALIDATION', message: 'The request is not valid HTTP.' });
  });

  it('answers headers over 16 KiB with 431 ERR_HEADERS_TOO_LARGE', async () => {
    const received = await exchange(`GET /v1/x HTTP/1.1\r\nHost: a\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`);
    const [head = '', body = ''] = received.split('\r\n\r\n');
    expect(head.split('\r\n')[0]).toBe('HTTP/1.1 431 Request Header Fields Too Large');
    expect(head).toContain('Connection: close');
    expect(JSON.parse(body)).toEqual({ code: 'ERR_HEADERS_TOO_LARGE', message: 'The request headers are too large.' });
  });

  it('writes nothing into an answer already under way on the connection, and ends it', async () => {
    const { socket, received, closed } = rawConnection(port);
    socket.write('GET /partial HTTP/1.1\r\nHost: a\r\n\r\n');
    await once(socket, 'data');
    // A pipelined request Node cannot parse, while the first answer is still being written.
    socket.write('NOT HTTP AT ALL\r\n\r\n');
    await closed;
    expect(received()).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(received()).toContain('partial');
    expect(received()).not.toContain('HTTP/1.1 400');
  });
});

describe('installDrain', () => {
  it('ends a keep-alive connection whose answer was under way when close began, once that answer is finished', async () => {
    const app = Fastify();
    installDrain(app);
    let finish: () => void = () => {};
    app.get('/stream', (_request, reply) => {
      reply.hijack();
      reply.raw.writeHead(200, { 'content-type': 'text/plain' }).write('begun;');
      finish = () => reply.raw.end('done');
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { socket, received, closed: ended } = rawConnection((app.server.address() as AddressInfo).port);
    socket.write('GET /stream HTTP/1.1\r\nHost: a\r\n\r\n');
    await once(socket, 'data');

    const closed = app.close();
    // Past the preClose hooks: Fastify has closed the server and, once, its idle connections.
    while (app.server.listening) await new Promise((resolve) => setImmediate(resolve));
    finish();
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      ended.then(() => 'ended'),
      new Promise((resolve) => {
        timer = setTimeout(() => resolve('still open'), 10_000);
      }),
    ]);
    clearTimeout(timer);
    socket.destroy();
    await closed;
    expect(received()).toContain('Connection: keep-alive');
    expect(received()).toContain('done');
    expect(outcome).toBe('ended');
  });
});
