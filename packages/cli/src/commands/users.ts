import {
  type AdminUserUpdateBody,
  Limits,
  PermissionNames,
  type PunishBody,
  type ReasonBody,
  type TimeoutBody,
} from '@parlor/protocol';
import { Argument, type Command, InvalidArgumentError, Option } from 'commander';
import { nameIn, parseId } from '../args.js';
import { ExitCode, type Io } from '../io.js';
import { callServer } from '../run.js';

const DAY_S = 86_400;
const MAX_DAYS = Limits.PUNISH_DURATION_MAX_S / DAY_S;

/** A whole number from min to max (durations of punishments). */
function wholeBetween(min: number, max: number, unit: string): (value: string) => number {
  return (value) => {
    const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(`Expected a whole number of ${unit} from ${min} to ${max}.`);
    return n;
  };
}

const userArgument = () => new Argument('<user_id>', 'the user’s id').argParser(parseId);
const reasonOption = () =>
  new Option(
    '--reason <reason>',
    `shown to the user and kept in the audit log (≤ ${Limits.PUNISH_REASON_MAX} characters)`,
  );
const secondsOption = (description: string) =>
  new Option('--seconds <n>', description).argParser(
    wholeBetween(Limits.PUNISH_DURATION_MIN_S, Limits.PUNISH_DURATION_MAX_S, 'seconds'),
  );

/** `parlor users …`: user administration (spec 4.8, /v1/admin/users/* and /v1/admin/punishments/*). */
export function registerUsers(program: Command, io: Io): void {
  const users = program.command('users').description('manage users: levels, names, punishments, deletion');

  users
    .command('set-permission')
    .description('set a user’s permission level and print the updated user')
    .addArgument(userArgument())
    .addArgument(new Argument('<level>', Object.keys(PermissionNames).join(', ')).argParser(nameIn(PermissionNames)))
    .addHelpText('after', '\nExample:\n  $ parlor users set-permission 42 moderator')
    .action(async (userId: number, level: keyof typeof PermissionNames, _opts: unknown, command: Command) => {
      const body: AdminUserUpdateBody = { permission_level: PermissionNames[level] };
      await callServer(command, io, { method: 'POST', path: `v1/admin/users/${userId}/update`, body });
    });

  users
    .command('update')
    .description('rename a user and/or set the avatar source, and print the updated user')
    .addArgument(userArgument())
    .option('--username <name>', '3-32 letters, digits, dots, underscores or hyphens')
    .option('--avatar-source <source>', 'a linked platform, platform_a_0 … platform_a_5, or "" (earliest platform)')
    .addHelpText('after', '\nExample:\n  $ parlor users update 42 --avatar-source platform_a_0')
    .action(async (userId: number, opts: { username?: string; avatarSource?: string }, command: Command) => {
      const body: AdminUserUpdateBody = {};
      if (opts.username !== undefined) body.username = opts.username;
      if (opts.avatarSource !== undefined) body.avatar_source = opts.avatarSource;
      if (Object.keys(body).length === 0)
        command.error('error: give --username and/or --avatar-source', { exitCode: ExitCode.REFUSED });
      await callServer(command, io, { method: 'POST', path: `v1/admin/users/${userId}/update`, body });
    });

  users
    .command('delete')
    .description('delete an account: its sessions end and its platform identities are freed; prints {ok}')
    .addArgument(userArgument())
    .addHelpText('after', '\nExample:\n  $ parlor users delete 42')
    .action(async (userId: number, _opts: unknown, command: Command) => {
      await callServer(command, io, { method: 'POST', path: `v1/admin/users/${userId}/delete` });
    });

  users
    .command('ban')
    .description('ban platform-wide (permanent unless --days or --seconds) and print the record')
    .addArgument(userArgument())
    .addOption(
      new Option('--days <n>', `ban length in days (1-${MAX_DAYS})`)
        .argParser(wholeBetween(1, MAX_DAYS, 'days'))
        .conflicts('seconds'),
    )
    .addOption(secondsOption(`ban length in seconds (${Limits.PUNISH_DURATION_MIN_S}-${Limits.PUNISH_DURATION_MAX_S})`))
    .addOption(reasonOption())
    .addHelpText('after', '\nExamples:\n  $ parlor users ban 42 --days 7 --reason "spam"\n  $ parlor users ban 42')
    .action(async (userId: number, opts: { days?: number; seconds?: number; reason?: string }, command: Command) => {
      const body: PunishBody = { user_id: userId };
      const duration = opts.days !== undefined ? opts.days * DAY_S : opts.seconds;
      if (duration !== undefined) body.duration = duration;
      if (opts.reason !== undefined) body.reason = opts.reason;
      await callServer(command, io, { method: 'POST', path: 'v1/admin/punishments/ban', body });
    });

  users
    .command('unban')
    .description('lift a platform ban')
    .addArgument(userArgument())
    .addOption(reasonOption())
    .addHelpText('after', '\nExample:\n  $ parlor users unban 42 --reason "appeal accepted"')
    .action(async (userId: number, opts: { reason?: string }, command: Command) => {
      const body: ReasonBody = { user_id: userId };
      if (opts.reason !== undefined) body.reason = opts.reason;
      await callServer(command, io, { method: 'POST', path: 'v1/admin/punishments/unban', body });
    });

  users
    .command('timeout')
    .description('time a user out platform-wide and print the record')
    .addArgument(userArgument())
    .addOption(
      secondsOption(
        `timeout length in seconds (${Limits.PUNISH_DURATION_MIN_S}-${Limits.PUNISH_DURATION_MAX_S})`,
      ).makeOptionMandatory(),
    )
    .addOption(reasonOption())
    .addHelpText('after', '\nExample:\n  $ parlor users timeout 42 --seconds 3600 --reason "cool down"')
    .action(async (userId: number, opts: { seconds: number; reason?: string }, command: Command) => {
      const body: TimeoutBody = { user_id: userId, duration: opts.seconds };
      if (opts.reason !== undefined) body.reason = opts.reason;
      await callServer(command, io, { method: 'POST', path: 'v1/admin/punishments/timeout', body });
    });

  users
    .command('warn')
    .description('warn a user (a notification and a record) and print the record')
    .addArgument(userArgument())
    .addOption(reasonOption())
    .addHelpText('after', '\nExample:\n  $ parlor users warn 42 --reason "be nice"')
    .action(async (userId: number, opts: { reason?: string }, command: Command) => {
      const body: ReasonBody = { user_id: userId };
      if (opts.reason !== undefined) body.reason = opts.reason;
      await callServer(command, io, { method: 'POST', path: 'v1/admin/punishments/warn', body });
    });
}
