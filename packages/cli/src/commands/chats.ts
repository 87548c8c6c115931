import { type AdminChatCreateBody, type AdminChatUpdateBody, Limits } from '@parlor/protocol';
import { Argument, type Command, Option } from 'commander';
import { parseId } from '../args.js';
import { ExitCode, type Io } from '../io.js';
import { callServer } from '../run.js';

const chatArgument = () => new Argument('<chat_id>', 'the chat’s id').argParser(parseId);

/** `parlor chats …`: official chats, chat settings and deletion (spec 4.8, /v1/admin/chats/*). */
export function registerChats(program: Command, io: Io): void {
  const chats = program.command('chats').description('create official chats, change and delete chats');

  chats
    .command('create-official')
    .description('create an official chat (no owner) and print {chat}')
    .requiredOption('--name <name>', `1-${Limits.CHAT_NAME_MAX} characters`)
    .addHelpText('after', '\nExample:\n  $ parlor chats create-official --name "Announcements"')
    .action(async (opts: { name: string }, command: Command) => {
      const body: AdminChatCreateBody = { name: opts.name };
      await callServer(command, io, { method: 'POST', path: 'v1/admin/chats/create', body });
    });

  chats
    .command('update')
    .description('rename a chat or make it public or private, and print {chat}')
    .addArgument(chatArgument())
    .option('--name <name>', `1-${Limits.CHAT_NAME_MAX} characters`)
    .addOption(new Option('--type <type>', 'public or private').choices(['public', 'private'] as const))
    .addHelpText(
      'after',
      '\nOnly public and private chats change type: an official or direct chat keeps its type\n' +
        '(the server answers 403 ERR_FORBIDDEN to --type).\n' +
        '\nExample:\n  $ parlor chats update 12 --name "Lobby" --type public',
    )
    .action(async (chatId: number, opts: AdminChatUpdateBody, command: Command) => {
      const body: AdminChatUpdateBody = {};
      if (opts.name !== undefined) body.name = opts.name;
      if (opts.type !== undefined) body.type = opts.type;
      if (Object.keys(body).length === 0)
        command.error('error: give --name and/or --type', { exitCode: ExitCode.REFUSED });
      await callServer(command, io, { method: 'POST', path: `v1/admin/chats/${chatId}/update`, body });
    });

  chats
    .command('delete')
    .description('delete a chat: its members leave it at once; prints {ok}')
    .addArgument(chatArgument())
    .addHelpText('after', '\nExample:\n  $ parlor chats delete 12')
    .action(async (chatId: number, _opts: unknown, command: Command) => {
      await callServer(command, io, { method: 'POST', path: `v1/admin/chats/${chatId}/delete` });
    });
}
