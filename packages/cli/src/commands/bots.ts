import { type BotCreateBody, BotTypeNames, Limits } from '@parlor/protocol';
import { type Command, Option } from 'commander';
import { integerAtLeast, nameIn, parseId } from '../args.js';
import type { Io } from '../io.js';
import { callServer } from '../run.js';

interface CreateOptions {
  name: string;
  type?: BotCreateBody['type'];
  rateLimitPerHour?: number;
  ownerUserId?: number;
}

/** `parlor bots …`: bot registration (spec 4.8, POST /v1/admin/bots/create). */
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
}
