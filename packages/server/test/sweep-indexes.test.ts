import { type SQL, sql } from 'drizzle-orm';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { commandsBefore } from '../src/modules/bots/bots.store.js';
import { activityBefore } from '../src/modules/chats/chats.activity.store.js';
import { dueDirect } from '../src/modules/chats/chats.direct.store.js';
import { invitesDeadBefore } from '../src/modules/chats/chats.invites.store.js';
import { duePurge, ofDeletedChats } from '../src/modules/chats/chats.purge.store.js';
import { liftDue, restoreDue } from '../src/modules/moderation/moderation.store.js';
import { notificationsBefore } from '../src/modules/notifications/notifications.store.js';
import { expiryDue, sessionsOver } from '../src/modules/sessions/sessions.store.js';
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

/**
 * The plan of a sweep's own statement text, with sequential scans priced out: on the tiny tables
 * of a test a scan would win on cost, so this asks whether an index can serve the predicate at
 * all. Without a matching index the plan is a (disabled) sequential scan or another index read
 * whole with the predicate as a filter.
 */
async function plan(query: SQL): Promise<string> {
  return app.database.db.transaction(async (tx) => {
    await tx.execute(sql`set local enable_seqscan = off`);
    const rows = rowsOf<Record<string, string>>(await tx.execute(sql`explain ${query}`));
    return rows.map((r) => Object.values(r).join(' ')).join('\n');
  });
}

const now = new Date();
/** A plan line that reads the index: an index scan over it, or a bitmap built from it. */
const reads = (index: string) =>
  new RegExp(`(?:Index Scan using|Index Only Scan using|Bitmap Index Scan on) ${index}\\b`);

describeApp('the sweeps read through partial indexes that match their predicates', () => {
  it.each([
    ['archive', 'chats_direct_expiry_idx'],
    ['remove', 'chats_direct_archived_idx'],
  ] as const)('direct-chat step %s uses %s', async (step, index) => {
    expect(await plan(dueDirect(step, now, 200))).toMatch(reads(index));
  });

  it('the purge of deleted chats (any type) uses chats_deleted_idx', async () => {
    expect(await plan(duePurge(now, 200))).toMatch(reads('chats_deleted_idx'));
  });

  it.each([
    ['messages', messages.chatId],
    ['key_envelopes', keyEnvelopes.chatId],
    ['chat_activity', chatActivity.chatId],
    ['chat_members', chatMembers.chatId],
    ['chat_invites', chatInvites.chatId],
  ] as const)('clearing the %s of deleted chats reaches them through chats_deleted_idx', async (_table, chatId) => {
    const query = sql`select 1 from ${chatId.table} where ${ofDeletedChats(chatId, now)} limit 5000 for update skip locked`;
    expect(await plan(query)).toMatch(reads('chats_deleted_idx'));
  });

  it('punishment expiry uses moderation_actions_expiry_idx', async () => {
    expect(await plan(liftDue(now, 500))).toMatch(reads('moderation_actions_expiry_idx'));
  });

  it('the state restore uses users_state_expiry_idx', async () => {
    expect(await plan(restoreDue(now, 500))).toMatch(reads('users_state_expiry_idx'));
  });

  it('the session expiry sweep uses sessions_expiry_idx', async () => {
    expect(await plan(expiryDue(now, 200))).toMatch(reads('sessions_expiry_idx'));
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
    expect(await plan(query)).toMatch(reads(index));
  });
});
