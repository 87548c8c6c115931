import { type AdminUserUpdateBody, PermissionNames } from '@parlor/protocol';
import { Argument, type Command } from 'commander';
import { nameIn, parseId } from '../args.js';
import type { Io } from '../io.js';
import { callServer } from '../run.js';

/** `parlor users …`: user administration (spec 4.8, POST /v1/admin/users/{id}/update). */
export function registerUsers(program: Command, io: Io): void {
  const users = program.command('users').description('manage users');

  users
    .command('set-permission')
    .description('set a user’s permission level and print the updated user')
    .addArgument(new Argument('<user_id>', 'the user’s id').argParser(parseId))
    .addArgument(new Argument('<level>', Object.keys(PermissionNames).join(', ')).argParser(nameIn(PermissionNames)))
    .addHelpText('after', '\nExample:\n  $ parlor users set-permission 42 moderator')
    .action(async (userId: number, level: keyof typeof PermissionNames, _opts: unknown, command: Command) => {
      const body: AdminUserUpdateBody = { permission_level: PermissionNames[level] };
      await callServer(command, io, { method: 'POST', path: `v1/admin/users/${userId}/update`, body });
    });
}
