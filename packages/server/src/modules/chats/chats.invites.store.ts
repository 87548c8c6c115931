import { type SQL, sql } from 'drizzle-orm';
import { type Db, deleteBatch } from '../../platform/db/index.js';
import { chatInvites } from '../../platform/db/schema.js';

/**
 * Invites dead at or before `before`: revoked then, expired then, or used up and created then (no
 * column records the last use, so a used-up invite counts from its creation). `before` is in the
 * past, so no live invite matches: a live one has no revocation, an expiry after now (or none)
 * and uses left. The expression is that of the index chat_invites_dead_idx (schema.ts), exactly;
 * "live" is chats.store's inviteIsLive.
 */
export function invitesDeadBefore(before: Date): SQL {
  return sql`least(${chatInvites.revokedAt}, ${chatInvites.expiresAt}, case when ${chatInvites.uses} >= ${chatInvites.maxUses} then ${chatInvites.createdAt} end) <= ${before.toISOString()}`;
}

/** The retention of dead invites (wiring/retention.ts); a deleted chat's invites go with its purge. */
export function makeInviteRetentionStore(db: Db) {
  return {
    /** Deletes up to `limit` invites dead at or before `before` (retention); answers how many. */
    async pruneDead(before: Date, limit: number): Promise<number> {
      return deleteBatch(db, chatInvites, chatInvites.code, invitesDeadBefore(before), limit);
    },
  };
}
