import type { Env } from './config.js';
import { nodeTransport, type Transport } from './http.js';

/** What commands may touch outside themselves; main.ts passes the process, tests may pass fakes. */
export interface Io {
  env: Env;
  /** Directory against which a relative DATA_DIR is resolved. */
  cwd: string;
  stdout(text: string): void;
  stderr(text: string): void;
  /** How requests travel; node:http by default. */
  transport: Transport;
  setExitCode(code: number): void;
}

/** 0: the server answered 2xx. 1: refused, by the server (non-2xx) or locally (usage, config). 2: server not reached. */
export const ExitCode = { OK: 0, REFUSED: 1, UNREACHABLE: 2 } as const;

export function processIo(): Io {
  ignoreClosedReader(process.stdout);
  ignoreClosedReader(process.stderr);
  return {
    env: process.env,
    cwd: process.cwd(),
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
    transport: nodeTransport,
    setExitCode: (code) => {
      process.exitCode = code;
    },
  };
}

/**
 * `parlor audit | head`: the reader may close the pipe before the answer is written, and the next
 * write fails with EPIPE. Nothing is wrong with the request (the server has answered, the exit status
 * is already set), so the rest of the output is dropped and the process ends with the command's
 * exit status instead of an unhandled 'error' event (a stack trace and exit 1). Any other write
 * error is a real failure and is thrown as before.
 */
function ignoreClosedReader(stream: NodeJS.WriteStream): void {
  stream.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e;
  });
}
