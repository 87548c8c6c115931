import type { Message } from '@parlor/protocol';
import { decryptMessage, E2EError, parseBundle } from '../crypto/index.js';
import type { ChatKeyStore } from './e2e-keys.js';
import { type ChatEntry, E2ESessionError } from './e2e-types.js';
import { Tombstones } from './tombstones.js';

export interface MessageDeliveryOptions {
  /** The session's chat keys (a message of an epoch whose key is on its way waits for it). */
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
 * each after its epoch's key when that is on its way, and dropped when deleted first. Reading
 * them (decryptText, readEntry) is below.
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

  /** Delivers in arrival order per chat; a message of an epoch whose key is on its way waits for it. */
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
    const known = keys.epochOf(chatId);
    const tag = `${chatId}:${epoch}`;
    // Keys of past epochs never arrive later; the current or a newer one may be on its way.
    if (keys.get(chatId, epoch) || (known !== undefined && epoch < known) || this.#gaveUp.has(tag)) return;
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

/** The error of a message that came in the answer for `expected` but names another chat. */
function otherChat(chatId: number, expected: number): E2EError {
  return new E2EError('DECRYPT_FAILED', `A message of chat ${chatId} came in the answer for chat ${expected}.`);
}
