import type { Command } from 'commander';
import { type Answer, type ApiRequest, send, UnreachableError } from './client.js';
import { ConfigError, resolveTarget, type Target } from './config.js';
import { ExitCode, type Io } from './io.js';

/** Longest slice of a non-JSON answer worth showing (an HTML error page from a proxy, say). */
const RAW_EXCERPT = 500;

/**
 * Runs one operator request for `command` and reports it: the JSON answer on stdout (exit 0) on
 * 2xx, the error body on stderr (exit 1) otherwise, and a 2xx that is not JSON too (exit 1). Local problems go through `command.error`, so
 * they read like commander's own usage errors; an unreachable server or an incomplete answer exits 2,
 * and so does a 2xx answer that cannot be written to stdout (processIo).
 */
export async function callServer(command: Command, io: Io, request: ApiRequest): Promise<void> {
  let target: Target;
  try {
    target = resolveTarget(io.env, io.cwd);
  } catch (e) {
    if (e instanceof ConfigError) command.error(`error: ${e.message}`, { exitCode: ExitCode.REFUSED });
    throw e;
  }
  let answer: Answer;
  try {
    answer = await send(target, request, io.transport);
  } catch (e) {
    // Once the request has gone out, only the answer is missing (a timeout, a connection cut
    // mid-answer): the server may have carried it out, so "cannot reach" would invite a repeat.
    // A read (GET) changes nothing, so it may simply be sent again.
    if (e instanceof UnreachableError && e.sent) {
      const next =
        request.method === 'GET'
          ? 'It is a read and changes nothing: repeating it is safe.'
          : 'It may still take effect: check (e.g. `parlor audit`) before repeating it.';
      command.error(
        `error: the request was sent to the Parlor server at ${target.baseUrl.origin}, but no complete answer came: ${e.message}. ${next}`,
        { exitCode: ExitCode.UNREACHABLE, code: 'parlor.unreachable' },
      );
    }
    if (e instanceof UnreachableError)
      command.error(
        `error: cannot reach the Parlor server at ${target.baseUrl.origin}: ${e.message}. Is it running? PARLOR_URL selects the server.`,
        { exitCode: ExitCode.UNREACHABLE, code: 'parlor.unreachable' },
      );
    throw e;
  }
  report(io, answer);
}

function report(io: Io, answer: Answer): void {
  // Every answer of the API is JSON: a 2xx with another body came from something in front of it
  // (a proxy's sign-in page, a captive portal), and the request never reached Parlor.
  if (answer.ok && (answer.body !== undefined || answer.text === '')) {
    if (answer.body !== undefined) io.stdout(pretty(answer.body), true);
    io.setExitCode(ExitCode.OK);
    return;
  }
  // A redirect is reported as one, whatever its body (a proxy's JSON): the request went nowhere.
  const redirect = answer.status >= 300 && answer.status < 400;
  io.stderr(answer.body !== undefined && !redirect ? pretty(answer.body) : describeRaw(answer));
  io.setExitCode(ExitCode.REFUSED);
}

function pretty(body: unknown): string {
  return `${JSON.stringify(body, null, 2)}\n`;
}

/** A non-2xx answer without a JSON body: a redirect, or something in front of the server. */
function describeRaw(answer: Answer): string {
  if (answer.status >= 300 && answer.status < 400)
    return `error: the server answered HTTP ${answer.status}, a redirect to ${answer.location ?? '(no location)'}; set PARLOR_URL to the final address\n`;
  const excerpt = answer.text.trim().slice(0, RAW_EXCERPT);
  const hint = answer.ok ? ' (not an answer of Parlor: is PARLOR_URL its address?)' : '';
  return `error: the server answered HTTP ${answer.status} without a JSON body${hint}${excerpt ? `:\n${excerpt}` : ''}\n`;
}
