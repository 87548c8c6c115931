import type { KeyRing } from '@parlor/protocol';
import {
  buildKeyShare,
  generateChatKey,
  type KeyShareEnvelope,
  type SkippedSession,
  unwrapChatKey,
} from '../crypto/index.js';
import type { ParlorClient } from './api.js';
import { ChatKeyStore, type EpochKey } from './e2e-keys.js';
import { splitShare, withinRing } from './e2e-share.js';
import { type E2EChatSessionEvents, E2ESessionError } from './e2e-types.js';
import { isApiError } from './errors.js';
import { type KeysAnswer, KeysAnswerSchema, shapeProblem } from './server-events.js';

/** How long `portal:key_added` events are gathered into one share. */
const KEY_ADDED_COALESCE_MS = 15;
/** Tries of one share request refused with ERR_RATE_LIMITED (each after its `retry_after`). */
const TOP_UP_ATTEMPTS = 5;

type KeyEvent = Parameters<E2EChatSessionEvents['key']>[0];
type Envelope = { chatId: number; epoch: number; envelope: string; sender: number | null };
/** A session announced by `portal:key_added`, at the epoch this session knew of then. */
type PendingShare = { userId: string; publicKey: string; epoch: number };

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
 * the current key to sessions that lack it. Every wait is bounded by `keyWaitMs`.
 */
export class ChatKeying {
  readonly keys = new ChatKeyStore();
  readonly #o: ChatKeyingOptions;
  readonly #pendingEnvelopes: Envelope[] = [];
  readonly #pendingShares = new Map<number, Map<number, PendingShare>>();
  readonly #running = new Map<number, Promise<boolean>>();
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  readonly #tasks = new Set<Promise<unknown>>();
  /** Sessions known to hold an envelope at a chat's newest epoch we shared at (so shares skip them). */
  readonly #holders = new Map<number, { epoch: number; sessions: Set<number> }>();
  readonly #wakers = new Set<() => void>();
  #sessionId: number | null = null;
  #closed = false;
  /** A ring read is checking an announcement of this session with another key. */
  #confirming = false;

  constructor(opts: ChatKeyingOptions) {
    this.#o = opts;
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
    const pending = this.#pendingShares.get(chatId);
    for (const [sessionId, entry] of pending ?? []) if (entry.epoch < epoch) pending?.delete(sessionId);
    if (this.#o.isJoined(chatId) && !this.keys.get(chatId, epoch)) this.schedule(chatId);
  }

  schedule(chatId: number): void {
    if (this.#closed) return;
    const timer = setTimeout(
      () => {
        this.#timers.delete(timer);
        // A run in progress already has its owner (a caller or a background task) to report a
        // failure, and schedules again itself when the epoch moved meanwhile.
        if (!this.#closed && !this.hasKey(chatId) && !this.#running.has(chatId)) {
          this.background(chatId, this.ensure(chatId));
        }
      },
      Math.floor(Math.random() * this.#o.jitterMs),
    );
    this.#timers.add(timer);
  }

  /**
   * `portal:key_added`: give the key of the current epoch to that session (as soon as we hold it,
   * and only if the server lists it in that epoch's ring: see {@link #flushShares}). The
   * announcement is kept with the epoch known now, so that a `room:rekey` drops it. One that names
   * this session with another public key is checked against the ring ({@link checkOwnKey}).
   */
  keyAdded(chatId: number, userId: number, sessionId: number, publicKey: string): void {
    if (sessionId === this.#sessionId) {
      // Another key registered for this session (another tab on the same cookie). The ring says
      // whether it is the current one (an announcement read before our registration is not).
      if (publicKey !== this.#o.publicKey && !this.#closed && !this.#confirming) {
        this.#confirming = true;
        this.#track(chatId, this.#confirmOwnKey(chatId));
      }
      return;
    }
    if (!this.#o.isJoined(chatId)) return;
    const pending = this.#pendingShares.get(chatId) ?? new Map<number, PendingShare>();
    pending.set(sessionId, { userId: String(userId), publicKey, epoch: this.keys.epochOf(chatId) ?? 0 });
    this.#pendingShares.set(chatId, pending);
    if (pending.size > 1 || this.#closed) return; // A flush is already scheduled.
    // The server announces all sessions of a user together: serve them in one share, so that no
    // session of theirs holds the key while another still lacks it.
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      this.#track(chatId, this.#flushShares(chatId));
    }, KEY_ADDED_COALESCE_MS);
    this.#timers.add(timer);
  }

  /**
   * `portal:key_removed`: that session (`sessionId` null: every session of the user) left the key
   * ring (its session ended, or its user left or was removed). A share still waiting for it is
   * dropped, so no key of a later epoch is wrapped for it.
   */
  keyRemoved(chatId: number, userId: number, sessionId: number | null): void {
    const pending = this.#pendingShares.get(chatId);
    if (!pending) return;
    for (const [id, entry] of pending) {
      if (sessionId === null ? entry.userId === String(userId) : id === sessionId) pending.delete(id);
    }
  }

  /**
   * Checks that `ring` lists this session (when it does) with this session's public key. When it
   * lists another, the server holds that key for this session: the keying stops for good, and
   * `onReplaced` is told.
   * @throws E2ESessionError KEY_REPLACED in that case.
   */
  checkOwnKey(ring: KeyRing): void {
    const own = this.#sessionId === null ? undefined : String(this.#sessionId);
    if (own === undefined) return;
    for (const sessions of Object.values(ring)) {
      const listed = sessions[own];
      if (listed !== undefined && listed !== this.#o.publicKey) throw this.#replaced(listed);
    }
  }

  #replaced(listed: string): E2ESessionError {
    const error = new E2ESessionError(
      'KEY_REPLACED',
      `Another client registered a new key for session ${this.#sessionId}: envelopes for it no longer open here.`,
      { details: { sessionId: this.#sessionId, publicKey: listed } },
    );
    if (!this.#closed) {
      void this.close();
      this.#o.onReplaced(error);
    }
    return error;
  }

  /** Reads the ring (its check ends the keying when another key is listed for this session). */
  async #confirmOwnKey(chatId: number): Promise<void> {
    try {
      await this.#readKeys(chatId);
    } catch (error) {
      if (!isApiError(error, 'ERR_NOT_CHAT_MEMBER', 'ERR_CHAT_NOT_FOUND')) throw error;
    } finally {
      this.#confirming = false;
    }
  }

  forget(chatId: number): void {
    this.#pendingShares.delete(chatId);
    this.#holders.delete(chatId);
  }

  hasKey(chatId: number): boolean {
    return this.keys.current(chatId) !== undefined;
  }

  /** Runs a keying in the background: its failure becomes an `error` event. */
  background(chatId: number, run: Promise<unknown>): void {
    this.#track(chatId, run);
  }

  /** Keeps a background task until it settles (so `close()` can wait); a failure becomes an `error` event. */
  #track(chatId: number, task: Promise<unknown>): void {
    const settled = task
      .catch((error: unknown) => {
        if (error instanceof E2ESessionError) this.#emitError(error);
        else this.#error('BACKGROUND_FAILURE', `A key operation of chat ${chatId} failed.`, chatId, { cause: error });
      })
      .finally(() => this.#tasks.delete(settled));
    this.#tasks.add(settled);
  }

  /** Obtains the key of the current epoch (one run per chat at a time); true when held at the end. */
  ensure(chatId: number): Promise<boolean> {
    const running = this.#running.get(chatId);
    if (running) return running;
    const startEpoch = this.keys.epochOf(chatId) ?? 0;
    const run = this.#loop(chatId).finally(() => {
      this.#running.delete(chatId);
      // A rekey that arrived while this run was finishing still needs a key.
      const moved = (this.keys.epochOf(chatId) ?? 0) > startEpoch;
      if (moved && this.#o.isJoined(chatId) && !this.hasKey(chatId)) this.schedule(chatId);
    });
    this.#running.set(chatId, run);
    return run;
  }

  /**
   * {@link ensure} for a resync after a reconnection: a run already in flight may be waiting for a
   * `room:key` that was lost with the dropped socket, so the server's current envelope is read
   * first (which also ends that wait), then the run is joined or started.
   */
  async resync(chatId: number): Promise<boolean> {
    if (this.#running.has(chatId)) await this.refresh(chatId);
    return this.ensure(chatId);
  }

  /**
   * Waits (bounded) for the current key at `minEpoch` or later, keying the epoch if nobody has.
   * @throws E2ESessionError NO_CHAT_KEY on timeout; the server's errors (e.g. not a member).
   */
  async current(chatId: number, minEpoch: number): Promise<EpochKey> {
    const deadline = Date.now() + this.#o.keyWaitMs;
    if (!this.hasKey(chatId)) await this.ensure(chatId);
    const key = await this.keys.waitForCurrent(chatId, minEpoch, Math.max(0, deadline - Date.now()));
    if (key) return key;
    if (this.#closed) throw new E2ESessionError('CLOSED', 'This E2E session is closed.', { chatId });
    throw new E2ESessionError('NO_CHAT_KEY', `No key for the current epoch of chat ${chatId} arrived in time.`, {
      chatId,
    });
  }

  /** Asks the server for the current epoch and our envelope at it (after a refused send). */
  async refresh(chatId: number): Promise<void> {
    const state = await this.#readKeys(chatId);
    this.keys.raiseEpoch(chatId, state.epoch);
    if (state.envelope !== null) this.accept({ chatId, epoch: state.epoch, envelope: state.envelope, sender: null });
  }

  /**
   * After the server refused a send at `epoch` with ERR_NO_ROOM_KEY although the key is held (keys
   * imported into a new session): the server holds no envelope of that epoch for this session,
   * and only a holder can store one (`portal:key_added` asked them to, and a holder that comes
   * online shares on join). Waits (bounded) for it or for a newer epoch; false on timeout.
   */
  async awaitEnvelope(chatId: number, epoch: number): Promise<boolean> {
    const ready = () =>
      this.keys.hasEnvelope(chatId, epoch) || (this.keys.epochOf(chatId) ?? 0) > epoch ? true : undefined;
    return (await this.keys.waitFor(ready, this.#o.keyWaitMs)) === true;
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
      const now = await this.#ringAt(chatId, current.epoch);
      if (now === null || this.#closed) return;
      target = withinRing(ring, now);
    }
    await this.#shareListed(chatId, current, target, skipSelf);
  }

  /** Wraps `current` for the sessions of `target` (as the server lists them at its epoch) that lack it. */
  async #shareListed(chatId: number, current: EpochKey, target: KeyRing, skipSelf: boolean): Promise<void> {
    const skip = skipSelf && this.#sessionId !== null ? [this.#sessionId] : [];
    const share = buildKeyShare({
      keyRing: target,
      chatKey: current.key,
      chatId,
      epoch: current.epoch,
      skipSessionIds: skip,
    });
    this.#reportSkipped(chatId, share.skipped);
    // Sessions that already hold an envelope need no request (e.g. every one, right after keying).
    const known = this.#holders.get(chatId);
    const missing =
      known?.epoch === current.epoch
        ? share.envelopes.filter((e) => !known.sessions.has(e.session_id))
        : share.envelopes;
    for (const part of splitShare(missing, null)) {
      if (!(await this.#topUp(chatId, current.epoch, part))) return;
    }
  }

  /** Records sessions that hold an envelope at `epoch` (stored now, or already there). */
  #held(chatId: number, epoch: number, envelopes: KeyShareEnvelope[]): void {
    let known = this.#holders.get(chatId);
    if (known && known.epoch > epoch) return;
    if (!known || known.epoch < epoch) {
      known = { epoch, sessions: new Set() };
      this.#holders.set(chatId, known);
    }
    for (const e of envelopes) known.sessions.add(e.session_id);
  }

  /** Waits `ms` unless closed meanwhile; false when closed. */
  #pause(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#wakers.delete(done);
        resolve(!this.#closed);
      };
      const timer = setTimeout(done, ms);
      this.#wakers.add(done);
    });
  }

  /** One share request from a holder; false when the rest need not be tried (the epoch moved on). */
  async #topUp(chatId: number, epoch: number, envelopes: KeyShareEnvelope[]): Promise<boolean> {
    let narrowed = false;
    for (let attempt = 1; ; attempt++) {
      if (this.#closed) return false;
      try {
        await this.#o.client.shareKeys(chatId, { epoch, envelopes });
        this.#held(chatId, epoch, envelopes);
        return true;
      } catch (error) {
        if (isApiError(error, 'ERR_KEY_RING_CHANGED') && !narrowed) {
          // The server refuses the whole share when one session it names left the ring at this
          // epoch (its expiry, before the sweep ends it and rekeys): the others still lack the
          // key. Sent once more, to those still in the ring.
          narrowed = true;
          const still = await this.#stillInRing(chatId, epoch, envelopes);
          if (still === null) return false;
          if (still.length === 0) return true;
          envelopes = still;
          continue;
        }
        if (isApiError(error, 'ERR_EPOCH_MISMATCH', 'ERR_KEY_RING_CHANGED', 'ERR_EPOCH_ALREADY_KEYED')) return false;
        // An archived chat is read-only: its sessions keep the envelopes they have.
        if (isApiError(error, 'ERR_NOT_CHAT_MEMBER', 'ERR_CHAT_NOT_FOUND', 'ERR_CHAT_READ_ONLY')) return false;
        // The write limit is shared by the user's sessions: wait as asked, then send this part again.
        const retryAfter = isApiError(error, 'ERR_RATE_LIMITED') ? error.retryAfter : undefined;
        if (retryAfter !== undefined && attempt < TOP_UP_ATTEMPTS) {
          if (await this.#pause(retryAfter * 1000)) continue;
          return false;
        }
        this.#error('BACKGROUND_FAILURE', `Could not share the key of chat ${chatId}.`, chatId, { cause: error });
        return false;
      }
    }
  }

  /**
   * The envelopes of `envelopes` whose sessions are in the chat's key ring now (`GET …/keys`);
   * null when the chat moved past `epoch` (its next keying covers them) or the ring is unreadable.
   */
  async #stillInRing(chatId: number, epoch: number, envelopes: KeyShareEnvelope[]): Promise<KeyShareEnvelope[] | null> {
    const ring = await this.#ringAt(chatId, epoch);
    if (ring === null) return null;
    const inRing = new Set(Object.values(ring).flatMap((sessions) => Object.keys(sessions).map(Number)));
    return envelopes.filter((e) => inRing.has(e.session_id));
  }

  /**
   * The chat's key ring as the server lists it now (`GET …/keys`), when the chat is still at
   * `epoch`; null when it moved on (its next keying covers the ring) or the ring is unreadable.
   */
  async #ringAt(chatId: number, epoch: number): Promise<KeyRing | null> {
    let state: KeysAnswer;
    try {
      state = await this.#readKeys(chatId);
    } catch (error) {
      if (error instanceof E2ESessionError) this.#emitError(error);
      else if (!isApiError(error, 'ERR_NOT_CHAT_MEMBER', 'ERR_CHAT_NOT_FOUND')) {
        this.#error('BACKGROUND_FAILURE', `Could not read the key ring of chat ${chatId}.`, chatId, { cause: error });
      }
      return null;
    }
    this.keys.raiseEpoch(chatId, state.epoch);
    return state.epoch === epoch ? state.key_ring : null;
  }

  /**
   * `GET …/keys`, its answer checked: an epoch that is not a non-negative integer or a missing key
   * ring would be stored as the chat's epoch, or fail later where no caller can be told. A ring
   * listing this session with another public key ends the keying ({@link checkOwnKey}).
   * @throws E2ESessionError BAD_SERVER_ANSWER (nothing of the answer kept), KEY_REPLACED; the server's errors.
   */
  async #readKeys(chatId: number): Promise<KeysAnswer> {
    const state: unknown = await this.#o.client.chatKey(chatId);
    const problem = shapeProblem(KeysAnswerSchema, state);
    if (problem) {
      throw new E2ESessionError('BAD_SERVER_ANSWER', `The server's key state of chat ${chatId} is malformed.`, {
        chatId,
        details: { answer: 'GET /v1/portal/chats/{chat_id}/keys', path: problem.path, problem: problem.message },
      });
    }
    const answer = state as KeysAnswer;
    this.checkOwnKey(answer.key_ring);
    return answer;
  }

  /** Ends timers and waits; resolves when running keyings have stopped. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const wake of [...this.#wakers]) wake();
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    this.keys.cancelAll();
    await Promise.allSettled([...this.#running.values(), ...this.#tasks]);
  }

  async #loop(chatId: number): Promise<boolean> {
    const deadline = Date.now() + this.#o.keyWaitMs;
    /** The last attempt lost the keying race and its wait for `room:key` ran out. */
    let lostRace = false;
    for (let attempt = 0; attempt < this.#o.attempts && !this.#closed && Date.now() < deadline; attempt++) {
      lostRace = false;
      if (this.hasKey(chatId)) return true;
      const state = await this.#readKeys(chatId);
      this.keys.raiseEpoch(chatId, state.epoch);
      const epoch = state.epoch;
      if (this.keys.get(chatId, epoch)) continue;
      if (state.envelope !== null) {
        if (this.accept({ chatId, epoch, envelope: state.envelope, sender: null })) continue;
        return false; // The server never replaces an envelope: only the next epoch can help.
      }
      if (this.#sessionId === null) {
        throw new E2ESessionError('SESSION_UNKNOWN', 'This session’s key is not registered yet.', { chatId });
      }
      const keyed = await this.#keyEpoch(chatId, epoch, state.key_ring, deadline);
      // An archived chat takes no shares: an epoch nobody keyed there stays without a key.
      if (keyed === 'read-only') return false;
      if (keyed === 'taken') {
        // Someone keyed it first: their envelope for us comes as room:key (or the epoch moves on).
        const moved = () => ((this.keys.epochOf(chatId) ?? 0) > epoch ? true : undefined);
        lostRace = !(await this.keys.waitFor(() => this.keys.get(chatId, epoch) ?? moved(), deadline - Date.now()));
      }
    }
    // The winner's room:key may never come (it went with a dropped socket): the server holds our
    // envelope all the same, so read it once more before giving up.
    if (lostRace && !this.#closed && !this.hasKey(chatId)) await this.refresh(chatId);
    return this.hasKey(chatId);
  }

  /**
   * Makes a chat key and shares it with the whole ring: the first complete share keys the epoch.
   * A ring larger than one request is keyed by its first request (ours among its envelopes), and
   * the rest follow as top-ups once we hold the key. A share refused with ERR_RATE_LIMITED (the
   * user's write limit, shared by its sessions) is sent again after its `retry_after` when that
   * comes before `deadline`.
   */
  async #keyEpoch(
    chatId: number,
    epoch: number,
    ring: KeyRing,
    deadline: number,
  ): Promise<'keyed' | 'taken' | 'retry' | 'read-only'> {
    const chatKey = generateChatKey();
    const share = buildKeyShare({ keyRing: ring, chatKey, chatId, epoch });
    this.#reportSkipped(chatId, share.skipped);
    const [keying = [], ...rest] = splitShare(share.envelopes, this.#sessionId);
    let stored: number;
    for (let attempt = 1; ; attempt++) {
      try {
        stored = (await this.#o.client.shareKeys(chatId, { epoch, envelopes: keying })).stored;
        break;
      } catch (error) {
        if (isApiError(error, 'ERR_EPOCH_ALREADY_KEYED')) return 'taken';
        if (isApiError(error, 'ERR_CHAT_READ_ONLY')) return 'read-only';
        if (isApiError(error, 'ERR_KEY_RING_CHANGED', 'ERR_EPOCH_MISMATCH')) return 'retry';
        const retryAfter = isApiError(error, 'ERR_RATE_LIMITED') ? error.retryAfter : undefined;
        if (retryAfter === undefined || attempt >= TOP_UP_ATTEMPTS || Date.now() + retryAfter * 1000 >= deadline) {
          throw error;
        }
        if (!(await this.#pause(retryAfter * 1000))) return 'retry';
      }
    }
    // Our key is the epoch's key only when every envelope was stored. The server refuses a late
    // keying whole (409, as it names this session even when we hold the winner's envelope by
    // now); a partial store is checked anyway, as the key would otherwise be trusted wrongly.
    if (stored !== keying.length) {
      if (stored > 0) {
        // Sessions that still lacked an envelope got ours, whose key is not the epoch's key: they
        // cannot read the others until the next epoch. The server cannot tell the keys apart.
        this.#error(
          'KEY_CONFLICT',
          `A late keying of chat ${chatId} epoch ${epoch} reached ${stored} sessions.`,
          chatId,
          {
            details: { epoch, stored },
          },
        );
      }
      return 'retry';
    }
    this.#held(chatId, epoch, keying);
    this.keys.markEnvelope(chatId, epoch);
    this.#store(chatId, epoch, chatKey, 'keyed', this.#sessionId);
    for (const part of rest) if (!(await this.#topUp(chatId, epoch, part))) break;
    return 'keyed';
  }

  #store(chatId: number, epoch: number, key: Uint8Array, source: KeyEvent['source'], sender: number | null): void {
    if (!this.keys.store(chatId, epoch, key)) return;
    if (!this.#closed) this.#o.onKey({ chatId, epoch, source, senderSessionId: sender });
    if (this.keys.current(chatId)?.epoch === epoch) this.#track(chatId, this.#flushShares(chatId));
  }

  /**
   * Gives the current key to the sessions announced (`portal:key_added`) that lack it. An
   * announcement is only the server's word of some moment: one sent before a kick may arrive after
   * the kick's rekey, at the epoch that removed the member. So the ring is read once for the whole
   * batch, and only the sessions the server lists at the key's epoch get it, under the keys listed
   * there (none when the chat has moved on: its next keying covers them).
   */
  async #flushShares(chatId: number): Promise<void> {
    const pending = this.#pendingShares.get(chatId);
    const current = this.keys.current(chatId);
    if (!pending || pending.size === 0 || !current) return;
    this.#pendingShares.delete(chatId);
    const known = this.#holders.get(chatId);
    const announced: Record<string, Record<string, string>> = {};
    for (const [sessionId, { userId, publicKey }] of pending) {
      if (known?.epoch === current.epoch && known.sessions.has(sessionId)) continue;
      announced[userId] = { ...announced[userId], [String(sessionId)]: publicKey };
    }
    if (Object.keys(announced).length === 0 || this.#closed) return;
    const now = await this.#ringAt(chatId, current.epoch);
    if (now === null || this.#closed) return;
    await this.#shareListed(chatId, current, withinRing(announced, now), false);
  }

  #reportSkipped(chatId: number, skipped: SkippedSession[]): void {
    if (skipped.length > 0) {
      this.#error('SHARE_SKIPPED', `${skipped.length} key ring entries got no envelope.`, chatId, { details: skipped });
    }
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
