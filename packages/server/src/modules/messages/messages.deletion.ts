import { PermissionLevel } from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import { rooms } from '../../platform/realtime.js';
import { canModerateChat, canTarget } from '../moderation/moderation.service.js';
import { storedCallerLevel } from '../users/users.caller.js';
import type { Tx } from '../users/users.store.js';
import { messageId } from './messages.presenter.js';
import type { MessagesDeps, Sender } from './messages.service.js';
import { type DeletionCandidate, parseMessageId } from './messages.store.js';

/** A message's key. */
type Key = { ms: number; seq: number };

/** A delete-last choice's outcome: the rows it deleted, or the actor's level to choose again on. */
type Chosen = { rows: Key[] } | { again: number };

/** The chat a deletion acts in, as the route found it. */
export interface DeletionChat {
  id: number;
  type: string;
  ownerId: number | null;
  /** Archived (spec 3): read-only, so nothing is deleted either. */
  archived: boolean;
}

/** Throws unless the actor reads the chat (chats `assertReader`: 404, 403, a stranger's 401). */
export type ReaderCheck = () => Promise<unknown>;

/** The rules' view of an actor (moderation.rules). */
const ruled = (actor: Sender) => ({ userId: actor.userId, level: actor.permissionLevel });

/**
 * How many times delete-last chooses its messages (see removeLast): each choice after the first
 * follows a level change committed while the one before waited for a users row.
 */
const LAST_CHOICES = 3;

/** The levels whose messages `actor` may delete as a moderator: those canTarget reaches. */
const reachableLevels = (actor: Sender) =>
  // 0 is nobody's id: the question is about another user of that level.
  Object.values(PermissionLevel).filter((level) => canTarget(ruled(actor), { userId: 0, level }));

/**
 * Deleting messages (spec 4.6): one's own as the chat's reader, others' as the chat's moderator
 * within reach, decided on the actor's level as stored; message:bulk_deleted tells the chat.
 */
export function makeMessageDeletion({ store, clock, realtime, access }: Omit<MessagesDeps, 'state'>) {
  const bulkDeleted = (chatId: number, ids: string[], by: number) => {
    if (ids.length > 0)
      realtime.emitTo(rooms.chat(chatId), 'message:bulk_deleted', {
        room_id: chatId,
        deleted_ids: ids,
        deleted_by: by,
      });
  };

  /** An archived chat is read-only (spec 3): nothing is deleted from it. */
  const assertWritable = (chat: DeletionChat) => {
    if (chat.archived) throw appError('ERR_CHAT_READ_ONLY');
  };

  /** Spec 4.6 rule 2, as the moderation module decides it (the chat owner's level read here). */
  const mayModerate = async (actor: Sender, chat: DeletionChat, tx?: Tx): Promise<boolean> => {
    const { ownerId } = chat;
    const ownerLevel = ownerId !== null && ownerId !== actor.userId ? ((await store.levelOf(ownerId, tx)) ?? 0) : 0;
    return canModerateChat(ruled(actor), { type: chat.type, ownerId: chat.ownerId, ownerLevel });
  };

  /** Throws what a delete answers in a chat it may not write in: gone 404, read-only (archived) 403. */
  const assertStillWritable = (chat: { archived: boolean } | null) => {
    if (!chat) throw appError('ERR_CHAT_NOT_FOUND');
    if (chat.archived) throw appError('ERR_CHAT_READ_ONLY');
  };

  /**
   * Runs a delete statement (`del`, at the time it starts) and keeps what it deleted only if the
   * chat is still writable once it holds those rows, at the time then: it may have waited for rows
   * another transaction held (another node's delete) while an archive or removal committed or a
   * direct chat's expiry passed, and so commits after them; it is refused then as it would have
   * been once they came (the caller's transaction rolls back).
   */
  const whileWritable = async (chatId: number, tx: Tx, del: (now: Date) => Promise<Key[]>): Promise<Key[]> => {
    const rows = await del(clock.now());
    if (rows.length > 0) assertStillWritable(await store.chatAt(chatId, clock.now(), tx));
    return rows;
  };

  /**
   * A delete of others' messages, decided again on the actor's level as stored (docs/api.md, "Levels
   * as they are at the commit"), not the session's: in one transaction, the actor's users row held
   * FOR SHARE (storedCallerLevel: a demotion, ban or deletion committed before is read, a later one
   * waits), the moderator right decided on that level (403), and `write` deletes with the actor at
   * it, its reach (canTarget) included. The messages it would delete are named first (`name`: a
   * delete by id's ids; delete-last's choice, those rows held FOR UPDATE): their senders' rows are
   * held with the actor's, all in id order in one statement (store holdSenders), so that `write`
   * decides the reach on their levels as they are at the commit too; in another order it could
   * deadlock with an admin action between the actor and a sender, which locks both rows in id
   * order. A delete by id takes the users rows before the messages, delete-last after the rows it
   * chose: no cycle either way, since what else locks message rows (these deletes, the purge's
   * batches) holds users rows at most FOR SHARE, which does not conflict with these.
   */
  const asModerator = <T>(
    actor: Sender,
    chat: DeletionChat,
    write: (stored: Sender, tx: Tx, named: Key[]) => Promise<T>,
    name: (tx: Tx) => Promise<Key[]> = async () => [],
  ) =>
    store.transaction(async (tx) => {
      const named = await name(tx);
      if (named.length > 0) await store.holdSenders(chat.id, named, actor.userId, tx);
      const stored = { ...actor, permissionLevel: await storedCallerLevel(tx, actor.userId, clock) };
      if (!(await mayModerate(stored, chat, tx))) throw appError('ERR_FORBIDDEN');
      return write(stored, tx, named);
    });

  /** The messages of `found` that are not the actor's own. */
  const othersOf = (actor: Sender, found: DeletionCandidate[]) => found.filter((m) => m.senderId !== actor.userId);

  /** Whether another's message is within the actor's reach (canTarget), a deleted account's (no level) too. */
  const withinReach = (actor: Sender, m: DeletionCandidate) =>
    m.senderLevel === null || canTarget(ruled(actor), { userId: m.senderId ?? 0, level: m.senderLevel });

  /** Refuses (403) a delete of `others` when one of their senders is out of the actor's reach (canTarget). */
  const assertInReach = (actor: Sender, others: DeletionCandidate[]) => {
    if (others.some((m) => !withinReach(actor, m))) throw appError('ERR_FORBIDDEN', 'That user is out of your reach.');
  };

  /**
   * Whether the actor deletes in the chat as its moderator. Who may moderate it (as for a kick) acts
   * there without reading it: a Moderator in a direct chat (docs/api.md, Messages); anyone else
   * deletes only as the chat's reader, checked by `assertReader` (as history checks it).
   */
  const moderates = async (actor: Sender, chat: DeletionChat, assertReader: ReaderCheck): Promise<boolean> => {
    if (await mayModerate(actor, chat)) return true;
    await assertReader();
    return false;
  };

  /**
   * Announces and answers what a delete removed. A delete writes nothing in a chat archived,
   * expired or removed since the route read it (messages.store `writable`); when it removed
   * nothing, the chat is read again so that such a race is told as a refusal rather than as an
   * empty success.
   */
  const deleted = async (actor: Sender, chatId: number, rows: Key[]) => {
    if (rows.length === 0) assertStillWritable(await access.chat(chatId));
    const ids = rows.map(messageId);
    bulkDeleted(chatId, ids, actor.userId);
    return { deleted: ids.length, deleted_ids: ids };
  };
  return {
    /**
     * Deletes by id, all or nothing: your own messages, as the chat's reader; others' too for who
     * may moderate the chat (moderation canModerateChat, spec 4.6 rule 2), reader or not, when each
     * of their senders is within reach (canTarget: below the actor's level, or a deleted account).
     * Ids of no message are passed over; a system message (spec 2.9: kept for late joiners) refuses
     * the whole request. Others' messages are decided on the actor's level as stored and on their
     * senders' levels as stored, all of those rows held until the commit (asModerator); its own need
     * no level.
     */
    async remove(actor: Sender, chat: DeletionChat, ids: string[], assertReader: ReaderCheck) {
      const moderator = await moderates(actor, chat, assertReader);
      assertWritable(chat);
      const named = [...new Set(ids)].map(parseMessageId);
      const found = await store.byIds(chat.id, named);
      if (found.some((m) => m.type !== 'user')) throw appError('ERR_FORBIDDEN', 'System messages cannot be deleted.');
      const others = othersOf(actor, found);
      const removeFound = (tx: Tx) => whileWritable(chat.id, tx, (now) => store.remove(chat.id, found, now, tx));
      if (others.length === 0) return deleted(actor, chat.id, await store.transaction(removeFound));
      if (!moderator) throw appError('ERR_FORBIDDEN', 'You may delete only your own messages.');
      assertInReach(actor, others);
      // The reach again on the senders' levels read in the transaction, their rows held (asModerator).
      const removeInReach = async (stored: Sender, tx: Tx) => {
        assertInReach(stored, othersOf(actor, await store.byIds(chat.id, named, tx)));
        return removeFound(tx);
      };
      return deleted(actor, chat.id, await asModerator(actor, chat, removeInReach, async () => named));
    },

    async removeMine(actor: Sender, chat: DeletionChat) {
      assertWritable(chat);
      const rows = await store.transaction((tx) =>
        whileWritable(chat.id, tx, (now) => store.removeBySender(chat.id, actor.userId, now, tx)),
      );
      return deleted(actor, chat.id, rows);
    },

    /**
     * The newest `count` user messages the actor may delete, for who may moderate the chat (reader
     * or not; anyone else is refused as a reader first): its own and those of senders within reach
     * (below its level, deleted accounts); messages of users at or above its level are passed over
     * and do not count. Decided on the levels as they are at the commit (asModerator): the messages
     * are chosen on the levels read then (store holdLast), their senders' rows and the actor's held,
     * and they are deleted if that choice stands on the held levels. If not (a level changed in
     * between: the actor's, or a sender's promoted out of reach) the transaction ends and the choice
     * is made again on the levels now committed; the last of LAST_CHOICES deletes what it chose that
     * is still within reach, passing over the rest.
     */
    async removeLast(actor: Sender, chat: DeletionChat, count: number, assertReader: ReaderCheck) {
      const moderator = await moderates(actor, chat, assertReader);
      assertWritable(chat);
      if (!moderator) throw appError('ERR_FORBIDDEN');
      let level = actor.permissionLevel;
      for (let choice = 1; ; choice++) {
        const levels = reachableLevels({ ...actor, permissionLevel: level });
        const choose = (tx: Tx) => store.holdLast(chat.id, count, { actorId: actor.userId, levels }, tx);
        const removeChosen = async (stored: Sender, tx: Tx, chosen: Key[]): Promise<Chosen> => {
          const held = await store.byIds(chat.id, chosen, tx);
          const inReach = held.filter((m) => m.senderId === actor.userId || withinReach(stored, m));
          const stands = stored.permissionLevel === level && inReach.length === chosen.length;
          if (!stands && choice < LAST_CHOICES) return { again: stored.permissionLevel };
          return { rows: await whileWritable(chat.id, tx, (now) => store.remove(chat.id, inReach, now, tx)) };
        };
        const outcome = await asModerator(actor, chat, removeChosen, choose);
        if ('rows' in outcome) return deleted(actor, chat.id, outcome.rows);
        level = outcome.again;
      }
    },
  };
}
