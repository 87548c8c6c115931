import { PermissionLevel } from '@parlor/protocol';
import { and, count, desc, eq, gt, isNull, not, or, type SQL, sql } from 'drizzle-orm';
import { type Db, deleteBatch } from '../../platform/db/index.js';
import { chatInvites, chats, users } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

export type InviteRow = typeof chatInvites.$inferSelect;

/** An invite that can still be used: not revoked, not expired, not used up. */
export const inviteIsLive = (now: Date) =>
  and(
    isNull(chatInvites.revokedAt),
    or(isNull(chatInvites.expiresAt), gt(chatInvites.expiresAt, now)),
    or(isNull(chatInvites.maxUses), sql`${chatInvites.uses} < ${chatInvites.maxUses}`),
  );
/** The live invite with this code (what a join spends and a delete revokes). */
const liveInvite = (code: string, now: Date) => and(eq(chatInvites.code, code), inviteIsLive(now));

/**
 * The private chat an invite is for, by its owner (null: the owner's account is gone). A private
 * chat's invites come from its owner or Admins and above (docs/api.md, Chats), so it honours an
 * invite only while its creator may still issue one.
 */
export interface PrivateChatOwner {
  ownerUserId: number | null;
}

/**
 * Whether the invite's creator may issue invites to a private chat of this owner as of the
 * statement: the owner, or an account that still exists at Admin level or above. The creator's
 * level is read, not locked: callers hold the chat's row (chat rows before users rows, docs/api.md
 * Moderation), and a level change racing them may come after them.
 */
export function creatorMayInvite(chat: PrivateChatOwner): SQL {
  const isOwner = chat.ownerUserId === null ? sql`false` : sql`${chatInvites.createdBy} = ${chat.ownerUserId}`;
  return sql`(${isOwner} or exists (select 1 from ${users} where ${users.id} = ${chatInvites.createdBy} and ${users.permissionLevel} >= ${PermissionLevel.ADMIN}))`;
}

/** The advisory-lock class of a chat's invite creations (the key is the chat id). */
const INVITE_CREATION_LOCK = 7246;

/** A chat's live invites, of a private chat (`privateChat` given) only those its join honours. */
const liveOf = (chatId: number, now: Date, privateChat?: PrivateChatOwner) =>
  and(eq(chatInvites.chatId, chatId), inviteIsLive(now), privateChat ? creatorMayInvite(privateChat) : undefined);

/** Invites of one chat: issue, list, spend, revoke. */
export function makeInviteStore(db: Db) {
  return {
    /**
     * Serialises the invite creations of one chat until the transaction ends (an advisory lock
     * on its id), so that a count of its live invites holds until the insert: the chat's row is
     * held only FOR SHARE, which concurrent creations share. Take it after the chat's row.
     */
    async holdInviteCreation(chatId: number, tx: Tx): Promise<void> {
      await tx.execute(sql`select pg_advisory_xact_lock(${INVITE_CREATION_LOCK}::integer, ${chatId}::integer)`);
    },
    /**
     * How many live invites the chat stores now (what Limits.INVITES_PER_CHAT bounds), a private
     * chat's whose creator may no longer issue them included: the list leaves those out, but a
     * creator promoted again or the chat made public brings them back, listed and honoured.
     */
    async liveInviteCount(chatId: number, now: Date, tx: Tx): Promise<number> {
      const [row] = await tx.select({ n: count() }).from(chatInvites).where(liveOf(chatId, now));
      return row?.n ?? 0;
    },
    async insertInvite(values: typeof chatInvites.$inferInsert, tx: Tx = db): Promise<InviteRow> {
      const [row] = await tx.insert(chatInvites).values(values).returning();
      if (!row) throw new Error('insert returned no row');
      return row;
    },
    /**
     * A chat's live invites, newest first: the ones a join may spend. For a private chat
     * (`privateChat` given) only those its join honours (`creatorMayInvite`).
     */
    async invitesOf(chatId: number, now: Date, privateChat?: PrivateChatOwner): Promise<InviteRow[]> {
      return db
        .select()
        .from(chatInvites)
        .where(liveOf(chatId, now, privateChat))
        .orderBy(desc(chatInvites.createdAt));
    },
    /** The live invite with this code (unknown, expired, used up or revoked: none). */
    async invitesOfCode(code: string, now: Date): Promise<InviteRow[]> {
      return db.select().from(chatInvites).where(liveInvite(code, now));
    },
    /**
     * Spends one use of a live invite atomically; undefined when it is unknown, expired or used up,
     * or, for a private chat (`privateChat` given, as read under the chat's lock), when its creator
     * may no longer issue invites to it (`creatorMayInvite`): nothing is spent then.
     */
    async useInvite(code: string, now: Date, tx: Tx, privateChat?: PrivateChatOwner): Promise<InviteRow | undefined> {
      const [row] = await tx
        .update(chatInvites)
        .set({ uses: sql`${chatInvites.uses} + 1` })
        .where(and(liveInvite(code, now), privateChat ? creatorMayInvite(privateChat) : undefined))
        .returning();
      return row;
    },
    /**
     * Revokes the chat's invite while it is live (not revoked, expired or used up), decided in the
     * statement: of deletes racing one another (or the invite's last use or expiry), one revokes it
     * and the others find nothing. Answers whether this one did.
     */
    async revokeInvite(chatId: number, code: string, now: Date): Promise<boolean> {
      const rows = await db
        .update(chatInvites)
        .set({ revokedAt: now })
        .where(and(eq(chatInvites.chatId, chatId), liveInvite(code, now)))
        .returning({ code: chatInvites.code });
      return rows.length > 0;
    },
    /**
     * Revokes the live invites of a chat made private whose creator may not issue invites to it
     * (`creatorMayInvite`): those a member made while it was public. Answers how many.
     */
    async revokeUnissuable(chatId: number, chat: PrivateChatOwner, now: Date, tx: Tx): Promise<number> {
      const rows = await tx
        .update(chatInvites)
        .set({ revokedAt: now })
        .where(and(eq(chatInvites.chatId, chatId), inviteIsLive(now), not(creatorMayInvite(chat))))
        .returning({ code: chatInvites.code });
      return rows.length;
    },
    /**
     * Revokes the live invites a user made to private chats, in the transaction that deletes the
     * account: once it is gone they are neither its chat's owner's nor an Admin's
     * (`creatorMayInvite`), so no join honours them and nothing brings them back, yet they would
     * keep their places of Limits.INVITES_PER_CHAT, unlisted. Its invites to public chats stay:
     * they still open them (and a chat made private later revokes them, revokeUnissuable).
     * Invite rows come after the chat and users rows the deletion holds, as a join takes them.
     */
    async revokePrivateOfDeleted(userId: number, now: Date, tx: Tx): Promise<number> {
      const rows = await tx
        .update(chatInvites)
        .set({ revokedAt: now })
        .where(
          and(
            eq(chatInvites.createdBy, userId),
            inviteIsLive(now),
            sql`${chatInvites.chatId} in (select ${chats.id} from ${chats} where ${chats.type} = 'private')`,
          ),
        )
        .returning({ code: chatInvites.code });
      return rows.length;
    },
  };
}

/**
 * Invites dead at or before `before`: revoked then, expired then, or used up and created then (no
 * column records the last use, so a used-up invite counts from its creation). `before` is in the
 * past, so no live invite matches: a live one has no revocation, an expiry after now (or none)
 * and uses left. The expression is that of the index chat_invites_dead_idx (schema.ts), exactly;
 * "live" is `inviteIsLive` above.
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
