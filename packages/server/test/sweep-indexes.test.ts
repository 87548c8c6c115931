import { type SQL, sql } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { commandsBefore } from '../src/modules/bots/bots.store.js';
import { activityBefore } from '../src/modules/chats/chats.activity.store.js';
import { dueDirect } from '../src/modules/chats/chats.direct.store.js';
import { invitesDeadBefore } from '../src/modules/chats/chats.invites.store.js';
import { duePurge, ofDeletedChats } from '../src/modules/chats/chats.purge.store.js';
import { liftDue, restoreDue } from '../src/modules/moderation/moderation.store.js';
import { notificationsBefore } from '../src/modules/notifications/notifications.store.js';
import { expiryDue, sessionsOver } from '../src/modules/sessions/sessions.store.js';
import { subscriptionsDue } from '../src/modules/subscriptions/subscriptions.store.js';
import { rowsOf } from '../src/platform/db/index.js';
import {
  botCommands,
  chatActivity,
  chatInvites,
  chatMembers,
  keyEnvelopes,
  messages,
  notifications,
  sessions,
} from '../src/platform/db/schema.js';
import { describeApp, startApp, type TestApp } from './support/app.js';

let app: TestApp;

beforeAll(async () => {
  app = await startApp();
});
afterAll(async () => app?.close());

const dialect = new PgDialect();
/** Names of the statements `plans` prepares, one each (a prepared statement outlives a failed transaction). */
let prepared = 0;

/**
 * The plans of a sweep's own statement text, with sequential scans priced out: on the tiny tables
 * of a test a scan would win on cost, so this asks whether an index can serve the predicate at
 * all. Without a matching index the plan is a (disabled) sequential scan or another index read
 * whole with the predicate as a filter.
 * Two plans: the one for the statement's values, and the generic one, planned without them, that
 * PostgreSQL may switch to after a prepared statement's first runs (on PostgreSQL every statement
 * is prepared: platform/db/prepared.ts). A partial index whose predicate the statement meets only
 * through a parameter's value serves the first and not the second.
 */
async function plans(query: SQL): Promise<{ custom: string; generic: string }> {
  const { sql: text, params } = dialect.sqlToQuery(query);
  // The values again, as the prepared statement's arguments: quoted, each takes its parameter's type.
  const args = params.map((p) => `'${(p instanceof Date ? p.toISOString() : String(p)).replaceAll("'", "''")}'`);
  const name = `sweep_plan_${++prepared}`;
  return app.database.db.transaction(async (tx) => {
    const explain = async (statement: SQL) =>
      rowsOf<Record<string, string>>(await tx.execute(statement))
        .map((r) => Object.values(r).join(' '))
        .join('\n');
    await tx.execute(sql`set local enable_seqscan = off`);
    const custom = await explain(sql`explain ${query}`);
    await tx.execute(sql`set local plan_cache_mode = force_generic_plan`);
    await tx.execute(sql.raw(`prepare ${name} as ${text}`));
    const generic = await explain(sql.raw(`explain execute ${name}${args.length > 0 ? `(${args.join(', ')})` : ''}`));
    await tx.execute(sql.raw(`deallocate ${name}`));
    return { custom, generic };
  });
}

const now = new Date();
/** A plan line that reads the index: an index scan over it, or a bitmap built from it. */
const reads = (index: string) =>
  new RegExp(`(?:Index Scan using|Index Only Scan using|Bitmap Index Scan on) ${index}\\b`);

/** Both plans of the statement (plans) read the index. */
async function expectReads(query: SQL, index: string): Promise<void> {
  const { custom, generic } = await plans(query);
  expect(custom).toMatch(reads(index));
  expect(generic, 'the generic plan').toMatch(reads(index));
}

describeApp('the sweeps read through partial indexes that match their predicates', () => {
  it.each([
    ['archive', 'chats_direct_expiry_idx'],
    ['remove', 'chats_direct_archived_idx'],
  ] as const)('direct-chat step %s uses %s', async (step, index) => {
    await expectReads(dueDirect(step, now, 200), index);
  });

  it('the purge of deleted chats (any type) uses chats_deleted_idx', async () => {
    await expectReads(duePurge(now, 200), 'chats_deleted_idx');
  });

  it.each([
    ['messages', messages.chatId],
    ['key_envelopes', keyEnvelopes.chatId],
    ['chat_activity', chatActivity.chatId],
    ['chat_members', chatMembers.chatId],
    ['chat_invites', chatInvites.chatId],
  ] as const)('clearing the %s of deleted chats reaches them through chats_deleted_idx', async (_table, chatId) => {
    const query = sql`select 1 from ${chatId.table} where ${ofDeletedChats(chatId, now)} limit 5000 for update skip locked`;
    await expectReads(query, 'chats_deleted_idx');
  });

  it('punishment expiry uses moderation_actions_expiry_idx', async () => {
    await expectReads(liftDue(now, 500), 'moderation_actions_expiry_idx');
  });

  it('the state restore uses users_state_expiry_idx', async () => {
    await expectReads(restoreDue(now, 500), 'users_state_expiry_idx');
  });

  it('the subscription expiry sweep uses users_subscription_expiry_idx', async () => {
    await expectReads(subscriptionsDue(app.database.db, now, 500).getSQL(), 'users_subscription_expiry_idx');
  });

  it('the session expiry sweep uses sessions_expiry_idx', async () => {
    await expectReads(expiryDue(now, 200), 'sessions_expiry_idx');
  });

  it.each([
    [
      'sessions',
      sql`select ${sessions.id} from ${sessions} where ${sessionsOver(now)} limit 1000`,
      'sessions_over_idx',
    ],
    [
      'notifications',
      sql`select ${notifications.id} from ${notifications} where ${notificationsBefore(now)} limit 1000`,
      'notifications_created_idx',
    ],
    [
      'bot_commands',
      sql`select ${botCommands.id} from ${botCommands} where ${commandsBefore(now)} limit 1000`,
      'bot_commands_created_idx',
    ],
    [
      'chat_activity',
      sql`select ${chatActivity.id} from ${chatActivity} where ${activityBefore(now)} limit 1000`,
      'chat_activity_created_idx',
    ],
    [
      'dead chat_invites',
      sql`select ${chatInvites.code} from ${chatInvites} where ${invitesDeadBefore(now)} limit 1000`,
      'chat_invites_dead_idx',
    ],
  ] as const)('retention of %s uses %s', async (_table, query, index) => {
    await expectReads(query, index);
  });
});
