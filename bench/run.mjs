#!/usr/bin/env node
/**
 * Bench dispatcher: `node bench/run.mjs <name> [--mode embedded|cluster|both] [--duration S] [--json]`
 * (or `npm run bench -- <name> ...`, which builds first). Loads bench/<name>.mjs and calls its
 * `run(ctx)`. A scenario module exports:
 *   description: string                      one line for the list
 *   defaults?: { duration?: number }         seconds of each measured phase
 *   usage?: string                           scenario options, shown by `<name> --help`
 *   run(ctx): Promise<object | void>         ctx = { name, modes, duration, options }
 * `options` holds every --flag given (strings; bare flags are true), for scenario-specific knobs.
 * With --json the scenario's returned results are printed as one line `BENCH_JSON {...}` at the end.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { runCleanups } from './lib/cleanup.mjs';
import { parseModes } from './lib/modes.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const NOT_SCENARIOS = new Set(['run']);

function scenarioNames() {
  return readdirSync(here)
    .filter((f) => f.endsWith('.mjs'))
    .map((f) => f.slice(0, -4))
    .filter((n) => !NOT_SCENARIOS.has(n))
    .sort();
}

async function listScenarios(out) {
  out('Scenarios (node bench/run.mjs <name> [--mode embedded|cluster|both] [--duration S] [--json]):');
  for (const n of scenarioNames()) {
    let desc = '';
    try {
      desc = (await import(pathToFileURL(path.join(here, `${n}.mjs`)).href)).description ?? '';
    } catch (e) {
      desc = `(fails to load: ${e.message})`;
    }
    out(`  ${n.padEnd(10)} ${desc}`);
  }
}

function parseArgs(argv) {
  const positional = [];
  const options = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) {
      positional.push(a);
      continue;
    }
    const eq = a.indexOf('=');
    if (eq > 0) {
      options[a.slice(2, eq)] = a.slice(eq + 1);
    } else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) {
      options[a.slice(2)] = argv[++i];
    } else {
      options[a.slice(2)] = true;
    }
  }
  return { positional, options };
}

async function main() {
  const { positional, options } = parseArgs(process.argv.slice(2));
  const name = positional[0];
  if (!name || name === 'help') {
    await listScenarios(name ? console.log : console.error);
    return name ? 0 : 1;
  }
  if (!/^[a-z0-9_-]+$/i.test(name) || !scenarioNames().includes(name)) {
    console.error(`bench: unknown scenario "${name}"`);
    await listScenarios(console.error);
    return 1;
  }
  let modes;
  let duration;
  try {
    modes = parseModes(options.mode ?? 'both');
    if (options.duration !== undefined) {
      duration = Number(options.duration);
      if (!Number.isFinite(duration) || duration <= 0 || duration > 600) {
        throw new Error(`--duration must be a number of seconds from 1 to 600 (got "${options.duration}")`);
      }
    }
  } catch (e) {
    console.error(`bench: ${e.message}`);
    return 1;
  }
  const scenario = await import(pathToFileURL(path.join(here, `${name}.mjs`)).href);
  if (typeof scenario.run !== 'function') {
    console.error(`bench: bench/${name}.mjs exports no run()`);
    return 1;
  }
  if (options.help) {
    console.log(`${name}: ${scenario.description ?? ''}\n${scenario.usage ?? ''}`);
    return 0;
  }
  duration ??= scenario.defaults?.duration ?? 10;
  const t0 = performance.now();
  const results = await scenario.run({ name, modes, duration, options });
  console.log(`\n[bench] ${name} finished in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  if (options.json) console.log(`BENCH_JSON ${JSON.stringify({ scenario: name, results: results ?? null })}`);
  return 0;
}

let interrupted = false;
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    console.error(`\nbench: ${sig}, cleaning up (scratch databases, Redis keys, temp dirs)…`);
    // Clients torn down mid-request may throw from their own callbacks; the cleanup goes on.
    process.on('uncaughtException', () => {});
    process.on('unhandledRejection', () => {});
    runCleanups().finally(() => process.exit(130));
  });
}

let code;
try {
  code = await main();
} catch (e) {
  console.error(`bench: ${e?.stack ?? e}`);
  await runCleanups();
  code = 1;
}
process.exitCode = code;
// Everything should be closed by now; if some handle still holds the loop, say so and leave anyway.
setTimeout(() => {
  const handles =
    process
      ._getActiveHandles?.()
      .map((h) => `${h?.constructor?.name}${h?.remotePort ? ` to ${h.remoteAddress}:${h.remotePort}` : ''}`) ?? [];
  console.error(`bench: still ${handles.length} open handle(s) 2 s after the end (${handles.join(', ')}); exiting`);
  process.exit(code);
}, 2000).unref();
