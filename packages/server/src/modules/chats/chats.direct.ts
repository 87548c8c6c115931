import { randomBytes } from 'node:crypto';
import { type Chat, Limits, type Message } from '@parlor/protocol';
import { type PartFailure, partsFailed, runSteps, type TaskLog } from '../../platform/background.js';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { drain } from '../../platform/drain.js';
import { AppError, appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { MessagesService } from '../messages/messages.service.js';
import type { Tx } from '../users/users.store.js';
import { enterMatched } from './chats.presence.js';
import { toChat } from './chats.presenter.js';
import { drainByChat, HeldChats } from './chats.purge.js';
import { CHAT_ROWS_TABLES } from './chats.purge.store.js';
import type { ChatsStore, ChatWithCount, DirectRefusal } from './chats.store.js';

/** Chats each step of the lifecycle sweep takes per statement (and transaction). */
export const DIRECT_SWEEP_BATCH = 200;
/** Batches per step and tick (60 s): up to 2,000 chats a step per node per minute, then the next tick goes on. */
export const DIRECT_SWEEP_MAX_BATCHES = 10;
/** The background task that runs sweepDirect (its steps' failures are logged under this name). */
export const DIRECT_SWEEP_TASK = 'direct-chat-lifecycle';

/**
 * How long a deleted chat's rows stay before they are deleted for good (messages, keys,
 * memberships): a removed direct chat, or a chat its owner or an admin deleted.
 */
export const CHAT_PURGE_AFTER_MS = 7 * 24 * 3600_000;
/** Rows of deleted chats (messages, key envelopes, history, invites, memberships) the purge deletes per statement. */
export const PURGE_ROWS_BATCH = 5000;

export interface DirectChatsDeps {
  db: Db;
  store: ChatsStore;
  clock: Clock;
  messages: MessagesService;
  realtime: Pick<Realtime, 'emitTo' | 'io' | 'leaveChat'>;
  /** The chat row (deleted chats: ERR_CHAT_NOT_FOUND). */
  mustGet: (chatId: number) => Promise<ChatWithCount>;
  /** Tells the chat-deletion listeners (the room VM stops theirs). */
  removedChats: (chatIds: number[]) => void;
  /** Tells the archive listeners (the room VM stops theirs: an archived chat is read-only). */
  archivedChats: (chatIds: number[]) => void;
  /** Where the sweep logs a step that failed (runSteps). */
  log: TaskLog;
}

/** A direct chat made: the chat, its match token, its users as stored, and those whose direct-chat slots it filled. */
export interface DirectMade {
  chat: Chat;
  token: string;
  users: { id: number; username: string; stranger: boolean }[];
  filled: number[];
  /**
   * When it had committed (clock ms), read at once, before anything tells of the chat: a search
   * that began after it read the filled slots (matchmaking.pairing, markFull).
   */
  committedAt: number;
}

/** What leaveAllDirect wrote, to announce once its transaction has committed (announceLeft). */
export interface DirectLeft {
  chatIds: number[];
  systems: Message[];
}

/** Matched direct chats: creation, leaving (archive) and the expiry sweep. */
export function makeDirectChats(deps: DirectChatsDeps) {
  const { db, store, clock, messages, realtime, mustGet, removedChats, archivedChats } = deps;
  /** The deleted chats each purge step found failing alone on this node, held out a while (drainByChat). */
  const heldChats = new Map<string, HeldChats>();

  /**
   * A leave's writes, in the caller's transaction: the chat archived if it is still active
   * (archiveActive), the leave activity and the `leave` system message, which it answers for the
   * caller to publish once the transaction has committed (announceLeft); null, nothing written,
   * when the chat was no longer active.
   */
  const leaveIn = async (userId: number, chatId: number, now: Date, tx: Tx): Promise<Message | null> => {
    if (!(await store.archiveActive(chatId, now, tx))) return null;
    await store.logActivity({ chatId, userId, action: 'leave', createdAt: now }, tx);
    return messages.appendSystem(chatId, { kind: 'leave', user_id: userId }, tx);
  };

  /**
   * Leaves every active direct chat of a user whose account is being deleted, in the deletion's
   * transaction, as an explicit leave does: archived (read-only, the peer's direct-chat slot free
   * again) with the leave system message, before the deletion raises epochs (an archived chat's
   * epoch stays, so the peer keeps reading its history). Answers what to announce once the
   * deletion has committed (announceLeft); a rollback leaves nothing. Also the leave of a stranger
   * whose last session ended (leaveAllDirectOfGone).
   */
  const leaveAllDirect = async (userId: number, tx: Tx): Promise<DirectLeft> => {
    const now = clock.now();
    const left: DirectLeft = { chatIds: [], systems: [] };
    for (const chat of await store.activeDirectOf(userId, now, tx)) {
      const system = await leaveIn(userId, chat.id, now, tx);
      if (!system) continue;
      left.chatIds.push(chat.id);
      left.systems.push(system);
    }
    return left;
  };

  /**
   * After leaveAllDirect's transaction committed: the system messages, the archive listeners,
   * `chat:updated`. A chat deleted since the commit (an admin's delete) gets no `chat:updated`
   * (its deletion told its members): the leave committed, and its answer must say so.
   */
  const announceLeft = async (left: DirectLeft): Promise<void> => {
    for (const system of left.systems) messages.publish(system);
    archivedChats(left.chatIds);
    for (const chatId of left.chatIds) {
      const chat = await mustGet(chatId).catch((err: unknown) => {
        if (err instanceof AppError && err.code === 'ERR_CHAT_NOT_FOUND') return null;
        throw err;
      });
      if (chat) realtime.emitTo(rooms.chat(chatId), 'chat:updated', { chat: toChat(chat) });
    }
  };

  return {
    /**
     * A matched direct chat for two users: 24 h expiry, both members, the opening system message.
     * Answers the users as stored too (name and kind, read in the same statement). Made only if
     * both users exist and have a free direct-chat slot (spec 8), checked atomically with the
     * write on every node; otherwise nothing is written and the answer says who refused it.
     * `searchesEnded` (the pairing's: users of the pair whose search a dequeue ended) is asked once
     * the users' locks are held (ChatsStore.insertDirect); none by default.
     */
    async createDirect(
      userIds: number[],
      tags: string[],
      searchesEnded: () => Promise<number[]> = async () => [],
    ): Promise<DirectMade | { refused: DirectRefusal }> {
      const now = clock.now();
      const token = randomBytes(18).toString('base64url');
      const expiresAt = new Date(now.getTime() + Limits.DIRECT_CHAT_TTL_MS);
      const opening = { kind: 'match', tags, user_ids: userIds };
      const slots = { free: Limits.DIRECT_SLOTS_FREE, premium: Limits.DIRECT_SLOTS_PREMIUM };
      const created = await store.insertDirect({
        userIds,
        matchToken: token,
        expiresAt,
        at: now,
        opening,
        slots,
        searchesEnded,
      });
      if ('refused' in created) return created;
      const committedAt = clock.now().getTime();
      const system = messages.opening(created.id, opening, now);
      // Both users' sockets enter the room (one call) so the opening message and keys reach them,
      // and the sessions of this node's are said online there (chats.presence.ts).
      await enterMatched(realtime, created.id, userIds);
      messages.publish(system);
      const chat = toChat({
        id: created.id,
        type: 'direct',
        name: created.users.map((u) => u.username).join(' & '),
        ownerUserId: null,
        epoch: created.epoch,
        msgMs: 0,
        msgSeq: 0,
        restrictionsSeq: 0,
        expiresAt,
        matchToken: token,
        archivedAt: null,
        createdAt: now,
        updatedAt: now,
        deletedAt: null,
        memberCount: userIds.length,
      });
      return { chat, token, users: created.users, filled: created.filled, committedAt };
    },

    /** Waits until no pairing of the user is making its chat (ChatsStore.waitForPairings). */
    async waitForPairings(userId: number): Promise<void> {
      await store.waitForPairings(userId);
    },

    /**
     * The user's active direct chats, newest first: not archived and not past their expiry (a
     * direct chat is archived exactly at its expiry, chats.rules `archivedAtOf`, sweep or not).
     */
    async activeDirect(userId: number) {
      return store.activeDirectOf(userId, clock.now());
    },

    /**
     * Leaves (archives) a direct chat: read-only for 24 hours; the peer sees a system message.
     * The archive is conditional on the chat still being active, so of two leaves at once (two
     * tabs, a double click) or a leave racing the expiry sweep only one writes; the other answers
     * ERR_NO_DIRECT_CHAT, as when there was none, and writes nothing. A chat past its expiry is
     * archived already (the sweep writes it): ERR_NO_DIRECT_CHAT too.
     */
    async leaveDirect(userId: number, chatId: number | undefined): Promise<number> {
      const now = clock.now();
      const active = await store.activeDirectOf(userId, now);
      const chat = chatId === undefined ? active[0] : active.find((c) => c.id === chatId);
      if (!chat) throw appError('ERR_NO_DIRECT_CHAT');
      const system = await db.transaction(async (tx) => {
        const written = await leaveIn(userId, chat.id, now, tx);
        if (!written) throw appError('ERR_NO_DIRECT_CHAT');
        return written;
      });
      await announceLeft({ chatIds: [chat.id], systems: [system] });
      return chat.id;
    },

    leaveAllDirect,
    announceLeft,

    /**
     * Ends a direct chat a moderator removed a member from (a kick, a ban), in the removal's
     * transaction and as of its time `at`, as a leave ends it: archived if still active (archiveActive), read-only for its
     * 24 hours, the peer's direct-chat slot free again. Run before the removal would raise the
     * epoch, so the chat keeps it (an archived chat takes no key shares: a new epoch could never
     * be keyed). The kick's or ban's own system message and history entry say why, so no `leave`
     * is written. Answers what to announce once it has committed (announceLeft).
     */
    async endExpelledIn(chatId: number, at: Date, tx: Tx): Promise<DirectLeft> {
      const ended = await store.archiveActive(chatId, at, tx);
      return { chatIds: ended ? [chatId] : [], systems: [] };
    },

    /**
     * Ends the active direct chats of a user who can never come back (a stranger whose last
     * session ended: it never signs in again), once that end has committed: as leaveAllDirect
     * does, in a transaction of its own, then announced (announceLeft), so the peer is told, its
     * direct-chat slot is free again and its match status idle. A pairing of the user making a
     * chat right now is waited for first (its chat is then read here); one that comes later makes
     * none (a stranger without a live session is refused: ChatsStore.insertDirect). Safe on any
     * node, and beside a leave of the same chat: each chat is archived once (archiveActive), and
     * only the run that archived it writes and announces. Answers the chats it archived.
     */
    async leaveAllDirectOfGone(userId: number): Promise<number[]> {
      await store.waitForPairings(userId);
      const left = await db.transaction((tx) => leaveAllDirect(userId, tx));
      await announceLeft(left);
      return left.chatIds;
    },

    /**
     * The chat lifecycle sweep: direct chats expired → archived, archived 24 h → removed
     * (memberships ended); then every chat deleted 7 days ago, direct or not, purged (deleted with
     * everything in it): its messages, key envelopes, history, invites and memberships first,
     * `purgeRows` a statement, then the chat. Each step runs batches of `batch` (chats) while they
     * come back full, at most `maxBatches` a tick. The three steps (archive, remove, purge) run on
     * their own (runSteps): one that fails is logged and counts 0, and the others still run; so do
     * the purge's tables, each clear on its own; the purge's chats go only once their rows are
     * cleared. Within each of them one chat whose rows cannot be deleted holds up none of the others
     * (drainByChat); its failure is logged with its id once the purge ends, and it is tried again
     * once FAILED_CHAT_RETRY_MS has passed (held on this node meanwhile). Safe on many nodes.
     */
    async sweepDirect(
      opts: { batch?: number; maxBatches?: number; purgeRows?: number } = {},
    ): Promise<{ archived: number; removed: number; cleared: number; purged: number }> {
      const size = opts.batch ?? DIRECT_SWEEP_BATCH;
      const maxBatches = opts.maxBatches ?? DIRECT_SWEEP_MAX_BATCHES;
      const now = clock.now();
      const archive = () =>
        drain(size, maxBatches, async () => {
          // The chats with their members as the archive found them, read by its own statement: a
          // read after the commit could fail, and the next tick, finding the chats archived, would
          // never send their `chat:updated`.
          const rows = await store.archiveDue(now, size);
          archivedChats(rows.map((c) => c.id));
          for (const c of rows) realtime.emitTo(rooms.chat(c.id), 'chat:updated', { chat: toChat(c) });
          return rows.length;
        });
      const removedBefore = new Date(now.getTime() - Limits.DIRECT_ARCHIVE_TTL_MS);
      const remove = () =>
        drain(size, maxBatches, async () => {
          const { removed: rows, members } = await store.removeDue(removedBefore, now, size);
          // Every socket of both members hears it, in the chat's room or not (another tab), once (as
          // for a deleted chat, chats.lifecycle.ts remove).
          for (const c of rows) {
            const users = members.filter((m) => m.chatId === c.id).map((m) => rooms.user(m.userId));
            realtime.emitTo([rooms.chat(c.id), ...users], 'room:left', { chat_id: c.id, reason: 'deleted' });
          }
          for (const m of members) realtime.leaveChat(m.userId, m.chatId);
          removedChats(rows.map((c) => c.id));
          return rows.length;
        });
      const purgeBefore = new Date(now.getTime() - CHAT_PURGE_AFTER_MS);
      const rows = opts.purgeRows ?? PURGE_ROWS_BATCH;
      const held = (step: string) => {
        const chats = heldChats.get(step) ?? new HeldChats();
        heldChats.set(step, chats);
        return { chats, now: now.getTime() };
      };
      let cleared = 0;
      const purge = async () => {
        // Each table on its own (runSteps): a clear that fails (logged with its table) no longer
        // stops the other tables' clears, nor the purge of the chats whose rows are gone already,
        // which would wait on every tick for as long as that table's failure lasts. Within a step,
        // a chat that fails is done alone and logged with its id (drainByChat): the others go on.
        const failures: PartFailure[] = [];
        try {
          const clears = await runSteps(
            DIRECT_SWEEP_TASK,
            CHAT_ROWS_TABLES.map((table) => ({
              name: `clear ${table}`,
              run: () =>
                drainByChat(
                  {
                    name: `clear ${table}`,
                    run: (which, limit) => store.clearDeleted(table, purgeBefore, limit, which),
                    due: (except) => store.dueToClear(table, purgeBefore, size, except),
                  },
                  rows,
                  maxBatches,
                  failures,
                  held(`clear ${table}`),
                ),
            })),
            deps.log,
          );
          for (const n of Object.values(clears)) cleared += n;
          return await drainByChat(
            {
              name: 'purge',
              run: (which, limit) => store.purgeDeleted(purgeBefore, limit, which),
              due: (except) => store.dueToPurge(purgeBefore, size, except),
            },
            size,
            maxBatches,
            failures,
            held('purge'),
          );
        } finally {
          if (failures.length > 0)
            deps.log.error(
              { err: partsFailed(DIRECT_SWEEP_TASK, failures), task: DIRECT_SWEEP_TASK },
              'background task failed',
            );
        }
      };
      const done = await runSteps(
        DIRECT_SWEEP_TASK,
        [
          { name: 'archive', run: archive },
          { name: 'remove', run: remove },
          { name: 'purge', run: purge },
        ],
        deps.log,
      );
      return { archived: done.archive ?? 0, removed: done.remove ?? 0, cleared, purged: done.purge ?? 0 };
    },
  };
}
