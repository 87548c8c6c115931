import { randomBytes } from 'node:crypto';
import { Limits } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { storedCallerLevel } from '../users/users.caller.js';
import { toInvite } from './chats.presenter.js';
import { canManage, type Viewer } from './chats.rules.js';
import type { ChatRow, ChatsStore, ChatWithCount } from './chats.store.js';

export interface ChatInvitesDeps {
  db: Db;
  store: ChatsStore;
  clock: Clock;
  /** The chat row as of now (chats.service.ts): a deleted chat answers ERR_CHAT_NOT_FOUND. */
  mustGet: (chatId: number) => Promise<ChatWithCount>;
}

/** The chat's owner, or Admins and above (chats.rules `canManage`); else 403. */
export const assertChatManager = (viewer: Viewer, chat: Pick<ChatRow, 'ownerUserId'>): void => {
  if (!canManage(viewer, chat.ownerUserId)) throw appError('ERR_FORBIDDEN');
};

/** A chat's invites (chats.service.ts composes them): create, list, delete. Joining by one is chats.join.ts. */
export function makeChatInvites({ db, store, clock, mustGet }: ChatInvitesDeps) {
  return {
    /**
     * Public chats: any member may invite; private chats: their owner and Admins and above. One
     * transaction that holds the chat's row (FOR SHARE) from its read to the invite's insert: a
     * deletion or a change of type committed before is read here (404, or a private chat's rule),
     * one that comes later waits for the invite (and making the chat private then revokes a
     * member's). The creator's level and state are the stored ones (storedCallerLevel: a creator
     * Banned or timed out on another node, not yet heard of here, is refused as its session would
     * be), as the join that spends the invite reads them; its row is held FOR SHARE after the
     * chat's (chat rows before users rows), so a demotion, ban or timeout either committed before
     * or waits for the invite.
     * A chat holds up to Limits.INVITES_PER_CHAT live invites (409 ERR_INVITE_LIMIT past it),
     * every stored live one counted (liveInviteCount), under a lock that serialises the chat's creations: two
     * creations racing for the last place, on any nodes, cannot both pass the count. Counted, and
     * the invite stamped, at the time that lock is held, not when the request began: an invite
     * that expired while this waited for it (another creation of the chat's) no longer counts.
     */
    async createInvite(viewer: Viewer, chatId: number, body: { max_uses?: number; expires_in_seconds?: number }) {
      const invite = await db.transaction(async (tx) => {
        const chat = await store.shareById(chatId, tx);
        if (!chat) throw appError('ERR_CHAT_NOT_FOUND');
        // Users rows after chat rows (docs/api.md, Moderation). An account deleted meanwhile took its session with it.
        const level = await storedCallerLevel(tx, viewer.userId, clock);
        const creator: Viewer = { userId: viewer.userId, permissionLevel: level };
        const member = chat.type === 'public' && (await store.isMember(chatId, viewer.userId, tx));
        if (!member && !canManage(creator, chat.ownerUserId)) throw appError('ERR_FORBIDDEN');
        if (chat.type === 'direct') throw appError('ERR_FORBIDDEN', 'Direct chats take no invites.');
        // After the chat's row, as every creation takes them; the count holds until the insert.
        await store.holdInviteCreation(chatId, tx);
        const now = clock.now();
        const live = await store.liveInviteCount(chatId, now, tx);
        if (live >= Limits.INVITES_PER_CHAT) throw appError('ERR_INVITE_LIMIT');
        return store.insertInvite(
          {
            code: randomBytes(9).toString('base64url'),
            chatId,
            createdBy: viewer.userId,
            maxUses: body.max_uses ?? null,
            expiresAt: body.expires_in_seconds ? new Date(now.getTime() + body.expires_in_seconds * 1000) : null,
            createdAt: now,
          },
          tx,
        );
      });
      return toInvite(invite);
    },

    /**
     * The invites a join accepts now: of a private chat, only those whose creator may still issue
     * them. A read: the caller's right follows its session (a demotion reaches it with the session
     * cache's invalidation), unlike the writes, which read the level as stored.
     */
    async invites(viewer: Viewer, chatId: number) {
      const chat = await mustGet(chatId);
      assertChatManager(viewer, chat);
      return (await store.invitesOf(chatId, clock.now(), chat.type === 'private' ? chat : undefined)).map(toInvite);
    },

    /**
     * Revokes a live invite: its creator's, or the chat's owner or an Admin and above. Anyone but
     * its creator is decided on the level and state as stored, as an invite's creation is (the
     * session's view of it is checked first, as a quick refusal): a demotion, ban or timeout
     * committed on another node, not yet heard of here, is seen (403, ERR_BANNED or
     * ERR_TIMED_OUT for the latter two). The revocation is one statement of its own, so the row is
     * read, not locked: a demotion that commits after that read is ordered after the revocation.
     * An account deleted meanwhile: 401, as for a creation.
     */
    async deleteInvite(viewer: Viewer, chatId: number, code: string): Promise<void> {
      const chat = await mustGet(chatId);
      const invite = (await store.invitesOfCode(code, clock.now())).find((i) => i.chatId === chatId);
      if (!invite) throw appError('ERR_INVITE_NOT_FOUND');
      if (invite.createdBy !== viewer.userId) {
        if (!canManage(viewer, chat.ownerUserId)) throw appError('ERR_FORBIDDEN');
        const level = await storedCallerLevel(db, viewer.userId, clock, 'read');
        if (!canManage({ userId: viewer.userId, permissionLevel: level }, chat.ownerUserId))
          throw appError('ERR_FORBIDDEN');
      }
      // Another delete (or the last use, or the expiry) got there between the read and this write.
      if (!(await store.revokeInvite(chatId, code, clock.now()))) throw appError('ERR_INVITE_NOT_FOUND');
    },
  };
}
