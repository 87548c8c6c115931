import {
  type GuildPremiumBody,
  type GuildPremiumRevokeBody,
  type GuildSponsorBody,
  Limits,
  SNOWFLAKE_PATTERN,
} from '@parlor/protocol';
import { Argument, type Command, InvalidArgumentError, Option } from 'commander';
import { parseId } from '../args.js';
import { ExitCode, type Io } from '../io.js';
import { callServer } from '../run.js';

const snowflake = new RegExp(SNOWFLAKE_PATTERN);

/** A guild id is the chat platform's snowflake: 1-20 digits, kept as text (too long for a JS number). */
function parseGuildId(value: string): string {
  if (!snowflake.test(value)) throw new InvalidArgumentError('Expected the guild’s platform id (1-20 digits).');
  return value;
}

/** --days: a whole number of days, 1-3650. */
function parseDays(value: string): number {
  const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > Limits.GUILD_PREMIUM_DAYS_MAX)
    throw new InvalidArgumentError(`Expected a whole number of days from 1 to ${Limits.GUILD_PREMIUM_DAYS_MAX}.`);
  return n;
}

const guildArgument = () => new Argument('<guild_id>', 'the guild’s platform id').argParser(parseGuildId);
const reasonOption = () => new Option('--reason <reason>', `kept in the audit log (1-${Limits.REASON_MAX} characters)`);

/** `parlor guilds …`: guild premium and sponsors (POST /v1/admin/guilds/{guild_id}/…). */
export function registerGuilds(program: Command, io: Io): void {
  const guilds = program.command('guilds').description('guild premium and sponsors');

  guilds
    .command('premium')
    .description('give a guild premium for --days from now (or end it with --revoke) and print the guild')
    .addArgument(guildArgument())
    .addOption(new Option('--days <n>', `days from now (1-${Limits.GUILD_PREMIUM_DAYS_MAX})`).argParser(parseDays))
    .addOption(new Option('--revoke', 'end the guild’s premium').conflicts('days'))
    .addOption(reasonOption())
    .addHelpText(
      'after',
      '\nExamples:\n  $ parlor guilds premium 81384788765712384 --days 30\n  $ parlor guilds premium 81384788765712384 --revoke',
    )
    .action(async (guildId: string, opts: { days?: number; revoke?: boolean; reason?: string }, command: Command) => {
      if (opts.days === undefined && !opts.revoke)
        command.error('error: give --days <n> or --revoke', { exitCode: ExitCode.REFUSED });
      const path = `v1/admin/guilds/${guildId}/premium`;
      if (opts.days !== undefined) {
        const body: GuildPremiumBody = { days: opts.days };
        if (opts.reason !== undefined) body.reason = opts.reason;
        await callServer(command, io, { method: 'POST', path, body });
        return;
      }
      const body: GuildPremiumRevokeBody = {};
      if (opts.reason !== undefined) body.reason = opts.reason;
      await callServer(command, io, { method: 'POST', path: `${path}/revoke`, body });
    });

  guilds
    .command('sponsor')
    .description('make a user a sponsor of a guild (or stop it with --remove) and print the guild')
    .addArgument(guildArgument())
    .addArgument(new Argument('<user_id>', 'the user’s id').argParser(parseId))
    .addOption(new Option('--remove', 'end the sponsorship'))
    .addOption(reasonOption())
    .addHelpText(
      'after',
      '\nExamples:\n  $ parlor guilds sponsor 81384788765712384 42\n  $ parlor guilds sponsor 81384788765712384 42 --remove',
    )
    .action(async (guildId: string, userId: number, opts: { remove?: boolean; reason?: string }, command: Command) => {
      const body: GuildSponsorBody = { user_id: userId };
      if (opts.reason !== undefined) body.reason = opts.reason;
      const verb = opts.remove ? 'remove' : 'add';
      await callServer(command, io, { method: 'POST', path: `v1/admin/guilds/${guildId}/sponsors/${verb}`, body });
    });
}
