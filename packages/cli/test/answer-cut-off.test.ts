import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeTransport, TimeoutError, TransportError } from '../src/http.js';
import { NOWHERE, parlor, SOME_TOKEN, useCli, useStandInServer } from './support.js';

/**
 * The built CLI when the connection breaks off after the server got the request. A stand-in server
 * plays Parlor: it reads the request, begins its 200 answer (the broadcast is committed), then the
 * connection ends mid-body (a proxy restarting, the node killed while writing). And when it never
 * got it: the TLS handshake of an https:// PARLOR_URL fails, so the request never left the machine.
 */
useCli();

const received: string[] = [];
const serverUrl = useStandInServer((req, res) => {
  let body = '';
  req.on('data', (chunk: Buffer) => {
    body += chunk.toString();
  });
  req.on('end', () => {
    received.push(`${req.method} ${req.url} ${body}`);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
    // Closed once the first bytes are out, so the CLI always sees the answer begin.
    res.write('{"id":', () => res.socket?.destroy());
  });
});

describe('parlor when the answer is cut off', () => {
  it('exits 2 at once saying the request may still take effect, not "cannot reach … Is it running?"', async () => {
    // Before the fix the CLI also sat out the rest of its 30 s deadline: parlor() kills it at 20 s.
    const run = await parlor(['notifications', 'broadcast', '--title', 'T', '--body', 'B'], {
      PARLOR_URL: serverUrl(),
      OPERATOR_TOKEN: SOME_TOKEN,
    });
    expect(received).toEqual(['POST /v1/admin/notifications {"title":"T","body":"B","type":"info"}']);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toBe(
      `error: the request was sent to the Parlor server at ${serverUrl()}, but no complete answer came: connection reset (ECONNRESET). It may still take effect: check (e.g. \`parlor audit\`) before repeating it.\n`,
    );
  });

  it('still says "cannot reach" when nothing was delivered', async () => {
    const run = await parlor(['notifications', 'broadcast', '--title', 'T', '--body', 'B'], {
      PARLOR_URL: NOWHERE,
      OPERATOR_TOKEN: SOME_TOKEN,
    });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^error: cannot reach the Parlor server at http:\/\/127\.0\.0\.1:1: connection refused/);
    expect(run.stderr).not.toContain('may still take effect');
  });
});

/** Listens on 127.0.0.1 until the file's tests are done; answers the port. */
async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

function close(server: net.Server): Promise<unknown> {
  if (server instanceof http.Server) server.closeAllConnections();
  return new Promise((resolve) => server.close(resolve));
}

describe('parlor when the TLS handshake fails', () => {
  // The request is encrypted only once the handshake is done: before that nothing of it goes out.
  let received = 0;
  const answerAll: http.RequestListener = (req, res) => {
    received++;
    req.resume();
    req.on('end', () =>
      res
        .writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
        .write('{"id":', () => res.socket?.destroy()),
    );
  };
  const plain = http.createServer(answerAll);
  // Accepts connections and never says a word: a TLS handshake with it never completes.
  const silent = net.createServer(() => {});
  const silentSockets = new Set<net.Socket>();
  silent.on('connection', (socket) => {
    silentSockets.add(socket);
    socket.on('close', () => silentSockets.delete(socket));
  });
  let secure: https.Server | null = null;
  let dir = '';
  let cert = '';
  let plainPort = 0;
  let silentPort = 0;
  let securePort = 0;

  beforeAll(async () => {
    plainPort = await listen(plain);
    silentPort = await listen(silent);
    dir = mkdtempSync(path.join(tmpdir(), 'parlor-cli-tls-'));
    const key = path.join(dir, 'key.pem');
    cert = path.join(dir, 'cert.pem');
    // A self-signed certificate: refused by the CLI unless NODE_EXTRA_CA_CERTS names it.
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=DNS:localhost',
        '-days',
        '1',
        '-keyout',
        key,
        '-out',
        cert,
      ],
      { stdio: 'ignore' },
    );
    secure = https.createServer({ key: readFileSync(key), cert: readFileSync(cert) }, answerAll);
    securePort = await listen(secure);
  });

  afterAll(async () => {
    for (const socket of silentSockets) socket.destroy();
    await Promise.all([close(plain), close(silent), secure && close(secure)]);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('says "cannot reach" for https:// to a plain HTTP port (EPROTO), not "sent, may still take effect"', async () => {
    received = 0;
    const run = await parlor(['users', 'ban', '42'], {
      PARLOR_URL: `https://127.0.0.1:${plainPort}`,
      OPERATOR_TOKEN: SOME_TOKEN,
    });
    expect(received).toBe(0);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^error: cannot reach the Parlor server at https:\/\/127\.0\.0\.1:\d+: EPROTO\. /);
    expect(run.stderr).not.toContain('may still take effect');
  });

  it('says "cannot reach" for a server whose certificate is not trusted', async () => {
    received = 0;
    const run = await parlor(['notifications', 'broadcast', '--title', 'T', '--body', 'B'], {
      PARLOR_URL: `https://localhost:${securePort}`,
      OPERATOR_TOKEN: SOME_TOKEN,
    });
    expect(received).toBe(0);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^error: cannot reach the Parlor server at https:\/\/localhost:\d+: /);
    expect(run.stderr).not.toContain('may still take effect');
  });

  it('still says "may still take effect" once a trusted handshake carried the request and the answer broke off', async () => {
    received = 0;
    const run = await parlor(['notifications', 'broadcast', '--title', 'T', '--body', 'B'], {
      PARLOR_URL: `https://localhost:${securePort}`,
      OPERATOR_TOKEN: SOME_TOKEN,
      NODE_EXTRA_CA_CERTS: cert,
    });
    expect(received).toBe(1);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(
      /^error: the request was sent to the Parlor server at https:\/\/localhost:\d+, but no complete answer came: .*It may still take effect/,
    );
  });

  // The CLI waits 30 s for a connection; its transport, given a shorter deadline, shows the outcome.
  it('counts a handshake that never completes as not sent when the deadline passes', async () => {
    const failure = await nodeTransport(new URL(`https://127.0.0.1:${silentPort}/v1/admin/notifications`), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"title":"T","body":"B"}',
      timeoutMs: 500,
    }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(TransportError);
    expect((failure as TransportError).cause).toBeInstanceOf(TimeoutError);
    expect((failure as TransportError).sent).toBe(false);
  });
});

describe('the transport on a kept-alive connection', () => {
  // The first request is answered and the connection kept; the second, carried by that connection,
  // is received and then the connection is cut before any answer.
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      requests.push(`${req.method} ${req.url}`);
      if (req.method === 'GET') res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      else res.socket?.destroy();
    });
  });
  let port = 0;
  beforeAll(async () => {
    port = await listen(server);
  });
  afterAll(() => close(server));

  it('counts a request on a reused connection as sent (it never sees a new connect)', async () => {
    // Node's global agent keeps connections alive: the second request goes over the first's.
    const send = (method: string) =>
      nodeTransport(new URL(`http://127.0.0.1:${port}/v1/admin/audit`), {
        method,
        headers: {},
        body: method === 'POST' ? '{}' : undefined,
        timeoutMs: 5_000,
      });
    expect((await send('GET')).status).toBe(200);
    const failure = await send('POST').catch((e: unknown) => e);
    expect(requests).toEqual(['GET /v1/admin/audit', 'POST /v1/admin/audit']);
    expect(failure).toBeInstanceOf(TransportError);
    expect((failure as TransportError).sent).toBe(true);
  });
});
