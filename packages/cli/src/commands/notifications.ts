import { type AdminNotificationBody, Limits, type NotificationType, NotificationTypes } from '@parlor/protocol';
import { Argument, type Command, Option } from 'commander';
import { parseId } from '../args.js';
import type { Io } from '../io.js';
import { callServer } from '../run.js';

interface ContentOptions {
  title: string;
  body: string;
  type: NotificationType;
}

/** What the server requires of a title and a body besides their length (protocol isVisible). */
const VISIBLE = 'at least one visible (not only white space or format characters such as U+200B)';

/** --title, --body and --type, shared by `send` and `broadcast`. */
function withContent(command: Command): Command {
  return command
    .requiredOption('--title <title>', `one line, 1-${Limits.NOTIFICATION_TITLE_MAX} characters, ${VISIBLE}`)
    .requiredOption(
      '--body <body>',
      `1-${Limits.NOTIFICATION_BODY_MAX} characters, ${VISIBLE}; **bold** and [label](https://…) links (http/https only)`,
    )
    .addOption(new Option('--type <type>', 'how clients style it').choices(NotificationTypes).default('info'));
}

const content = (opts: ContentOptions): AdminNotificationBody => ({
  title: opts.title,
  body: opts.body,
  type: opts.type,
});

/** `parlor notifications …`: admin notifications (spec 4.8, POST /v1/admin/notifications). */
export function registerNotifications(program: Command, io: Io): void {
  const notifications = program.command('notifications').description('send, broadcast and delete notifications');

  withContent(
    notifications
      .command('send')
      .description('send a notification to one user and print {id, broadcast_id, recipients}')
      .addArgument(new Argument('<user_id>', 'the recipient’s id').argParser(parseId)),
  )
    .addHelpText('after', '\nExample:\n  $ parlor notifications send 42 --title "Hello" --body "Welcome **back**!"')
    .action(async (userId: number, opts: ContentOptions, command: Command) => {
      const body: AdminNotificationBody = { ...content(opts), user_id: userId };
      await callServer(command, io, { method: 'POST', path: 'v1/admin/notifications', body });
    });

  withContent(
    notifications
      .command('broadcast')
      .description('send a notification to every registered user and print {id, broadcast_id, recipients}'),
  )
    .addHelpText(
      'after',
      '\nExample:\n  $ parlor notifications broadcast --title "Maintenance" --body "Down at **02:00 UTC**." --type warning',
    )
    .action(async (opts: ContentOptions, command: Command) => {
      await callServer(command, io, { method: 'POST', path: 'v1/admin/notifications', body: content(opts) });
    });

  notifications
    .command('delete')
    .description('delete a notification; a copy of a broadcast deletes the whole broadcast')
    .addArgument(new Argument('<id>', 'the notification’s id').argParser(parseId))
    .addHelpText('after', '\nExample:\n  $ parlor notifications delete 1234')
    .action(async (id: number, _opts: unknown, command: Command) => {
      await callServer(command, io, { method: 'POST', path: `v1/admin/notifications/${id}/delete` });
    });
}
