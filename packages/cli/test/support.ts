import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';

/** The built CLI, run as a child process by the CLI test files. */
export const CLI = fileURLToPath(new URL('../dist/main.js', import.meta.url));
/** Nothing listens on port 1: a request that is actually sent fails with exit 2, so exit 1 proves none was. */
export const NOWHERE = 'http://127.0.0.1:1';
export const SOME_TOKEN = 'pop_some_token_0123456789abcdefghij';

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

let emptyCwd = '';

/** Registers the file's setup: the CLI must be built; runs happen in an empty working directory. */
export function useCli(): void {
  beforeAll(() => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build first (npx tsc -b packages/cli)`);
    emptyCwd = mkdtempSync(path.join(tmpdir(), 'parlor-cli-'));
  });
  afterAll(() => {
    if (emptyCwd) rmSync(emptyCwd, { recursive: true, force: true });
  });
}

/** Runs the built CLI with exactly the given PARLOR_URL / OPERATOR_TOKEN / DATA_DIR (none inherited). */
export function parlor(args: string[], env: Record<string, string>): Promise<Run> {
  const { PARLOR_URL: _u, OPERATOR_TOKEN: _t, DATA_DIR: _d, ...base } = process.env;
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...base, ...env }, cwd: emptyCwd || tmpdir(), timeout: 20_000 },
      (error, stdout, stderr) => {
        if (error && typeof error.code !== 'number') reject(error);
        else resolve({ code: error ? Number(error.code) : 0, stdout, stderr });
      },
    );
  });
}

/**
 * Registers the file's stand-in for a Parlor server: `handler` answers on 127.0.0.1 from before
 * the file's tests to after them. Answers the address to put in PARLOR_URL (once listening).
 */
export function useStandInServer(handler: http.RequestListener): () => string {
  const server = http.createServer(handler);
  let url = '';
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return () => url;
}
