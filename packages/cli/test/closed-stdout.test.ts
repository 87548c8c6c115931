import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CLI, SOME_TOKEN, useCli, useStandInServer } from './support.js';

/**
 * The built CLI writing its answer to a stdout that fails: a pipe whose reader has gone
 * (`parlor audit | head`), and, for contrast, a full device. A stand-in server answers 200 with an
 * audit page far larger than a pipe's buffer, so the writer always outlives `head`.
 */
useCli();

const big = JSON.stringify({
  entries: Array.from({ length: 20_000 }, (_, i) => ({ id: i, action: 'x'.repeat(50) })),
  next_before: null,
});
const serverUrl = useStandInServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end(big);
});

/** Runs `parlor audit <redirect>` in bash; `status` is the CLI's own exit status (PIPESTATUS[0]). */
function auditInto(redirect: string): Promise<{ status: string; stderr: string }> {
  return new Promise((resolve) => {
    const sh = spawn('bash', ['-c', `"${process.execPath}" "${CLI}" audit ${redirect}; echo "\${PIPESTATUS[0]}"`], {
      env: { ...process.env, PARLOR_URL: serverUrl(), OPERATOR_TOKEN: SOME_TOKEN },
    });
    let out = '';
    let err = '';
    sh.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    sh.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    sh.on('exit', () => resolve({ status: out.trim(), stderr: err }));
  });
}

describe('parlor with a stdout that fails', () => {
  it('exits with the answer’s status 0 and prints nothing when the reader closes the pipe (parlor audit | head)', async () => {
    const run = await auditInto('| head -c 10 >/dev/null');
    expect(run).toEqual({ status: '0', stderr: '' });
  });

  it.skipIf(!existsSync('/dev/full'))('exits 2, no complete answer, on another write error (a full disk)', async () => {
    const run = await auditInto('>/dev/full');
    expect(run.status).toBe('2');
    expect(run.stderr).toContain('ENOSPC');
  });
});
