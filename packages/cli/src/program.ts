import { Command } from 'commander';
import { commandGroups } from './commands/index.js';
import { DEFAULT_URL } from './config.js';
import type { Io } from './io.js';
import { cliVersion } from './version.js';

const ENVIRONMENT_HELP = `
Environment:
  PARLOR_URL      the server's address (default ${DEFAULT_URL})
  OPERATOR_TOKEN  the operator token; when unset, read from DATA_DIR/operator-token
  DATA_DIR        the server's data directory (default ./data)

Exit status: 0 success, 1 refused (by the server or a usage error), 2 no complete answer (the server not reached, its answer cut off, or the answer not written).
Answers are printed as JSON: on stdout on success, the error body on stderr otherwise.`;

/**
 * The `parlor` program. Every exit goes through commander's exitOverride, so the caller decides
 * how to end (main.ts sets process.exitCode and lets output drain).
 */
export function buildProgram(io: Io): Command {
  const program = new Command('parlor')
    .description('Operate a running Parlor server through its admin API.')
    .version(cliVersion(), '-V, --version', 'print the CLI version')
    .helpOption('-h, --help', 'show help')
    .helpCommand('help [command]', 'show help for a command')
    .configureOutput({ writeOut: io.stdout, writeErr: io.stderr })
    .exitOverride()
    .addHelpText('after', ENVIRONMENT_HELP);
  for (const register of commandGroups) register(program, io);
  return program;
}
