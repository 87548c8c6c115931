import { describe, expect, it } from 'vitest';
import { NOWHERE, parlor, SOME_TOKEN, useCli, useStandInServer } from './support.js';

/**
 * The built CLI when the connection breaks off after the server got the request. A stand-in server
 * plays Parlor: it reads the request, begins its 200 answer (the broadcast is committed), then the
 * connection ends mid-body (a proxy restarting, the node killed while writing).
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
