import type { KeyRing, Message, RoomJoinPayload } from '@parlor/protocol';
import { encryptMessage, generateKeyPair, type KeyPair, publicKeyToBase64 } from '../crypto/index.js';
import type { ParlorClient } from './api.js';
import { listenToServer } from './e2e-events.js';
import { ChatKeying } from './e2e-keying.js';
import type { EpochKey } from './e2e-keys.js';
import { decryptText, MessageDelivery, readEntry, readPage } from './e2e-messages.js';
import { checkJoined, SessionResync } from './e2e-resync.js';
import {
  type ChatEntry,
  type E2EChatSessionEvents,
  type E2EChatSessionOptions,
  E2ESessionError,
  type JoinedChat,
  type JoinOptions,
} from './e2e-types.js';
import { AsyncQueue, TypedEmitter } from './emitter.js';
import { isApiError } from './errors.js';
import { connect, joinRoom, leaveRoom, type ParlorSocket, type RoomJoined } from './socket.js';
import type { HistoryInput } from './types.js';

/**
 * The client side of DESIGN.md section 7 for one logged-in session: registers this session's
 * X25519 key, keeps the chat keys of every epoch it obtains, keys new epochs (the first member to
 * share for the whole key ring wins; the others wait for `room:key`), gives the current key to
 * new sessions (`portal:key_added`), encrypts what it sends and decrypts what it receives.
 * Every wait is bounded (`keyWaitMs`); background failures are reported as `error` events.
 */
export class E2EChatSession extends TypedEmitter<E2EChatSessionEvents> {
  readonly client: ParlorClient;
  readonly socket: ParlorSocket;
  /** This session's public key, base64 (as registered and as it appears in key rings). */
  readonly publicKey: string;
  readonly #keying: ChatKeying;
  readonly #joined = new Set<number>();
  /** Incoming messages, in order per chat, each after its key (see MessageDelivery). */
  readonly #delivery: MessageDelivery;
  /** The rejoins after reconnections (see SessionResync). */
  readonly #resync: SessionResync;
  readonly #iterators = new Set<AsyncQueue<ChatEntry>>();
  readonly #ownsSocket: boolean;
  readonly #keyWaitMs: number;
  readonly #shareOnJoin: boolean;
  #closed = false;
  /** Stops the server's events (listenToServer). */
  readonly #stopListening: () => void;

  private constructor(opts: E2EChatSessionOptions, socket: ParlorSocket, ownsSocket: boolean) {
    super();
    this.client = opts.client;
    this.socket = socket;
    this.#ownsSocket = ownsSocket;
    const keyPair: KeyPair = opts.keyPair ?? generateKeyPair();
    this.publicKey = publicKeyToBase64(keyPair.publicKey);
    this.#keyWaitMs = opts.keyWaitMs ?? 5000;
    this.#shareOnJoin = opts.shareOnJoin ?? true;
    this.#keying = new ChatKeying({
      client: opts.client,
      publicKey: this.publicKey,
      privateKey: keyPair.privateKey,
      keyWaitMs: this.#keyWaitMs,
      jitterMs: opts.rekeyJitterMs ?? 300,
      attempts: opts.keyingAttempts ?? 5,
      isJoined: (chatId) => this.#joined.has(chatId),
      onKey: (e) => this.emit('key', e),
      onError: (e) => this.emit('error', e),
      onReplaced: (error) => void this.#end({ reason: 'key_replaced', code: error.code, error }),
    });
    this.#delivery = new MessageDelivery({
      keys: this.#keying.keys,
      keyWaitMs: this.#keyWaitMs,
      isClosed: () => this.#closed,
      deliver: (message) => {
        const entry = this.open(message);
        for (const it of this.#iterators) it.push(entry);
        this.emit('message', entry);
      },
    });
    this.#resync = new SessionResync({
      client: opts.client,
      socket,
      keying: this.#keying,
      joined: this.#joined,
      isClosed: () => this.#closed,
      keyAndShare: (chatId, joined) => this.#keyAndShare(chatId, joined, true),
      removed: (chatId) => this.#removed(chatId),
      onReconnected: (e) => this.emit('reconnected', e),
      onError: (e) => this.emit('error', e),
    });
    this.#stopListening = listenToServer({
      socket,
      keying: this.#keying,
      delivery: this.#delivery,
      resync: this.#resync,
      isClosed: () => this.#closed,
      emit: (event, arg) => this.emit(event, arg),
      forget: (chatId) => this.#forget(chatId),
      end: (e) => void this.#end(e),
    });
  }

  /**
   * Opens the session: connects the socket (unless one is given, already connected), then
   * registers the public key (`POST /v1/portal/keys`), so that envelopes shared in answer to it
   * already reach this socket.
   */
  static async open(opts: E2EChatSessionOptions): Promise<E2EChatSession> {
    const socket = opts.socket ?? (await connect(opts.client));
    const session = new E2EChatSession(opts, socket, !opts.socket);
    try {
      // The server names our session: key rings list whatever keys sessions registered, and only
      // the registration's answer says which session is this one.
      const { session_id } = await opts.client.registerKey(session.publicKey);
      session.#keying.setSessionId(session_id);
    } catch (error) {
      await session.close();
      throw error;
    }
    return session;
  }

  /** This session's id, as the server answered the key registration at {@link open}. */
  get sessionId(): number | null {
    return this.#keying.sessionId;
  }

  /** The newest epoch known for a chat. */
  epochOf(chatId: number): number | undefined {
    return this.#keying.keys.epochOf(chatId);
  }

  /** True when the key of the newest known epoch is held. */
  hasKey(chatId: number): boolean {
    return this.#keying.hasKey(chatId);
  }

  /** Every chat key this session holds for the chat, by epoch (a copy; for export or inspection). */
  chatKeys(chatId: number): Map<number, Uint8Array> {
    return this.#keying.keys.keysOf(chatId);
  }

  /**
   * Restores chat keys kept from an earlier run (see {@link chatKeys}); held epochs are not replaced.
   * The current epoch's key among them is given to the sessions announced while it was lacking.
   * @throws E2EError INVALID_INPUT (nothing stored) for a key that is not 32 bytes or a bad epoch.
   */
  importKeys(chatId: number, keys: ReadonlyMap<number, Uint8Array>): void {
    this.#keying.importKeys(chatId, keys);
  }

  /** Waits (bounded) until the key of the newest known epoch is held; true when it is. */
  async waitForKey(chatId: number, timeoutMs = this.#keyWaitMs): Promise<boolean> {
    const keys = this.#keying.keys;
    return (await keys.waitForCurrent(chatId, keys.epochOf(chatId) ?? 0, timeoutMs)) !== undefined;
  }

  /**
   * `room:join`, then obtains the current chat key: from our envelope, by keying an epoch nobody
   * keyed, or from a holder (waiting at most `keyWaitMs`, unless `waitForKey: false`).
   * @throws ParlorApiError when the server refuses the join or the key lookup.
   */
  async join(payload: RoomJoinPayload, opts: JoinOptions = {}): Promise<JoinedChat> {
    this.#assertOpen();
    const joined = await this.#enter(payload);
    const chatId = joined.chat.id;
    const keying = this.#keying.ensure(chatId);
    let hasKey: boolean;
    // Sessions of the ring that missed their envelope (their holders were offline) get it now.
    if (opts.waitForKey === false) {
      this.#keying.background(chatId, this.#keyAndShare(chatId, joined));
      hasKey = this.hasKey(chatId);
    } else {
      hasKey = await keying;
      // The ring is the join's: when the keying moved to a later epoch meanwhile (a removal), the
      // share reads that epoch's ring first (ChatKeying.shareWith).
      if (hasKey && this.#shareOnJoin) this.#keying.shareInBackground(chatId, joined.key_ring, joined.epoch);
    }
    return { ...joined, hasKey };
  }

  /**
   * `room:join`, then marks the chat joined. Sessions announced to the room before the answer (the
   * answer's ring may have been read before they came) are served once it is joined, and dropped
   * when the join fails (ChatKeying.joinStarted).
   */
  async #enter(payload: RoomJoinPayload): Promise<RoomJoined> {
    const ended = this.#keying.joinStarted('chat_id' in payload ? payload.chat_id : null);
    let chatId: number | undefined;
    try {
      const joined = checkJoined(await joinRoom(this.socket, payload));
      this.#keying.checkOwnKey(joined.key_ring);
      chatId = joined.chat.id;
      this.#joined.add(chatId);
      this.#resync.entered(chatId);
      this.#keying.keys.raiseEpoch(chatId, joined.epoch);
      return joined;
    } finally {
      ended(chatId);
    }
  }

  /** `room:leave`: ends the membership. Keys of past epochs are kept (history stays readable). */
  async leave(chatId: number): Promise<void> {
    this.#assertOpen();
    await leaveRoom(this.socket, chatId);
    this.#forget(chatId);
  }

  /**
   * Encrypts with the current epoch's key and sends. When the server answers ERR_EPOCH_MISMATCH or
   * ERR_NO_ROOM_KEY (a rekey this session had not seen yet, or a key imported into a new session
   * that no holder has shared with it yet), it waits (bounded) for the new key or this session's
   * envelope and retries once.
   * @throws E2ESessionError NO_CHAT_KEY when neither comes in time; ParlorApiError for refusals.
   */
  async send(chatId: number, plaintext: string): Promise<{ id: string; epoch: number }> {
    this.#assertOpen();
    const first = this.#keying.keys.current(chatId) ?? (await this.#keying.current(chatId, 0));
    try {
      return await this.#post(chatId, first, plaintext);
    } catch (error) {
      if (!isApiError(error, 'ERR_EPOCH_MISMATCH', 'ERR_NO_ROOM_KEY')) throw error;
      await this.#keying.refresh(chatId);
      if (error.code === 'ERR_NO_ROOM_KEY' && !(await this.#keying.awaitEnvelope(chatId, first.epoch))) {
        this.#assertOpen();
        throw new E2ESessionError(
          'NO_CHAT_KEY',
          `The server holds no envelope of chat ${chatId} epoch ${first.epoch} for this session, and no member shared one in time.`,
          { chatId },
        );
      }
      const minEpoch = first.epoch + (error.code === 'ERR_EPOCH_MISMATCH' ? 1 : 0);
      return this.#post(chatId, await this.#keying.current(chatId, minEpoch), plaintext);
    }
  }

  /**
   * The plaintext of a user message (from `message:new` or history). Pass `expectedChatId` when
   * the message came as part of a chat's answer: its `chat_id` is the server's word, and a
   * message of another chat decrypts under that chat's keys.
   * @throws E2EError NO_KEY_FOR_EPOCH for an epoch this session never held, DECRYPT_FAILED or
   *   BUNDLE_INVALID for bad content, DECRYPT_FAILED for a message of another chat than
   *   `expectedChatId`; E2ESessionError SYSTEM_MESSAGE for a system message.
   */
  decrypt(message: Message, expectedChatId?: number): string {
    return decryptText(this.#keying.keys, message, expectedChatId);
  }

  /**
   * Reads a message without throwing: decrypted, system, or undecryptable with its E2EError. With
   * `expectedChatId`, a message (system ones too) whose `chat_id` is another chat is undecryptable
   * (`DECRYPT_FAILED`): see {@link decrypt}.
   */
  open(message: Message, expectedChatId?: number): ChatEntry {
    return readEntry(this.#keying.keys, message, expectedChatId);
  }

  /**
   * A page of history (newest first), each message read with {@link open}. A message the server
   * put in the page whose `chat_id` is another chat is `undecryptable` (`DECRYPT_FAILED`), never
   * shown as this chat's.
   * @throws E2ESessionError BAD_SERVER_ANSWER for a page of another shape (an entry that is no
   *   message); ParlorApiError when the server refuses.
   */
  async history(chatId: number, input: HistoryInput = {}): Promise<ChatEntry[]> {
    return readPage(this.#keying.keys, await this.client.history(chatId, input), chatId);
  }

  /** Incoming entries as an async iterator (of one chat, or all); it ends at `close()` or `return()`. */
  messages(chatId?: number): AsyncIterableIterator<ChatEntry> {
    const queue: AsyncQueue<ChatEntry> = new AsyncQueue<ChatEntry>(
      10_000,
      () => this.#iterators.delete(queue),
      (entry) => chatId === undefined || entry.chatId === chatId,
    );
    if (this.#closed) queue.end();
    else this.#iterators.add(queue);
    return queue;
  }

  /**
   * Stops everything: socket listeners, timers, waits and iterators; closes the socket it opened.
   * Emits `closed {reason: 'closed'}` first.
   */
  close(): Promise<void> {
    return this.#end({ reason: 'closed' });
  }

  async #end(e: Parameters<E2EChatSessionEvents['closed']>[0]): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.emit('closed', e);
    this.#stopListening();
    this.#resync.wake();
    for (const it of this.#iterators) it.end();
    this.#iterators.clear();
    if (this.#ownsSocket) this.socket.disconnect();
    await this.#resync.settled();
    await this.#keying.close();
    await this.#delivery.settled();
    this.removeAllListeners();
  }

  /**
   * Obtains the current key, then (with `shareOnJoin`) gives it to the join's ring sessions that
   * lack it (read again when the keying moved to a later epoch: ChatKeying.shareWith).
   * `resync`: after a reconnection, the server's envelope is read even while a keying runs.
   */
  async #keyAndShare(chatId: number, joined: { epoch: number; key_ring: KeyRing }, resync = false): Promise<void> {
    const held = await (resync ? this.#keying.resync(chatId) : this.#keying.ensure(chatId));
    if (held && this.#shareOnJoin) await this.#keying.shareWith(chatId, joined.key_ring, joined.epoch, true);
  }

  #removed(chatId: number): void {
    if (!this.#joined.has(chatId)) return;
    this.#forget(chatId);
    this.emit('left', { chatId, reason: 'removed' });
  }

  #forget(chatId: number): void {
    this.#joined.delete(chatId);
    this.#resync.forget(chatId);
    this.#keying.forget(chatId);
  }

  async #post(chatId: number, key: EpochKey, plaintext: string): Promise<{ id: string; epoch: number }> {
    const content = encryptMessage({ chatKey: key.key, chatId, epoch: key.epoch, plaintext });
    const { id } = await this.client.sendMessage(chatId, content);
    return { id, epoch: key.epoch };
  }

  #assertOpen(): void {
    if (this.#closed) throw new E2ESessionError('CLOSED', 'This E2E session is closed.');
  }
}
