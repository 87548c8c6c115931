import type { KeyRing, Message, RoomJoinPayload, ServerToClientEvents } from '@parlor/protocol';
import {
  decryptMessage,
  E2EError,
  encryptMessage,
  generateKeyPair,
  type KeyPair,
  parseBundle,
  publicKeyToBase64,
} from '../crypto/index.js';
import type { ParlorClient } from './api.js';
import { ChatKeying } from './e2e-keying.js';
import type { EpochKey } from './e2e-keys.js';
import {
  type ChatEntry,
  type E2EChatSessionEvents,
  type E2EChatSessionOptions,
  E2ESessionError,
  type JoinedChat,
  type JoinOptions,
} from './e2e-types.js';
import { AsyncQueue, TypedEmitter } from './emitter.js';
import { isApiError, type ParlorApiError } from './errors.js';
import {
  type BadServerEventDetails,
  type CheckedServerEvent,
  JoinAnswerSchema,
  onChecked,
  shapeProblem,
} from './server-events.js';
import { connect, joinRoom, keepConnected, leaveRoom, type ParlorSocket, type RoomJoined } from './socket.js';
import { Tombstones } from './tombstones.js';
import type { HistoryInput } from './types.js';

/** How long a resync waits for the server's `chat:list` before asking `GET /v1/portal/chats`. */
const CHAT_LIST_WAIT_MS = 5000;

/** `room:join` refusals that mean the user is no longer in the chat. */
const REMOVED_CODES = [
  'ERR_NOT_CHAT_MEMBER',
  'ERR_CANNOT_BROWSE_PRIVATE',
  'ERR_CHAT_BANNED',
  'ERR_CHAT_NOT_FOUND',
] as const;

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
  readonly #deliveries = new Map<number, Promise<void>>();
  readonly #gaveUp = new Set<string>();
  /** Deleted message ids (`message:bulk_deleted`): a late `message:new` of one is dropped. */
  readonly #tombstones = new Tombstones();
  readonly #iterators = new Set<AsyncQueue<ChatEntry>>();
  readonly #unsubscribe: (() => void)[] = [];
  readonly #ownsSocket: boolean;
  readonly #keyWaitMs: number;
  readonly #shareOnJoin: boolean;
  #closed = false;
  #stopSupervising: () => void = () => {};
  /** Bumped at every connect and disconnect: a resync of an older connection stops at its next step. */
  #connection = 0;
  /** Takes the next `chat:list` (set while a resync waits for it); null: it came unusable. */
  #chatList: ((chatIds: number[] | null) => void) | null = null;
  /** The resync after the last reconnection that was not recovered (they run one after another). */
  #resync: Promise<void> = Promise.resolve();
  /**
   * True from a reconnection that was not recovered until its resync has gone through every chat.
   * A drop can end a resync midway, and a recovered connection after it only gets back the rooms
   * the socket had: the resync then goes on for the chats it had not entered again.
   */
  #resyncOpen = false;
  /** Joined chats whose room the socket entered since the last reconnection that was not recovered. */
  readonly #entered = new Set<number>();
  readonly #wakers = new Set<() => void>();

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
    this.#listen();
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
   * @throws E2EError INVALID_INPUT (nothing stored) for a key that is not 32 bytes or a bad epoch.
   */
  importKeys(chatId: number, keys: ReadonlyMap<number, Uint8Array>): void {
    this.#keying.keys.import(chatId, keys);
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
    const joined = checkJoined(await joinRoom(this.socket, payload));
    this.#keying.checkOwnKey(joined.key_ring);
    const chatId = joined.chat.id;
    this.#joined.add(chatId);
    this.#entered.add(chatId);
    this.#keying.keys.raiseEpoch(chatId, joined.epoch);
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
    const chatId = message.chat_id;
    if (expectedChatId !== undefined && chatId !== expectedChatId) throw otherChat(chatId, expectedChatId);
    if (message.type === 'system') {
      throw new E2ESessionError('SYSTEM_MESSAGE', 'System messages carry no ciphertext.', { chatId });
    }
    return decryptMessage({ chatKey: this.#keying.keys.lookup(chatId), chatId, content: message.content }).plaintext;
  }

  /**
   * Reads a message without throwing: decrypted, system, or undecryptable with its E2EError. With
   * `expectedChatId`, a message (system ones too) whose `chat_id` is another chat is undecryptable
   * (`DECRYPT_FAILED`): see {@link decrypt}.
   */
  open(message: Message, expectedChatId?: number): ChatEntry {
    const chatId = message.chat_id;
    if (expectedChatId !== undefined && chatId !== expectedChatId) {
      return { kind: 'undecryptable', chatId, message, error: otherChat(chatId, expectedChatId) };
    }
    if (message.type === 'system') return { kind: 'system', chatId, message };
    try {
      const lookup = this.#keying.keys.lookup(chatId);
      const { epoch, plaintext } = decryptMessage({ chatKey: lookup, chatId, content: message.content });
      return { kind: 'user', chatId, message, epoch, plaintext };
    } catch (error) {
      if (error instanceof E2EError) return { kind: 'undecryptable', chatId, message, error };
      throw error;
    }
  }

  /**
   * A page of history (newest first), each message read with {@link open}. A message the server
   * put in the page whose `chat_id` is another chat is `undecryptable` (`DECRYPT_FAILED`), never
   * shown as this chat's.
   */
  async history(chatId: number, input: HistoryInput = {}): Promise<ChatEntry[]> {
    const { messages } = await this.client.history(chatId, input);
    return messages.map((m) => this.open(m, chatId));
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

  /** The server refused this session for good on a reconnection: report it, then close. */
  #refused(error: ParlorApiError): void {
    void this.#end({ reason: 'refused', code: error.code, error });
  }

  async #end(e: Parameters<E2EChatSessionEvents['closed']>[0]): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.emit('closed', e);
    this.#stopSupervising();
    for (const off of this.#unsubscribe.splice(0)) off();
    this.#wake();
    for (const it of this.#iterators) it.end();
    this.#iterators.clear();
    if (this.#ownsSocket) this.socket.disconnect();
    await this.#resync;
    await this.#keying.close();
    await Promise.allSettled([...this.#deliveries.values()]);
    this.removeAllListeners();
  }

  #listen(): void {
    // Every payload is checked before it is used: a listener runs inside Socket.IO, where what it
    // throws is uncaught (in Node the process ends), so a malformed event is reported and dropped.
    const on = <E extends CheckedServerEvent>(event: E, handler: ServerToClientEvents[E], onBad?: () => void) => {
      const bad = (details: BadServerEventDetails) => {
        this.#badEvent(details);
        onBad?.();
      };
      const threw = (error: unknown) => {
        if (this.#closed) return;
        this.emit('error', new E2ESessionError('BACKGROUND_FAILURE', `Handling ${event} failed.`, { cause: error }));
      };
      this.#unsubscribe.push(onChecked(this.socket, event, handler, bad, threw));
    };
    on('room:key', (e) =>
      this.#keying.accept({ chatId: e.chat_id, epoch: e.epoch, envelope: e.envelope, sender: e.sender_session_id }),
    );
    on('room:rekey', (e) => this.#keying.rekey(e.chat_id, e.epoch));
    on('portal:key_added', (e) => this.#keying.keyAdded(e.chat_id, e.user_id, e.session_id, e.public_key));
    on('portal:key_removed', (e) => this.#keying.keyRemoved(e.chat_id, e.user_id, e.session_id));
    on('message:new', (m) => {
      if (!this.#tombstones.has(m.chat_id, m.id)) this.#enqueue(m);
    });
    // Nothing orders the events of different server nodes: a deletion may arrive before the
    // message:new it deletes (docs/api.md, Cluster mode), so its ids are kept as tombstones.
    on('message:bulk_deleted', (e) => {
      this.#tombstones.add(e.room_id, e.deleted_ids);
      this.emit('deleted', { chatId: e.room_id, ids: e.deleted_ids, deletedBy: e.deleted_by });
    });
    on('room:left', (e) => {
      this.#forget(e.chat_id);
      this.emit('left', { chatId: e.chat_id, reason: e.reason });
    });
    // A malformed chat:list cannot say which chats to enter again: a resync waiting for it reads
    // them from GET /v1/portal/chats at once instead of waiting out CHAT_LIST_WAIT_MS.
    const chatListUnusable = () => {
      const waiting = this.#chatList;
      this.#chatList = null;
      waiting?.(null);
    };
    on(
      'chat:list',
      (e) => {
        // The socket came back as another login session (its cookie changed while it was away): the
        // server gave it none of this session's rooms, and no envelope will name this session there.
        const sessionId = this.#keying.sessionId;
        if (sessionId !== null && e.session_id !== sessionId) {
          void this.#end({ reason: 'session_changed' });
          return;
        }
        const waiting = this.#chatList;
        this.#chatList = null;
        waiting?.(e.chats.map((chat) => chat.id));
      },
      chatListUnusable,
    );
    // The socket is connected when the session starts, so every later `connect` is a reconnection.
    const onConnect = () => {
      const connection = ++this.#connection;
      const recovered = this.socket.recovered;
      if (recovered && !this.#resyncOpen) {
        this.emit('reconnected', { recovered: true, chats: [...this.#joined] });
        return;
      }
      if (!recovered) {
        this.#resyncOpen = true;
        this.#entered.clear();
      }
      // Listen for this connection's chat:list at once; one resync runs at a time, and a newer
      // connection makes the older one stop at its next step.
      const members = this.#memberChats(connection);
      this.#resync = this.#resync
        .then(() => this.#rejoin(connection, members, recovered))
        .catch((error: unknown) => {
          if (!this.#closed) {
            this.emit('error', new E2ESessionError('BACKGROUND_FAILURE', 'The resync failed.', { cause: error }));
          }
        });
    };
    const onDisconnect = (reason: string) => {
      this.#connection++;
      this.#wake();
      if (!this.#closed) this.emit('disconnected', { reason });
    };
    this.socket.on('connect', onConnect);
    this.socket.on('disconnect', onDisconnect);
    this.#unsubscribe.push(() => {
      this.socket.off('connect', onConnect);
      this.socket.off('disconnect', onDisconnect);
    });
    // Socket.IO does not reconnect after the server dropped the socket or refused a reconnection.
    this.#stopSupervising = keepConnected(this.socket, { onRefused: (error) => this.#refused(error) });
  }

  /** Reports a server event that was dropped because its payload has the wrong shape. */
  #badEvent(details: BadServerEventDetails): void {
    if (this.#closed) return;
    const message = `The server sent ${details.event} with a malformed payload; it was ignored.`;
    this.emit('error', new E2ESessionError('BAD_SERVER_EVENT', message, { details }));
  }

  /** True once the connection a resync works for is gone (or the session closed). */
  #stale(connection: number): boolean {
    return this.#closed || connection !== this.#connection || !this.socket.connected;
  }

  /**
   * The chats this user is a member of now: the `chat:list` the server sends on every connection,
   * or `GET /v1/portal/chats` when none came in time. Null when the connection went away meanwhile.
   */
  async #memberChats(connection: number): Promise<Set<number> | null> {
    const pushed = await new Promise<number[] | null>((resolve) => {
      const done = (ids: number[] | null) => {
        clearTimeout(timer);
        this.#wakers.delete(wake);
        if (this.#chatList === done) this.#chatList = null;
        resolve(ids);
      };
      const wake = () => done(null);
      const timer = setTimeout(wake, CHAT_LIST_WAIT_MS);
      this.#chatList = done;
      this.#wakers.add(wake);
    });
    if (this.#stale(connection)) return null;
    return new Set(pushed ?? (await this.client.listChats()).chats.map((chat) => chat.id));
  }

  /**
   * After a reconnection the server could not recover: enters again only the chats this user is
   * still a member of (a `room:join` would make it a member of a public chat it left elsewhere or
   * was kicked from), and reports the others as `left {reason: 'removed'}`. After a recovered one
   * that followed a resync cut short, it enters the chats that resync had not (`recovered`).
   */
  async #rejoin(connection: number, memberChats: Promise<Set<number> | null>, recovered: boolean): Promise<void> {
    let members: Set<number> | null;
    try {
      members = await memberChats;
    } catch (error) {
      if (!this.#stale(connection)) {
        this.emit(
          'error',
          new E2ESessionError('BACKGROUND_FAILURE', 'Could not read the chat list.', { cause: error }),
        );
      }
      return;
    }
    if (members === null) return;
    for (const chatId of [...this.#joined]) {
      if (this.#stale(connection)) return;
      // Entered since the last reconnection that was not recovered: the recovery restored its room.
      if (this.#entered.has(chatId)) continue;
      if (!members.has(chatId)) {
        this.#removed(chatId);
        continue;
      }
      try {
        const entered = await this.#enter(connection, chatId);
        if (entered === null || this.#stale(connection)) return;
        const joined = checkJoined(entered);
        this.#keying.checkOwnKey(joined.key_ring);
        this.#entered.add(chatId);
        this.#keying.keys.raiseEpoch(chatId, joined.epoch);
        // Sessions announced (portal:key_added) while this one was away get the key now; a room:key
        // lost with the socket is made up for by reading the server's envelope.
        this.#keying.background(chatId, this.#keyAndShare(chatId, joined, true));
      } catch (error) {
        if (this.#stale(connection)) return;
        // Removed between the list and the join.
        if (isApiError(error, ...REMOVED_CODES)) this.#removed(chatId);
        else if (error instanceof E2ESessionError) this.emit('error', error);
        else {
          this.emit(
            'error',
            new E2ESessionError('BACKGROUND_FAILURE', `Could not rejoin chat ${chatId}.`, { chatId, cause: error }),
          );
        }
      }
    }
    if (this.#stale(connection)) return;
    this.#resyncOpen = false;
    this.emit('reconnected', { recovered, chats: [...this.#joined].filter((id) => this.#entered.has(id)) });
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

  /**
   * `room:join` for a resync. A refusal with ERR_RATE_LIMITED (the user's room entries per minute,
   * shared by its sessions) is retried after its `retry_after`; null when the connection went away.
   */
  async #enter(connection: number, chatId: number): Promise<RoomJoined | null> {
    for (;;) {
      try {
        // Enters only while still a member: a membership ended since the list is not made anew.
        return await joinRoom(this.socket, { chat_id: chatId, rejoin: true });
      } catch (error) {
        const retryAfter = isApiError(error, 'ERR_RATE_LIMITED') ? error.retryAfter : undefined;
        if (retryAfter === undefined || this.#stale(connection)) throw error;
        await this.#pause(retryAfter * 1000);
        if (this.#stale(connection)) return null;
      }
    }
  }

  /** Waits `ms`, or less when a disconnect or close wakes it. */
  #pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#wakers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wakers.add(done);
    });
  }

  #removed(chatId: number): void {
    if (!this.#joined.has(chatId)) return;
    this.#forget(chatId);
    this.emit('left', { chatId, reason: 'removed' });
  }

  /** Ends the pauses of a resync (a disconnect or close makes it stop). */
  #wake(): void {
    for (const wake of [...this.#wakers]) wake();
  }

  #forget(chatId: number): void {
    this.#joined.delete(chatId);
    this.#entered.delete(chatId);
    this.#keying.forget(chatId);
  }

  async #post(chatId: number, key: EpochKey, plaintext: string): Promise<{ id: string; epoch: number }> {
    const content = encryptMessage({ chatKey: key.key, chatId, epoch: key.epoch, plaintext });
    const { id } = await this.client.sendMessage(chatId, content);
    return { id, epoch: key.epoch };
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
    if (this.#closed || this.#tombstones.has(message.chat_id, message.id)) return;
    const entry = this.open(message);
    for (const it of this.#iterators) it.push(entry);
    this.emit('message', entry);
  }

  async #awaitEpochOf(message: Message): Promise<void> {
    let epoch: number;
    try {
      epoch = parseBundle(message.content).epoch;
    } catch {
      return; // open() reports BUNDLE_INVALID.
    }
    const chatId = message.chat_id;
    const keys = this.#keying.keys;
    const known = keys.epochOf(chatId);
    const tag = `${chatId}:${epoch}`;
    // Keys of past epochs never arrive later; the current or a newer one may be on its way.
    if (keys.get(chatId, epoch) || (known !== undefined && epoch < known) || this.#gaveUp.has(tag)) return;
    if (!(await keys.waitForEpoch(chatId, epoch, this.#keyWaitMs))) {
      if (this.#gaveUp.size > 1000) this.#gaveUp.clear();
      this.#gaveUp.add(tag);
    }
  }

  #assertOpen(): void {
    if (this.#closed) throw new E2ESessionError('CLOSED', 'This E2E session is closed.');
  }
}

/** The error of a message that came in the answer for `expected` but names another chat. */
function otherChat(chatId: number, expected: number): E2EError {
  return new E2EError('DECRYPT_FAILED', `A message of chat ${chatId} came in the answer for chat ${expected}.`);
}

/**
 * A `room:join` acknowledgement, checked where the session relies on it (chat id, epoch, key ring).
 * @throws E2ESessionError BAD_SERVER_ANSWER when it does not have that shape.
 */
function checkJoined(joined: RoomJoined): RoomJoined {
  const problem = shapeProblem(JoinAnswerSchema, joined);
  if (problem) {
    throw new E2ESessionError('BAD_SERVER_ANSWER', 'The room:join acknowledgement is malformed.', {
      details: { answer: 'room:join', path: problem.path, problem: problem.message },
    });
  }
  return joined;
}
