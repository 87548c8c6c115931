import type { Chat } from '@parlor/protocol';
import { sql } from 'drizzle-orm';
import { stateRefusal } from '../../platform/auth.js';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import { canManageOfficial } from '../admin/admin.rules.js';
import { storedCallerLevel } from '../users/users.caller.js';
import { effectiveState, hasPremium } from '../users/users.presenter.js';
import type { Tx } from '../users/users.store.js';
import { assertChatManager } from './chats.invites.js';
import { toChat } from './chats.presenter.js';
import { chatSlots, type Viewer } from './chats.rules.js';
import type { ChatRow, ChatsStore, ChatWithCount } from './chats.store.js';

export interface ChatLifecycleDeps {
  db: Db;
  store: ChatsStore;
  clock: Clock;
  realtime: Pick<Realtime, 'emitTo' | 'leaveChat'>;
  /** The chat row as of now (chats.service.ts): a deleted chat answers ERR_CHAT_NOT_FOUND. */
  mustGet: (chatId: number) => Promise<ChatWithCount>;
  /** A chat as the transaction `tx` just wrote it, with its members counted there (chats.service.ts). */
  written: (row: ChatRow, tx: Tx) => Promise<ChatWithCount>;
  /** Tells the listeners of chat deletions (the room VM stops theirs). */
  removedChats: (chatIds: number[]) => void;
}

/**
 * A public, private or official chat's life (chats.service.ts composes it): its creation, its name
 * and type, its deletion. Direct chats are made and ended in chats.direct.ts.
 */
export function makeChatLifecycle({ db, store, clock, realtime, mustGet, written, removedChats }: ChatLifecycleDeps) {
  /** Official chats are the platform's own: only Owners (and the operator) change or delete them. */
  const assertSettingsManager = (viewer: Viewer, chat: Pick<ChatRow, 'ownerUserId' | 'type'>) => {
    assertChatManager(viewer, chat);
    if (chat.type === 'official' && !canManageOfficial(viewer.permissionLevel))
      throw appError('ERR_FORBIDDEN', 'Only Owners and the operator manage official chats.');
  };

  /**
   * The caller's level as stored (storedCallerLevel), or the operator's as given: the operator
   * (`viewer.operator`, from admin.chats.ts `chatViewer`) has no users row.
   */
  const levelAsStored = (viewer: Viewer, tx: Tx): Promise<number> | number =>
    viewer.operator ? viewer.permissionLevel : storedCallerLevel(tx, viewer.userId, clock);

  /**
   * The chat's row, locked until the commit, once the caller may change or delete it as stored:
   * its level and state read after that lock (chat rows before users rows, docs/api.md
   * Moderation), as an invite's creation reads them, never the session's view of them, which a
   * demotion, ban or timeout committed on another node, or while this waited for the row, has not
   * reached yet. The caller's row is held FOR SHARE until the commit, so one that comes later
   * waits for the write: every transaction that takes both takes the chat's row first (a join, a
   * chat action, a platform ban, an account deletion), so none holds the caller's row while it
   * waits for this chat's. A caller whose account is gone took its session with it: 401, as for an
   * invite; one Banned or timed out answers ERR_BANNED or ERR_TIMED_OUT, as its session would.
   */
  const lockManaged = async (viewer: Viewer, chatId: number, tx: Tx): Promise<ChatRow> => {
    const row = await store.lockById(chatId, tx);
    // Deleted since it was read: nothing changed, so nothing is recorded (`extra`) either.
    if (!row) throw appError('ERR_CHAT_NOT_FOUND');
    assertSettingsManager({ ...viewer, permissionLevel: await levelAsStored(viewer, tx) }, row);
    return row;
  };

  return {
    /**
     * Creates a public or private chat within the creator's slots; the creator is its first member.
     * The slots (spec 2.11) follow the creator's row as locked here, never the session's view of it:
     * a revoke or demotion committed before the creation holds that row is seen, and a later one
     * waits for the creation. A creator whose account is deleted while this runs answers 401
     * ERR_UNAUTHENTICATED (its session ended with it), never a foreign-key error; one Banned or
     * timed out on that row (its effective state, as storedCallerLevel reads it) answers ERR_BANNED
     * or ERR_TIMED_OUT, as its session would once this node hears of it. The answer is the
     * chat as this transaction wrote it (`written`), never read again after the commit.
     * Like every write here, it decides and stamps on the time once it holds its rows, not the
     * time the request began: a Premium or a timeout that ended while it waited has ended.
     */
    async create(viewer: Viewer, body: { name: string; type: 'public' | 'private' }): Promise<Chat> {
      const chat = await db.transaction(async (tx) => {
        // Serialise concurrent creations by the same user so the slot count holds.
        await tx.execute(sql`select pg_advisory_xact_lock(7243, ${viewer.userId})`);
        // The creator's row, held until the commit: a deletion either committed before (gone) or waits.
        const creator = await store.lockCreator(viewer.userId, tx);
        if (!creator) throw appError('ERR_UNAUTHENTICATED');
        const now = clock.now();
        const refusal = stateRefusal(effectiveState(creator, now));
        if (refusal) throw appError(refusal);
        const slots = chatSlots(creator.permissionLevel, hasPremium(creator, now));
        if (slots === 0) throw appError('ERR_CHAT_CREATE_FORBIDDEN');
        if ((await store.countOwned(viewer.userId, tx)) >= slots) throw appError('ERR_CHAT_SLOT_LIMIT');
        const chat = await store.insert(
          { type: body.type, name: body.name.trim(), ownerUserId: viewer.userId, createdAt: now, updatedAt: now },
          tx,
        );
        await store.addMember(chat.id, viewer.userId, now, tx);
        await store.logActivity(
          { chatId: chat.id, userId: viewer.userId, action: 'join', method: 'direct', createdAt: now },
          tx,
        );
        return written(chat, tx);
      });
      return toChat(chat);
    },

    /**
     * An official chat (POST /v1/admin/chats/create): the platform's own, so it has no owner and
     * no members until people join; it uses nobody's slots. Only Owners and the operator create
     * one (canManageOfficial), decided on the caller's level as stored, in the creation's
     * transaction (the caller checks the session's first, as a quick refusal): an Owner demoted on
     * another node, not yet heard of here, creates nothing. Its row is held FOR SHARE until the
     * commit; the transaction locks no other row.
     */
    async createOfficial(
      viewer: Viewer,
      name: string,
      extra?: (tx: Tx, chatId: number) => Promise<void>,
    ): Promise<Chat> {
      const chat = await db.transaction(async (tx) => {
        if (!canManageOfficial(await levelAsStored(viewer, tx)))
          throw appError('ERR_FORBIDDEN', 'Only Owners and the operator create official chats.');
        // Stamped once the caller's row is held, not when the request began.
        const now = clock.now();
        const chat = await store.insert(
          { type: 'official', name: name.trim(), ownerUserId: null, createdAt: now, updatedAt: now },
          tx,
        );
        if (extra) await extra(tx, chat.id);
        return written(chat, tx);
      });
      return toChat(chat);
    },

    /**
     * Name and type; `extra` runs in the same transaction (the admin routes' audit entry). Making a
     * public chat private (as locked here; `type: 'private'` on a private chat revokes nothing)
     * revokes, in that transaction, the live invites it no longer honours (those of creators who
     * are neither its owner nor Admin or above: a member's, made while it was public), so they are
     * gone for good, and do not come back if it is made public again. The answer and
     * `chat:updated` are the chat as this transaction wrote it: a deletion committed right after
     * the update cannot turn a change that committed (and its audit entry) into a 404. The caller's
     * right is decided again on its level as stored, under the chat's lock (`lockManaged`).
     */
    async updateConfig(
      viewer: Viewer,
      chatId: number,
      body: { name?: string; type?: 'public' | 'private' },
      extra?: (tx: Tx, before: ChatRow) => Promise<void>,
    ): Promise<Chat> {
      const chat = await mustGet(chatId);
      // A quick refusal on the session's view of the caller; the write decides again as stored.
      assertSettingsManager(viewer, chat);
      if (chat.type !== 'public' && chat.type !== 'private' && body.type)
        throw appError('ERR_FORBIDDEN', 'Only public and private chats change type.');
      const updated = await db.transaction(async (tx) => {
        const before = await lockManaged(viewer, chatId, tx);
        // The time once the chat's row is held: an invite that expired while this waited is no longer live.
        const now = clock.now();
        const row = await store.update(
          chatId,
          {
            ...(body.name ? { name: body.name.trim() } : {}),
            ...(body.type ? { type: body.type } : {}),
            updatedAt: now,
          },
          tx,
        );
        // Live and held since `lockManaged`, so the update finds it.
        if (!row) throw appError('ERR_CHAT_NOT_FOUND');
        // The chat's row is held from `lockManaged`: an invite being created or spent waits for
        // it, and reads the chat as private (chats.invites.store `creatorMayInvite`).
        // Already private: its invites a demoted creator may no longer issue are only left out, and
        // come back if the creator is promoted again (docs/api.md, Chats), so nothing is revoked.
        if (body.type === 'private' && before.type !== 'private') await store.revokeUnissuable(chatId, row, now, tx);
        // The chat as locked before this change (a rename committed since `chat` was read counts).
        if (extra) await extra(tx, before);
        return written(row, tx);
      });
      const answer = toChat(updated);
      realtime.emitTo(rooms.chat(chatId), 'chat:updated', { chat: answer });
      return answer;
    },

    /**
     * Deletes a chat; `extra` runs in the same transaction (the admin routes' audit entry). The
     * caller's right is decided again on its level as stored, under the chat's lock (`lockManaged`).
     */
    async remove(viewer: Viewer, chatId: number, extra?: (tx: Tx, chat: ChatRow) => Promise<void>): Promise<void> {
      const chat = await mustGet(chatId);
      // A quick refusal on the session's view of the caller; the write decides again as stored.
      assertSettingsManager(viewer, chat);
      const members = await db.transaction(async (tx) => {
        const locked = await lockManaged(viewer, chatId, tx);
        // Stamped once the chat's row is held, not when the request began.
        const now = clock.now();
        if (!(await store.update(chatId, { deletedAt: now, updatedAt: now }, tx))) throw appError('ERR_CHAT_NOT_FOUND');
        // The chat as locked (a rename committed since `chat` was read counts).
        if (extra) await extra(tx, locked);
        return store.endAllMemberships(chatId, now, tx);
      });
      // Every socket of every member hears it, in the room or not (another tab), once: one emit to
      // all those rooms reaches each socket once. The chat's room is named too, so the list of
      // rooms is never empty (an official chat without members): an emit to none reaches everyone.
      realtime.emitTo([rooms.chat(chatId), ...members.map(rooms.user)], 'room:left', {
        chat_id: chatId,
        reason: 'deleted',
      });
      removedChats([chatId]);
      for (const userId of members) realtime.leaveChat(userId, chatId);
    },
  };
}
