import { Limits, type Message } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import { groupCommit } from '../../platform/group-commit.js';
import { rateLimited } from '../../platform/http.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { StateStore } from '../../platform/state/index.js';
import type { Tx } from '../users/users.store.js';
import { parseBundle } from './messages.bundle.js';
import { makeMessageDeletion } from './messages.deletion.js';
import { toMessage } from './messages.presenter.js';
import type { PageRequest, Reader, SendItem } from './messages.sql.js';
import { type MessagesStore, parseMessageId } from './messages.store.js';

// Deleting messages lives in messages.deletion.ts; importers take its types from here.
export type { DeletionChat, ReaderCheck } from './messages.deletion.js';

/** What telling why a send was refused needs of chats and keys, wired by hand. */
export interface SendAccess {
  /** The chat's epoch and whether it is archived; null if gone. */
  chat(chatId: number): Promise<{ epoch: number; archived: boolean } | null>;
  isMember(chatId: number, userId: number): Promise<boolean>;
  hasKey(chatId: number, epoch: number, sessionId: number): Promise<boolean>;
}

export interface MessagesDeps {
  store: MessagesStore;
  clock: Clock;
  state: StateStore;
  realtime: Pick<Realtime, 'emitTo'>;
  access: SendAccess;
}

/** A sent message's id and time (shared by its batch). */
interface Sent {
  ms: number;
  seq: number;
  createdAt: Date;
}

export interface Sender {
  userId: number;
  sessionId: number;
  permissionLevel: number;
}

/**
 * Runs of one send at most. A run writes nothing when the chat row changed while its batch waited
 * for it (a chat mute of anyone in the chat raises its restrictions counter: messages.sql
 * sendBatchSql); a send whose checks then pass is run again. Under a burst of mutes in one chat
 * (moderators or a bot acting on a raid) an innocent send may meet several in a row; past this
 * many it answers 503 ERR_SERVICE_UNAVAILABLE (send it again), never a 500.
 */
export const SEND_ATTEMPTS = 10;

export function makeMessagesService(deps: MessagesDeps) {
  const { store, clock, state, realtime, access } = deps;
  /**
   * Sends to one chat at one epoch are group-committed per node (platform/group-commit.ts): one
   * statement at a time per chat, carrying every send of the same event-loop turn or that arrived
   * while the previous one ran. A lone send waits only for the end of its turn; a busy chat pays one
   * statement (and one row lock) per batch instead of one per message. The chat row lock serialises
   * a chat's sends anyway, so nothing that could run in parallel waits. When the database refuses a
   * batch's statement (one row a trigger or a constraint refuses), it wrote nothing, and its sends
   * are written again one by one: only the refused send fails (docs/api.md, Messages).
   */
  const sends = groupCommit<string, SendItem & { chatId: number; epoch: number }, Sent | undefined>(
    async (_key, batch) => {
      const { chatId, epoch } = batch[0] as { chatId: number; epoch: number }; // a batch is never empty
      const now = clock.now();
      const ids = await store.sendBatch({ chatId, epoch, now, items: batch });
      return ids.map((id) => id && { ...id, createdAt: now });
    },
  );

  /**
   * History reads of one chat are grouped the same way: the pages asked for in one event-loop turn
   * (and while the chat's previous read runs) are read by one statement, each with its own cursor
   * and its own reader's check.
   */
  const pages = groupCommit<number, PageRequest, Message[]>((chatId, requests) =>
    store.readablePages(chatId, requests),
  );

  const perChat = state.limiter('msg-chat', Limits.MESSAGES_PER_CHAT, Limits.MESSAGE_WINDOW_MS);
  const global = state.limiter('msg-user', Limits.MESSAGES_GLOBAL, Limits.MESSAGE_WINDOW_MS);

  /**
   * Both limits at once (one round trip in cluster mode). A send refused by either spends neither:
   * both points are given back, the one of the limit that allowed it (a send the global limit
   * refuses does not close a chat the user has sent nothing to) and the refused one (the stores
   * count every consume: kept, it would outlast a point given back meanwhile by a send refused
   * elsewhere, leaving the user one send short, as UserLimit.spend). When both refuse, the wait
   * is the longer of the two, so a retry after it is not refused again.
   */
  const spend = async (userId: number, chatId: number) => {
    const chatKey = `${userId}:${chatId}`;
    const userKey = String(userId);
    const [chatLimit, userLimit] = await Promise.all([perChat.consume(chatKey), global.consume(userKey)]);
    if (chatLimit.allowed && userLimit.allowed) return;
    await Promise.all([perChat.refund(chatKey, chatLimit.window), global.refund(userKey, userLimit.window)]);
    const refused = [chatLimit, userLimit].filter((l) => !l.allowed);
    throw rateLimited(Math.max(...refused.map((l) => l.retryAfterMs)));
  };

  /** Throws why a send was refused, checking in the order docs/api.md gives (spec 4.6 rule 1, DESIGN.md 7). */
  const refusal = async (sender: Sender, chatId: number, epoch: number, now: Date): Promise<void> => {
    const chat = await access.chat(chatId);
    if (!chat) throw appError('ERR_CHAT_NOT_FOUND');
    // The ban before the membership: a chat ban ends the membership with it (chats.expel), so a
    // banned sender is never a member, and is told that it is banned (spec 7), not that it left.
    if (await store.activeRestriction(chatId, sender.userId, ['CHAT_BAN'], now)) throw appError('ERR_CHAT_BANNED');
    if (!(await access.isMember(chatId, sender.userId))) throw appError('ERR_NOT_CHAT_MEMBER');
    if (chat.archived) throw appError('ERR_CHAT_READ_ONLY');
    const restriction = await store.activeRestriction(chatId, sender.userId, ['CHAT_MUTE'], now);
    if (restriction) {
      const ttl = restriction.expiresAt
        ? Math.max(1, Math.ceil((restriction.expiresAt.getTime() - now.getTime()) / 1000))
        : 0;
      throw appError('ERR_MUTED', undefined, { ttl });
    }
    if (epoch !== chat.epoch) throw appError('ERR_EPOCH_MISMATCH');
    if (!(await access.hasKey(chatId, chat.epoch, sender.sessionId))) throw appError('ERR_NO_ROOM_KEY');
  };

  const publish = (m: Message) => realtime.emitTo(rooms.chat(m.chat_id), 'message:new', m);
  return {
    publish,
    ...makeMessageDeletion(deps),

    /** Persists a system message inside the caller's transaction; publish it after the commit. */
    async appendSystem(chatId: number, system: Record<string, unknown>, tx: Tx): Promise<Message> {
      const createdAt = clock.now();
      return toMessage(
        await store.append({ chatId, type: 'system', senderId: null, content: '', system, createdAt }, tx),
      );
    },

    /**
     * A sender's new restriction in the chat (a chat mute), inside the caller's transaction, which
     * holds the chat row: a send whose checks read before it commits is refused and told why
     * (ERR_MUTED), never stored after the mute's system message.
     */
    async restrict(chatId: number, tx: Tx): Promise<void> {
      await store.raiseRestrictions(chatId, tx);
    },

    /**
     * The opening system message of a chat created with it in one statement: the chat's first id,
     * `<at>-0` (chats.pairing.store insertDirect). Publish it once that statement has committed.
     */
    opening(chatId: number, system: Record<string, unknown>, at: Date): Message {
      const row = { chatId, ms: at.getTime(), seq: 0, type: 'system', senderId: null, content: '', system };
      return toMessage({ ...row, createdAt: at });
    },

    async isChatBanned(chatId: number, userId: number, tx?: Tx): Promise<boolean> {
      return (await store.activeRestriction(chatId, userId, ['CHAT_BAN'], clock.now(), tx)) !== undefined;
    },

    /**
     * Spec 4.6 rule 1 and DESIGN.md 7: joined, not banned or muted, current epoch, holds the key.
     * The checks and the write are one statement (shared with the sends batched beside this one);
     * only when it writes nothing for this send are the checks run one by one to tell why (and if
     * they all pass by then, the state changed: try again).
     */
    async send(sender: Sender, chatId: number, content: string): Promise<{ id: string }> {
      const bundle = parseBundle(content);
      if (!bundle) throw appError('ERR_INVALID_BUNDLE');
      await spend(sender.userId, chatId);
      for (let attempt = 0; attempt < SEND_ATTEMPTS; attempt++) {
        const item = { chatId, epoch: bundle.epoch, userId: sender.userId, sessionId: sender.sessionId, content };
        const sent = await sends.submit(`${chatId}:${bundle.epoch}`, item);
        if (sent) {
          const message = toMessage({
            chatId,
            ms: sent.ms,
            seq: sent.seq,
            type: 'user',
            senderId: sender.userId,
            content,
            system: null,
            createdAt: sent.createdAt,
          });
          publish(message);
          return { id: message.id };
        }
        await refusal(sender, chatId, bundle.epoch, clock.now());
      }
      throw appError('ERR_SERVICE_UNAVAILABLE', 'The chat changed under this send again and again; send it again.');
    },

    /** A page the reader may read; empty also when it may not (see `chats.assertReader`). */
    async history(reader: Reader, chatId: number, before: string | undefined, limit: number): Promise<Message[]> {
      return pages.submit(chatId, { reader, before: before ? parseMessageId(before) : null, limit });
    },
  };
}

export type MessagesService = ReturnType<typeof makeMessagesService>;
