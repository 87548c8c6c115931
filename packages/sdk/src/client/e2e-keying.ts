import type { KeyRing } from '@parlor/protocol';
import { unwrapChatKey } from '../crypto/index.js';
import type { ParlorClient } from './api.js';
import { ChatKeyStore, type EpochKey } from './e2e-keys.js';
import { KeyObtaining } from './e2e-obtain.js';
import { RingReader } from './e2e-ring.js';
import { withinRing } from './e2e-share.js';
import { KeySharing } from './e2e-sharing.js';
import { type E2EChatSessionEvents, E2ESessionError } from './e2e-types.js';
import { isApiError } from './errors.js';

/** How long `portal:key_added` events are gathered into one share. */
const KEY_ADDED_COALESCE_MS = 15;

type KeyEvent = Parameters<E2EChatSessionEvents['key']>[0];
export type Envelope = { chatId: number; epoch: number; envelope: string; sender: number | null };

export interface ChatKeyingOptions {
  client: ParlorClient;
  publicKey: string;
  privateKey: Uint8Array;
  keyWaitMs: number;
  jitterMs: number;
  attempts: number;
  /** Whether a chat is joined (rekeys and shares are only done for those). */
  isJoined: (chatId: number) => boolean;
  onKey: (e: KeyEvent) => void;
  onError: (error: E2ESessionError) => void;
  /**
   * The server lists this session with another public key: another client (a second tab sharing
   * the login session's cookie) registered a key for it, so no envelope opens here any more.
   * Called once; the keying has stopped by then.
   */
  onReplaced: (error: E2ESessionError) => void;
}

/**
 * The key management of one session (DESIGN.md 7): takes its session id from the server's answer
 * to the key registration (never from key rings: anyone can list a public key they saw), opens
 * envelopes, keys new epochs (first complete share wins; losers wait for `room:key`), and gives
 * the current key to sessions that lack it. Every wait is bounded by `keyWaitMs`. Reading key rings
 * is RingReader's part (e2e-ring.ts), keying epochs and sharing keys KeySharing's (e2e-sharing.ts).
 */
export class ChatKeying {
  readonly keys = new ChatKeyStore();
  readonly #o: ChatKeyingOptions;
  readonly #pendingEnvelopes: Envelope[] = [];
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  readonly #tasks = new Set<Promise<unknown>>();
  readonly #ring: RingReader;
  readonly #sharing: KeySharing;
  readonly #obtaining: KeyObtaining;
  /** `room:join`s in flight, per chat (`null`: by invite, vanity or token, the chat not known yet). */
  readonly #joins = new Map<number | null, number>();
  #sessionId: number | null = null;
  #closed = false;

  constructor(opts: ChatKeyingOptions) {
    this.#o = opts;
    const report = (error: E2ESessionError) => this.#emitError(error);
    this.#ring = new RingReader({
      client: opts.client,
      keys: this.keys,
      publicKey: opts.publicKey,
      sessionId: () => this.#sessionId,
      isClosed: () => this.#closed,
      onReplaced: (error) => {
        void this.close();
        opts.onReplaced(error);
      },
      report,
    });
    this.#sharing = new KeySharing({
      client: opts.client,
      keys: this.keys,
      ring: this.#ring,
      sessionId: () => this.#sessionId,
      isClosed: () => this.#closed,
      storeKeyed: (chatId, epoch, key) => this.#store(chatId, epoch, key, 'keyed', this.#sessionId),
      report,
    });
    this.#obtaining = new KeyObtaining({
      keys: this.keys,
      ring: this.#ring,
      sharing: this.#sharing,
      keyWaitMs: opts.keyWaitMs,
      attempts: opts.attempts,
      isJoined: opts.isJoined,
      sessionId: () => this.#sessionId,
      isClosed: () => this.#closed,
      accept: (e) => this.accept(e),
      schedule: (chatId) => this.schedule(chatId),
    });
  }

  get sessionId(): number | null {
    return this.#sessionId;
  }

  /**
   * Sets our session id as the server answered the key registration (`POST /v1/portal/keys`
   * `session_id`), then opens the envelopes that arrived before it.
   */
  setSessionId(sessionId: number): void {
    this.#sessionId = sessionId;
    for (const e of this.#pendingEnvelopes.splice(0)) this.accept(e);
  }

  /** Opens an envelope addressed to this session (kept for later if our id is not known yet). */
  accept(e: Envelope): boolean {
    this.keys.markEnvelope(e.chatId, e.epoch);
    if (this.keys.get(e.chatId, e.epoch)) return true;
    if (this.#sessionId === null) {
      if (this.#pendingEnvelopes.length < 1000) this.#pendingEnvelopes.push(e);
      return false;
    }
    let key: Uint8Array;
    try {
      key = unwrapChatKey({
        envelope: e.envelope,
        chatId: e.chatId,
        epoch: e.epoch,
        recipientPrivateKey: this.#o.privateKey,
        recipientSessionId: this.#sessionId,
      });
    } catch (error) {
      this.#error('ENVELOPE_REJECTED', `An envelope for chat ${e.chatId} epoch ${e.epoch} did not open.`, e.chatId, {
        cause: error,
        details: { epoch: e.epoch, senderSessionId: e.sender },
      });
      return false;
    }
    this.#store(e.chatId, e.epoch, key, 'envelope', e.sender);
    return true;
  }

  /** `room:rekey`: after a random delay (so members do not all race), try to key the new epoch. */
  rekey(chatId: number, epoch: number): void {
    this.keys.raiseEpoch(chatId, epoch);
    // Sessions announced before this epoch are not owed its key by us: whoever keys it wraps it
    // for every session the server lists in its ring, and a session removed meanwhile (a kick
    // raised the epoch) must not get it (docs/e2e.md, "Removal and key compromise").
    this.#sharing.dropBefore(chatId, epoch);
    if (this.#o.isJoined(chatId) && !this.keys.get(chatId, epoch)) this.schedule(chatId);
  }

  schedule(chatId: number): void {
    if (this.#closed) return;
    const timer = setTimeout(
      () => {
        this.#timers.delete(timer);
        // A run in progress already has its owner (a caller or a background task) to report a
        // failure, and schedules again itself when the epoch moved meanwhile. A chat left during
        // the delay (`room:left` after the rekey of a kick) is not keyed: we are no member there.
        if (!this.#closed && this.#o.isJoined(chatId) && !this.hasKey(chatId) && !this.#obtaining.isRunning(chatId)) {
          this.background(chatId, this.ensure(chatId));
        }
      },
      Math.floor(Math.random() * this.#o.jitterMs),
    );
    this.#timers.add(timer);
  }

  /**
   * `portal:key_added`: give the key of the current epoch to that session (as soon as we hold it,
   * and only if the server lists it in that epoch's ring: see KeySharing.flush). The
   * announcement is kept with the epoch known now, so that a `room:rekey` drops it. One that names
   * this session with another public key is checked against the ring ({@link checkOwnKey}). One
   * that comes before the answer to our `room:join` of the chat is kept until the join ends
   * ({@link joinStarted}).
   */
  keyAdded(chatId: number, userId: number, sessionId: number, publicKey: string): void {
    if (sessionId === this.#sessionId) {
      // Another key registered for this session (another tab on the same cookie). The ring says
      // whether it is the current one (an announcement read before our registration is not).
      if (publicKey !== this.#o.publicKey && !this.#closed) {
        const check = this.#ring.confirmOwnKey(chatId);
        if (check) this.#track(chatId, check);
      }
      return;
    }
    const joined = this.#o.isJoined(chatId);
    if ((!joined && !this.#joinInFlight(chatId)) || this.#closed) return;
    const share = { userId: String(userId), publicKey, epoch: this.keys.epochOf(chatId) ?? 0 };
    if (!joined) {
      this.#sharing.keep(chatId, sessionId, share);
      return;
    }
    if (!this.#sharing.announce(chatId, sessionId, share)) return; // A flush is already scheduled.
    // The server announces all sessions of a user together: serve them in one share, so that no
    // session of theirs holds the key while another still lacks it.
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      this.#flush(chatId);
    }, KEY_ADDED_COALESCE_MS);
    this.#timers.add(timer);
  }

  /**
   * A `room:join` starts (`chatId` null: by invite, vanity or token). Until it ends, announcements
   * of the chat (of any chat not joined, for null) are kept: the server may announce a new member
   * to the room our socket entered before it answers, with a ring read before that member came.
   * Returns what ends it, given the chat joined (after it is marked joined) or nothing when the
   * join failed: the kept announcements of the joined chat are served (or wait for its key), the
   * others dropped.
   */
  joinStarted(chatId: number | null): (joinedChat?: number) => void {
    this.#joins.set(chatId, (this.#joins.get(chatId) ?? 0) + 1);
    return (joinedChat) => {
      const left = (this.#joins.get(chatId) ?? 1) - 1;
      if (left > 0) this.#joins.set(chatId, left);
      else this.#joins.delete(chatId);
      if (joinedChat !== undefined) this.#flush(joinedChat);
      for (const waiting of this.#sharing.waitingChats()) {
        if (!this.#o.isJoined(waiting) && !this.#joinInFlight(waiting)) this.#sharing.forget(waiting);
      }
    };
  }

  #joinInFlight(chatId: number): boolean {
    return this.#joins.has(chatId) || this.#joins.has(null);
  }

  /**
   * Stores kept keys (ChatKeyStore.import). The current epoch's key among them serves the sessions
   * announced while it was lacking, as a key from an envelope does (#store); later announcements
   * are served as they come.
   */
  importKeys(chatId: number, keys: ReadonlyMap<number, Uint8Array>): void {
    this.keys.import(chatId, keys);
    const current = this.keys.current(chatId);
    if (current && keys.has(current.epoch)) this.#flush(chatId);
  }

  /**
   * `portal:key_removed`: that session (`sessionId` null: every session of the user) left the key
   * ring (its session ended, or its user left or was removed). A share still waiting for it is
   * dropped, so no key of a later epoch is wrapped for it.
   */
  keyRemoved(chatId: number, userId: number, sessionId: number | null): void {
    this.#sharing.withdraw(chatId, userId, sessionId);
  }

  /**
   * Checks that `ring` lists this session with this session's public key (RingReader.checkOwnKey).
   * @throws E2ESessionError KEY_REPLACED when it lists another: the keying has stopped for good.
   */
  checkOwnKey(ring: KeyRing): void {
    this.#ring.checkOwnKey(ring);
  }

  forget(chatId: number): void {
    this.#sharing.forget(chatId);
  }

  hasKey(chatId: number): boolean {
    return this.keys.current(chatId) !== undefined;
  }

  /** Runs a keying in the background: its failure becomes an `error` event. */
  background(chatId: number, run: Promise<unknown>): void {
    this.#track(chatId, run);
  }

  /**
   * Keeps a background task until it settles (so `close()` can wait); a failure becomes an `error`
   * event. A task refused because the membership ended (a kick's `room:rekey` can come before its
   * `room:left`, or the chat was deleted) ends quietly, as a ring read does (RingReader.ringAt):
   * `left` or the resync tells the app.
   */
  #track(chatId: number, task: Promise<unknown>): void {
    const settled = task
      .catch((error: unknown) => {
        if (isApiError(error, 'ERR_NOT_CHAT_MEMBER', 'ERR_CHAT_NOT_FOUND')) return;
        if (error instanceof E2ESessionError) this.#emitError(error);
        else this.#error('BACKGROUND_FAILURE', `A key operation of chat ${chatId} failed.`, chatId, { cause: error });
      })
      .finally(() => this.#tasks.delete(settled));
    this.#tasks.add(settled);
  }

  /** Obtains the key of the current epoch (KeyObtaining.ensure); true when held at the end. */
  ensure(chatId: number): Promise<boolean> {
    return this.#obtaining.ensure(chatId);
  }

  /** {@link ensure} for a resync after a reconnection (KeyObtaining.resync). */
  resync(chatId: number): Promise<boolean> {
    return this.#obtaining.resync(chatId);
  }

  /** Waits (bounded) for the current key at `minEpoch` or later (KeyObtaining.current). */
  current(chatId: number, minEpoch: number): Promise<EpochKey> {
    return this.#obtaining.current(chatId, minEpoch);
  }

  /** Asks the server for the current epoch and our envelope at it (KeyObtaining.refresh). */
  refresh(chatId: number): Promise<void> {
    return this.#obtaining.refresh(chatId);
  }

  /** Waits (bounded) for our envelope of `epoch` or a newer epoch (KeyObtaining.awaitEnvelope). */
  awaitEnvelope(chatId: number, epoch: number): Promise<boolean> {
    return this.#obtaining.awaitEnvelope(chatId, epoch);
  }

  /** {@link shareWith} in the background (awaited by `close()`). */
  shareInBackground(chatId: number, ring: KeyRing, ringEpoch: number): void {
    this.#track(chatId, this.shareWith(chatId, ring, ringEpoch, true));
  }

  /**
   * Shares the current key with sessions of `ring`, as the server listed them at `ringEpoch` (the
   * server stores only missing envelopes and never overwrites). When the current epoch is another
   * one, the ring is read again and only the sessions of `ring` the server lists at the current
   * epoch get its key: a session listed at an earlier epoch may have been removed since, and the
   * key of the epoch after a removal goes only to the remaining sessions (docs/e2e.md, "Removal
   * and key compromise"). "The epoch or ring moved on" is expected: the next keying covers them.
   */
  async shareWith(chatId: number, ring: KeyRing, ringEpoch: number, skipSelf: boolean): Promise<void> {
    const current = this.keys.current(chatId);
    if (!current || this.#closed) return;
    let target = ring;
    if (ringEpoch !== current.epoch) {
      const now = await this.#ring.ringAt(chatId, current.epoch);
      if (now === null || this.#closed) return;
      target = withinRing(ring, now);
    }
    await this.#sharing.shareListed(chatId, current, target, skipSelf);
  }

  /** Ends timers and waits; resolves when running keyings have stopped. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#sharing.wake();
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    this.keys.cancelAll();
    await Promise.allSettled([...this.#obtaining.runs(), ...this.#tasks]);
  }

  #store(chatId: number, epoch: number, key: Uint8Array, source: KeyEvent['source'], sender: number | null): void {
    if (!this.keys.store(chatId, epoch, key)) return;
    if (!this.#closed) this.#o.onKey({ chatId, epoch, source, senderSessionId: sender });
    if (this.keys.current(chatId)?.epoch === epoch) this.#flush(chatId);
  }

  /** Gives the current key to the sessions announced that lack it (KeySharing.flush), in the background. */
  #flush(chatId: number): void {
    this.#track(chatId, this.#sharing.flush(chatId));
  }

  #error(
    code: E2ESessionError['code'],
    message: string,
    chatId: number,
    extra: { cause?: unknown; details?: unknown },
  ): void {
    this.#emitError(new E2ESessionError(code, message, { chatId, ...extra }));
  }

  #emitError(error: E2ESessionError): void {
    if (!this.#closed) this.#o.onError(error);
  }
}
