import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import type { Io } from '../src/io.js';
import { buildProgram } from '../src/program.js';

/**
 * packages/cli/README.md is the CLI's manual: its "Commands" section lists every command the program
 * registers, each on one line (a `### \`parlor …\`` heading or a `| \`parlor …\`` table row) that
 * names every option of the command. A command added without its line fails here.
 */
const io: Io = {
  env: {},
  cwd: '/',
  stdout: () => {},
  stderr: () => {},
  transport: async () => ({ status: 200, headers: {}, text: '{}' }),
  setExitCode: () => {},
};

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const commandsSection = readme.slice(readme.indexOf('\n## Commands'), readme.indexOf('\n## Layout'));

/** Every command as `[name, options]`: `bots create`, …, and a group without subcommands (`audit`) itself. */
const commands: [string, string[]][] = [];
const visible = (c: Command) => c.name() !== 'help';
const longOptions = (c: Command) => c.options.flatMap((o) => (o.long ? [o.long] : []));
for (const group of buildProgram(io).commands.filter(visible)) {
  const subs = group.commands.filter(visible);
  if (subs.length === 0) commands.push([group.name(), longOptions(group)]);
  for (const sub of subs) commands.push([`${group.name()} ${sub.name()}`, longOptions(sub)]);
}

/** The README line that introduces `parlor <command>`: a heading or a table row starting with it. */
function synopsis(command: string): string | undefined {
  const start = new RegExp(`^(?:### |\\| )\`parlor ${command}[\\s\`]`);
  return commandsSection.split('\n').find((line) => start.test(line));
}

describe('packages/cli/README.md', () => {
  it('finds the commands of the program', () => {
    expect(commands.map(([name]) => name)).toEqual(
      expect.arrayContaining([
        'bots create',
        'subscriptions grant',
        'notifications broadcast',
        'guilds sponsor',
        'audit',
      ]),
    );
  });

  it.each(commands)('lists parlor %s under "Commands" with each of its options', (command, options) => {
    const line = synopsis(command);
    expect(line, `no "### \`parlor ${command} …\`" heading or "| \`parlor ${command} …\`" row`).toBeDefined();
    for (const option of options) expect(line, option).toContain(option);
  });
});
