import type { Message } from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import { decryptMessage, E2EError, parseBundle } from '../crypto/index.js';
import type { ChatKeyStore } from './e2e-keys.js';
import { type ChatEntry, E2ESessionError } from './e2e-types.js';
import { MessageEventSchema, shapeProblem } from './server-events.js';
import { Tombstones } from './tombstones.js';

/** A page of `GET /v1/portal/chats/{chat_id}/messages`: each entry a message as `message:new` has it. */
const HistoryAnswerSchema = Type.Object({ messages: Type.Array(MessageEventSchema) });

export interface MessageDeliveryOptions {
  /** The session's chat keys (a message of an epoch whose key is not held waits for it). */
  keys: ChatKeyStore;
  /** The longest wait for a message's key. */
  keyWaitMs: number;
  /** Whether the session has closed (nothing is delivered after that). */
  isClosed: () => boolean;
  /** Hands over a message, its key held (or given up on) and not deleted meanwhile. */
  deliver: (message: Message) => void;
}

/**
 * The incoming messages of an E2EChatSession (`message:new`): delivered in arrival order per chat,
 * each after its epoch's key when that is not held yet (a bounded wait, once per chat and epoch),
 * and dropped when deleted first. Reading them (decryptText, readEntry) is below.
 */
export class MessageDelivery {
  readonly #o: MessageDeliveryOptions;
  readonly #deliveries = new Map<number, Promise<void>>();
  readonly #gaveUp = new Set<string>();
  /** Deleted message ids (`message:bulk_deleted`): a late `message:new` of one is dropped. */
  readonly #tombstones = new Tombstones();

  constructor(opts: MessageDeliveryOptions) {
    this.#o = opts;
  }

  /** `message:new`: queued for delivery unless its message was deleted already. */
  push(message: Message): void {
    if (!this.#tombstones.has(message.chat_id, message.id)) this.#enqueue(message);
  }

  /**
   * `message:bulk_deleted`: nothing orders the events of different server nodes, so a deletion
   * may arrive before the message:new it deletes (docs/api.md, Cluster mode): its ids are kept
   * as tombstones.
   */
  deleted(chatId: number, ids: string[]): void {
    this.#tombstones.add(chatId, ids);
  }

  /** Resolves when the deliveries under way have settled. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.#deliveries.values()]);
  }

  /** Delivers in arrival order per chat; a message of an epoch whose key is not held waits for it. */
  #enqueue(message: Message): void {
    const chatId = message.chat_id;
    const next = (this.#deliveries.get(chatId) ?? Promise.resolve()).then(() => this.#deliver(message)).catch(() => {}); // Delivery never throws past its listeners; keep the chain alive regardless.
    this.#deliveries.set(chatId, next);
    void next.finally(() => {
      if (this.#deliveries.get(chatId) === next) this.#deliveries.delete(chatId);
    });
  }

  async #deliver(message: Message): Promise<void> {
    if (message.type === 'user') await this.#awaitEpochOf(message);
    // Deleted while it waited for its key, or behind other deliveries of its chat.
    if (this.#o.isClosed() || this.#tombstones.has(message.chat_id, message.id)) return;
    this.#o.deliver(message);
  }

  async #awaitEpochOf(message: Message): Promise<void> {
    let epoch: number;
    try {
      epoch = parseBundle(message.content).epoch;
    } catch {
      return; // open() reports BUNDLE_INVALID.
    }
    const chatId = message.chat_id;
    const keys = this.#o.keys;
    const tag = `${chatId}:${epoch}`;
    // The key of any epoch may still be on its way, a past one too: nothing orders the events of
    // different server nodes (docs/api.md, Cluster mode), so `room:key` of epoch E can come after
    // `room:rekey` of E + 1. One wait per chat and epoch: the key of an epoch this session never
    // gets (one after its removal) is given up on once, and its later messages do not wait.
    if (keys.get(chatId, epoch) || this.#gaveUp.has(tag)) return;
    if (!(await keys.waitForEpoch(chatId, epoch, this.#o.keyWaitMs))) {
      if (this.#gaveUp.size > 1000) this.#gaveUp.clear();
      this.#gaveUp.add(tag);
    }
  }
}

/**
 * The plaintext of a user message (E2EChatSession.decrypt): a message of another chat than
 * `expectedChatId` is refused.
 * @throws E2EError NO_KEY_FOR_EPOCH, DECRYPT_FAILED, BUNDLE_INVALID; E2ESessionError SYSTEM_MESSAGE.
 */
export function decryptText(keys: ChatKeyStore, message: Message, expectedChatId?: number): string {
  const chatId = message.chat_id;
  if (expectedChatId !== undefined && chatId !== expectedChatId) throw otherChat(chatId, expectedChatId);
  if (message.type === 'system') {
    throw new E2ESessionError('SYSTEM_MESSAGE', 'System messages carry no ciphertext.', { chatId });
  }
  return decryptMessage({ chatKey: keys.lookup(chatId), chatId, content: message.content }).plaintext;
}

/** A message read without throwing (E2EChatSession.open): decrypted, system, or undecryptable. */
export function readEntry(keys: ChatKeyStore, message: Message, expectedChatId?: number): ChatEntry {
  const chatId = message.chat_id;
  if (expectedChatId !== undefined && chatId !== expectedChatId) {
    return { kind: 'undecryptable', chatId, message, error: otherChat(chatId, expectedChatId) };
  }
  if (message.type === 'system') return { kind: 'system', chatId, message };
  try {
    const lookup = keys.lookup(chatId);
    const { epoch, plaintext } = decryptMessage({ chatKey: lookup, chatId, content: message.content });
    return { kind: 'user', chatId, message, epoch, plaintext };
  } catch (error) {
    if (error instanceof E2EError) return { kind: 'undecryptable', chatId, message, error };
    throw error;
  }
}

/**
 * A history page of chat `chatId` (E2EChatSession.history), checked, then each message read with
 * {@link readEntry} under that chat.
 * @throws E2ESessionError BAD_SERVER_ANSWER when the page does not have the protocol's shape (an
 *   entry that is no message, `messages` no array): nothing of it is read.
 */
export function readPage(keys: ChatKeyStore, page: unknown, chatId: number): ChatEntry[] {
  const problem = shapeProblem(HistoryAnswerSchema, page);
  if (problem) {
    throw new E2ESessionError('BAD_SERVER_ANSWER', `The server's history page of chat ${chatId} is malformed.`, {
      chatId,
      details: { answer: 'GET /v1/portal/chats/{chat_id}/messages', path: problem.path, problem: problem.message },
    });
  }
  return (page as { messages: Message[] }).messages.map((m) => readEntry(keys, m, chatId));
}

/** The error of a message that came in the answer for `expected` but names another chat. */
function otherChat(chatId: number, expected: number): E2EError {
  return new E2EError('DECRYPT_FAILED', `A message of chat ${chatId} came in the answer for chat ${expected}.`);
}
