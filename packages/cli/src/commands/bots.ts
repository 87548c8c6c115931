import { type AdminBotUpdateBody, type BotCreateBody, BotTypeNames, Limits } from '@parlor/protocol';
import { Argument, type Command, Option } from 'commander';
import { integerAtLeast, nameIn, parseId } from '../args.js';
import { ExitCode, type Io } from '../io.js';
import { callServer } from '../run.js';

interface CreateOptions {
  name: string;
  type?: BotCreateBody['type'];
  rateLimitPerHour?: number;
  ownerUserId?: number;
}

/** `parlor bots …`: bot registration, changes and deletion (spec 4.8, /v1/admin/bots/*). */
export function registerBots(program: Command, io: Io): void {
  const bots = program.command('bots').description('manage bots');

  bots
    .command('create')
    .description('register a bot and print its id and API key (the key is shown only this once)')
    .requiredOption('--name <name>', `display name (1-${Limits.BOT_NAME_MAX} characters)`)
    .addOption(
      new Option('--type <type>', `${Object.keys(BotTypeNames).join(', ')} (server default: community)`).argParser(
        nameIn(BotTypeNames),
      ),
    )
    .addOption(
      new Option(
        '--rate-limit-per-hour <n>',
        `requests per hour, ≥ 1 (server default: ${Limits.BOT_DEFAULT_RATE_LIMIT_PER_HOUR})`,
      ).argParser(integerAtLeast(1)),
    )
    .addOption(new Option('--owner-user-id <id>', 'the user who owns the bot').argParser(parseId))
    .addHelpText(
      'after',
      '\nExample:\n  $ parlor bots create --name "Music bot" --type verified --rate-limit-per-hour 5000',
    )
    .action(async (opts: CreateOptions, command: Command) => {
      const body: BotCreateBody = { name: opts.name };
      if (opts.type !== undefined) body.type = opts.type;
      if (opts.rateLimitPerHour !== undefined) body.rate_limit_per_hour = opts.rateLimitPerHour;
      if (opts.ownerUserId !== undefined) body.owner_user_id = opts.ownerUserId;
      await callServer(command, io, { method: 'POST', path: 'v1/admin/bots/create', body });
    });

  bots
    .command('update')
    .description('change a bot and print its full profile (official bots: Owners and the operator)')
    .addArgument(new Argument('<bot_id>', 'the bot’s id').argParser(parseId))
    .option('--name <name>', `display name (1-${Limits.BOT_NAME_MAX} characters)`)
    .addOption(new Option('--type <type>', Object.keys(BotTypeNames).join(', ')).argParser(nameIn(BotTypeNames)))
    .addOption(new Option('--rate-limit-per-hour <n>', 'requests per hour, ≥ 1').argParser(integerAtLeast(1)))
    .addOption(new Option('--owner-user-id <id>', 'the user who owns the bot').argParser(parseId))
    .addOption(new Option('--clear-owner', 'the bot has no owner any more').conflicts('ownerUserId'))
    .option('--avatar-url <url>', 'an http(s) URL')
    .addOption(new Option('--clear-avatar', 'remove the avatar').conflicts('avatarUrl'))
    .addHelpText('after', '\nExample:\n  $ parlor bots update 7 --type verified --rate-limit-per-hour 20000')
    .action(async (botId: number, opts: UpdateOptions, command: Command) => {
      const body = updateBody(opts);
      if (Object.keys(body).length === 0)
        command.error('error: give at least one change', { exitCode: ExitCode.REFUSED });
      await callServer(command, io, { method: 'POST', path: `v1/admin/bots/${botId}/update`, body });
    });

  bots
    .command('delete')
    .description('delete a bot: its API key stops working at once; prints {ok}')
    .addArgument(new Argument('<bot_id>', 'the bot’s id').argParser(parseId))
    .addHelpText('after', '\nExample:\n  $ parlor bots delete 7')
    .action(async (botId: number, _opts: unknown, command: Command) => {
      await callServer(command, io, { method: 'POST', path: `v1/admin/bots/${botId}/delete` });
    });
}

interface UpdateOptions {
  name?: string;
  type?: BotCreateBody['type'];
  rateLimitPerHour?: number;
  ownerUserId?: number;
  clearOwner?: boolean;
  avatarUrl?: string;
  clearAvatar?: boolean;
}

function updateBody(opts: UpdateOptions): AdminBotUpdateBody {
  const body: AdminBotUpdateBody = {};
  if (opts.name !== undefined) body.name = opts.name;
  if (opts.type !== undefined) body.type = opts.type;
  if (opts.rateLimitPerHour !== undefined) body.rate_limit_per_hour = opts.rateLimitPerHour;
  if (opts.ownerUserId !== undefined) body.owner_user_id = opts.ownerUserId;
  if (opts.clearOwner) body.owner_user_id = null;
  if (opts.avatarUrl !== undefined) body.avatar_url = opts.avatarUrl;
  if (opts.clearAvatar) body.avatar_url = null;
  return body;
}
