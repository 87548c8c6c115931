import type { Env } from './config.js';
import { nodeTransport, type Transport } from './http.js';

/** What commands may touch outside themselves; main.ts passes the process, tests may pass fakes. */
export interface Io {
  env: Env;
  /** Directory against which a relative DATA_DIR is resolved. */
  cwd: string;
  /**
   * `answer`: the text is the 2xx answer of a request the server has carried out, so a failure to
   * write it says so (see processIo).
   */
  stdout(text: string, answer?: boolean): void;
  stderr(text: string): void;
  /** How requests travel; node:http by default. */
  transport: Transport;
  setExitCode(code: number): void;
}

/**
 * 0: the server answered 2xx. 1: refused, by the server (non-2xx) or locally (usage, config).
 * 2: no complete answer: the server was not reached, its answer did not come whole, or a 2xx
 * answer could not be written to stdout.
 */
export const ExitCode = { OK: 0, REFUSED: 1, UNREACHABLE: 2 } as const;

export function processIo(): Io {
  let answering = false;
  let unwritten = false;
  // `parlor audit | head`: the reader may close the pipe before the answer is written, and the next
  // write fails with EPIPE. Nothing is wrong with the request (the server has answered, the exit
  // status is already set), so the rest of the output is dropped and the process ends with the
  // command's exit status. Any other failure (a full disk) is one line on stderr instead of an
  // unhandled 'error' event (a stack trace and exit 1, "refused", when the server may have acted).
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE' || unwritten) return;
    unwritten = true;
    // The status first: stderr may be on the same full disk.
    process.exitCode = answering ? ExitCode.UNREACHABLE : ExitCode.REFUSED;
    const what = answering ? 'the server carried out the request, but its answer' : 'the output';
    process.stderr.write(`error: ${what} could not be written to stdout (${e.code ?? e.message})\n`);
  });
  // A failure of stderr itself has nowhere to be reported: the exit status says what happened (a
  // throw here would end the process with 1, "refused", after the server carried a request out).
  process.stderr.on('error', () => {});
  return {
    env: process.env,
    cwd: process.cwd(),
    stdout: (text, answer = false) => {
      answering ||= answer;
      process.stdout.write(text);
    },
    stderr: (text) => process.stderr.write(text),
    transport: nodeTransport,
    // A failed write is reported after the command has set its status (the 'error' event comes
    // later), and that status no longer holds.
    setExitCode: (code) => {
      if (!unwritten) process.exitCode = code;
    },
  };
}
