import { Limits, type SubscriptionGrantBody, type SubscriptionRevokeBody } from '@parlor/protocol';
import { Argument, type Command, InvalidArgumentError, Option } from 'commander';
import { nameIn, parseId } from '../args.js';
import { ExitCode, type Io } from '../io.js';
import { callServer } from '../run.js';

const TIERS = { trial: 'TRIAL', premium: 'PREMIUM', lifetime: 'LIFETIME' } as const;

/** --days: a whole number of days, 1-3650. */
function parseDays(value: string): number {
  const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > Limits.SUBSCRIPTION_DAYS_MAX)
    throw new InvalidArgumentError(`Expected a whole number of days from 1 to ${Limits.SUBSCRIPTION_DAYS_MAX}.`);
  return n;
}

const reasonOption = () => new Option('--reason <reason>', `kept in the audit log (1-${Limits.REASON_MAX} characters)`);

/** `parlor subscriptions …`: grant and revoke (spec 4.8, POST /v1/admin/subscriptions/grant|revoke). */
export function registerSubscriptions(program: Command, io: Io): void {
  const subscriptions = program.command('subscriptions').description('grant and revoke subscriptions');

  subscriptions
    .command('grant')
    .description('grant a tier and print the user’s subscription')
    .addArgument(new Argument('<user_id>', 'the user’s id').argParser(parseId))
    .addArgument(
      new Argument(
        '<tier>',
        `trial (${Limits.TRIAL_DAYS} days, once per user), premium (needs --days) or lifetime`,
      ).argParser(nameIn(TIERS)),
    )
    .addOption(
      new Option('--days <n>', `premium only: days from now (1-${Limits.SUBSCRIPTION_DAYS_MAX})`).argParser(parseDays),
    )
    .addOption(reasonOption())
    .addHelpText(
      'after',
      '\nExamples:\n  $ parlor subscriptions grant 42 premium --days 30\n  $ parlor subscriptions grant 42 trial',
    )
    .action(
      async (userId: number, tier: keyof typeof TIERS, opts: { days?: number; reason?: string }, command: Command) => {
        if (tier === 'premium' && opts.days === undefined)
          command.error('error: premium needs --days <n>', { exitCode: ExitCode.REFUSED });
        if (tier !== 'premium' && opts.days !== undefined)
          command.error(`error: --days applies to premium only (${tier} sets its own length)`, {
            exitCode: ExitCode.REFUSED,
          });
        const body: SubscriptionGrantBody = { user_id: userId, tier: TIERS[tier] };
        if (opts.days !== undefined) body.duration_days = opts.days;
        if (opts.reason !== undefined) body.reason = opts.reason;
        await callServer(command, io, { method: 'POST', path: 'v1/admin/subscriptions/grant', body });
      },
    );

  subscriptions
    .command('revoke')
    .description('set a user back to Basic and print the user’s subscription')
    .addArgument(new Argument('<user_id>', 'the user’s id').argParser(parseId))
    .addOption(reasonOption())
    .addHelpText('after', '\nExample:\n  $ parlor subscriptions revoke 42 --reason "refund"')
    .action(async (userId: number, opts: { reason?: string }, command: Command) => {
      const body: SubscriptionRevokeBody = { user_id: userId };
      if (opts.reason !== undefined) body.reason = opts.reason;
      await callServer(command, io, { method: 'POST', path: 'v1/admin/subscriptions/revoke', body });
    });
}
