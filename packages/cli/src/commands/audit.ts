import { Limits } from '@parlor/protocol';
import { type Command, Option } from 'commander';
import { integerBetween, parseId } from '../args.js';
import type { Io } from '../io.js';
import { callServer } from '../run.js';

/** --limit: a page size the server accepts, checked before anything is sent. */
const parseLimit = integerBetween(1, Limits.AUDIT_PAGE_MAX);
/** --code: an audit code as the route takes it (1-999). */
const parseCode = integerBetween(1, 999);

interface AuditOptions {
  limit?: number;
  code?: number;
  before?: number;
  targetUserId?: number;
}

/** `parlor audit`: the audit log, newest first (spec 4.8, GET /v1/admin/audit). */
export function registerAudit(program: Command, io: Io): void {
  program
    .command('audit')
    .description('print the audit log, newest first, as {entries, next_before}')
    .addOption(
      new Option(
        '--limit <n>',
        `entries per page, 1-${Limits.AUDIT_PAGE_MAX} (server default: ${Limits.AUDIT_PAGE_DEFAULT})`,
      ).argParser(parseLimit),
    )
    .addOption(new Option('--code <n>', 'only this audit code (e.g. 401 ban, 103 user delete)').argParser(parseCode))
    .addOption(
      new Option('--before <id>', 'only entries older than this id (next_before of the previous page)').argParser(
        parseId,
      ),
    )
    .addOption(new Option('--target-user-id <id>', 'only entries about this user').argParser(parseId))
    .addHelpText('after', '\nExamples:\n  $ parlor audit --limit 20\n  $ parlor audit --code 401 --target-user-id 42')
    .action(async (opts: AuditOptions, command: Command) => {
      const query = new URLSearchParams();
      if (opts.limit !== undefined) query.set('limit', String(opts.limit));
      if (opts.code !== undefined) query.set('code', String(opts.code));
      if (opts.before !== undefined) query.set('before', String(opts.before));
      if (opts.targetUserId !== undefined) query.set('target_user_id', String(opts.targetUserId));
      const search = query.size > 0 ? `?${query}` : '';
      await callServer(command, io, { method: 'GET', path: `v1/admin/audit${search}` });
    });
}
