import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CLI, parlor, SOME_TOKEN, useCli, useStandInServer } from './support.js';

/**
 * The built CLI when the server has acted but the operator does not get its whole answer: stdout
 * refuses the answer (a full disk: /dev/full), or a read's answer breaks off. A stand-in server
 * plays Parlor: a warn is answered 200, the audit log's answer is cut off once it has begun.
 */
useCli();

const received: string[] = [];
const serverUrl = useStandInServer((req, res) => {
  req.resume();
  req.on('end', () => {
    received.push(`${req.method} ${req.url}`);
    if (req.method === 'POST') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"punishment":{"id":1}}');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
    // Closed once the first bytes are out, so the CLI always sees the answer begin.
    res.write('{"entries":', () => res.socket?.destroy());
  });
});

/**
 * Runs the built CLI with its stdout on /dev/full: every write fails with ENOSPC; with `both`, its
 * stderr too (`parlor … > out 2>&1` on a full disk).
 */
async function intoFullDevice(args: string[], both = false): Promise<{ code: number | null; stderr: string }> {
  const { PARLOR_URL: _u, OPERATOR_TOKEN: _t, DATA_DIR: _d, ...base } = process.env;
  const full = openSync('/dev/full', 'w');
  try {
    return await new Promise((resolve) => {
      const child = spawn(process.execPath, [CLI, ...args], {
        env: { ...base, PARLOR_URL: serverUrl(), OPERATOR_TOKEN: SOME_TOKEN },
        stdio: ['ignore', full, both ? full : 'pipe'],
      });
      let stderr = '';
      child.stderr?.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      child.on('close', (code) => resolve({ code, stderr }));
    });
  } finally {
    closeSync(full);
  }
}

describe.skipIf(!existsSync('/dev/full'))('parlor with a stdout that refuses the answer (a full disk)', () => {
  it('exits 2 with one line saying the server carried out the request, not a stack trace and exit 1 ("refused")', async () => {
    received.length = 0;
    const run = await intoFullDevice(['users', 'warn', '1']);
    expect(received).toEqual(['POST /v1/admin/punishments/warn']);
    expect(run.code).toBe(2);
    expect(run.stderr).toBe(
      'error: the server carried out the request, but its answer could not be written to stdout (ENOSPC)\n',
    );
  });

  it('exits 2 when stderr is on the full disk too: the request was carried out, not refused', async () => {
    received.length = 0;
    const run = await intoFullDevice(['users', 'warn', '1'], true);
    expect(received).toEqual(['POST /v1/admin/punishments/warn']);
    expect(run.code).toBe(2);
  });

  it('exits 1 with one line when nothing was sent and the help cannot be written', async () => {
    received.length = 0;
    const run = await intoFullDevice(['users', 'warn', '--help']);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe('error: the output could not be written to stdout (ENOSPC)\n');
    expect(received).toEqual([]);
  });
});

describe('parlor when the answer of a read is cut off', () => {
  it('exits 2 saying a read is safe to repeat, not that it "may still take effect"', async () => {
    received.length = 0;
    const run = await parlor(['audit'], { PARLOR_URL: serverUrl(), OPERATOR_TOKEN: SOME_TOKEN });
    expect(received).toEqual(['GET /v1/admin/audit']);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toBe(
      `error: the request was sent to the Parlor server at ${serverUrl()}, but no complete answer came: connection reset (ECONNRESET). It is a read and changes nothing: repeating it is safe.\n`,
    );
  });
});
