import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NOWHERE, parlor, SOME_TOKEN, useCli } from './support.js';

/**
 * The built CLI when the connection breaks off after the server got the request. A stand-in server
 * plays Parlor: it reads the request, begins its 200 answer (the broadcast is committed), then the
 * connection ends mid-body (a proxy restarting, the node killed while writing).
 */
useCli();

const received: string[] = [];
const server = http.createServer((req, res) => {
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
let url = '';
beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('parlor when the answer is cut off', () => {
  it('exits 2 at once saying the request may still take effect, not "cannot reach … Is it running?"', async () => {
    // Before the fix the CLI also sat out the rest of its 30 s deadline: parlor() kills it at 20 s.
    const run = await parlor(['notifications', 'broadcast', '--title', 'T', '--body', 'B'], {
      PARLOR_URL: url,
      OPERATOR_TOKEN: SOME_TOKEN,
    });
    expect(received).toEqual(['POST /v1/admin/notifications {"title":"T","body":"B","type":"info"}']);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toBe(
      `error: the request was sent to the Parlor server at ${url}, but no complete answer came: connection reset (ECONNRESET). It may still take effect: check (e.g. \`parlor audit\`) before repeating it.\n`,
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
