import { spawn } from 'node:child_process';

/**
 * Runs a built entry point (or a fixture) as a child Node process with only `env` (and PATH), its
 * output collected: `logs()` are the JSON log lines on stdout so far.
 */
export function runNode(argv: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, argv, {
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'silent', SOURCE_HASH: 'main-test', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => {
    out += d;
  });
  child.stderr.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  /** The JSON log lines written so far. */
  const logs = () =>
    out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { child, exited, out: () => out, err: () => err, logs };
}

/** Polls `check` every 50 ms until it holds; fails after `ms`. */
export async function waitFor(check: () => boolean, ms = 50_000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}
