import type { Envelope } from './e2e-keying.js';
import type { ChatKeyStore, EpochKey } from './e2e-keys.js';
import type { RingReader } from './e2e-ring.js';
import type { KeySharing } from './e2e-sharing.js';
import { E2ESessionError } from './e2e-types.js';

export interface KeyObtainingOptions {
  keys: ChatKeyStore;
  ring: RingReader;
  sharing: KeySharing;
  keyWaitMs: number;
  attempts: number;
  isJoined: (chatId: number) => boolean;
  /** This session's id (null until the key registration answered). */
  sessionId: () => number | null;
  isClosed: () => boolean;
  /** Opens an envelope addressed to this session (ChatKeying.accept). */
  accept: (e: Envelope) => boolean;
  /** Tries to key the chat's epoch after a random delay (ChatKeying.schedule). */
  schedule: (chatId: number) => void;
}

/**
 * How a ChatKeying obtains the key of a chat's current epoch: our envelope from the server, or a
 * keying of the epoch when nobody keyed it (first complete share wins; losers wait for `room:key`),
 * each wait bounded by `keyWaitMs`. One run per chat at a time.
 */
export class KeyObtaining {
  readonly #o: KeyObtainingOptions;
  readonly #running = new Map<number, Promise<boolean>>();

  constructor(opts: KeyObtainingOptions) {
    this.#o = opts;
  }

  /** Whether a run for the chat is in progress. */
  isRunning(chatId: number): boolean {
    return this.#running.has(chatId);
  }

  /** The runs in progress (`close()` waits for them). */
  runs(): Promise<boolean>[] {
    return [...this.#running.values()];
  }

  /** Obtains the key of the current epoch (one run per chat at a time); true when held at the end. */
  ensure(chatId: number): Promise<boolean> {
    const running = this.#running.get(chatId);
    if (running) return running;
    const startEpoch = this.#o.keys.epochOf(chatId) ?? 0;
    const run = this.#loop(chatId).finally(() => {
      this.#running.delete(chatId);
      // A rekey that arrived while this run was finishing still needs a key.
      const moved = (this.#o.keys.epochOf(chatId) ?? 0) > startEpoch;
      if (moved && this.#o.isJoined(chatId) && !this.#hasKey(chatId)) this.#o.schedule(chatId);
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
    if (!this.#hasKey(chatId)) await this.ensure(chatId);
    const key = await this.#o.keys.waitForCurrent(chatId, minEpoch, Math.max(0, deadline - Date.now()));
    if (key) return key;
    if (this.#o.isClosed()) throw new E2ESessionError('CLOSED', 'This E2E session is closed.', { chatId });
    throw new E2ESessionError('NO_CHAT_KEY', `No key for the current epoch of chat ${chatId} arrived in time.`, {
      chatId,
    });
  }

  /** Asks the server for the current epoch and our envelope at it (after a refused send). */
  async refresh(chatId: number): Promise<void> {
    const state = await this.#o.ring.readKeys(chatId);
    this.#o.keys.raiseEpoch(chatId, state.epoch);
    if (state.envelope !== null) this.#o.accept({ chatId, epoch: state.epoch, envelope: state.envelope, sender: null });
  }

  /**
   * After the server refused a send at `epoch` with ERR_NO_ROOM_KEY although the key is held (keys
   * imported into a new session): the server holds no envelope of that epoch for this session,
   * and only a holder can store one (`portal:key_added` asked them to, and a holder that comes
   * online shares on join). Waits (bounded) for it or for a newer epoch; false on timeout.
   */
  async awaitEnvelope(chatId: number, epoch: number): Promise<boolean> {
    const ready = () =>
      this.#o.keys.hasEnvelope(chatId, epoch) || (this.#o.keys.epochOf(chatId) ?? 0) > epoch ? true : undefined;
    return (await this.#o.keys.waitFor(ready, this.#o.keyWaitMs)) === true;
  }

  async #loop(chatId: number): Promise<boolean> {
    const deadline = Date.now() + this.#o.keyWaitMs;
    /** The last attempt lost the keying race and its wait for `room:key` ran out. */
    let lostRace = false;
    for (let attempt = 0; attempt < this.#o.attempts && !this.#o.isClosed() && Date.now() < deadline; attempt++) {
      lostRace = false;
      if (this.#hasKey(chatId)) return true;
      const state = await this.#o.ring.readKeys(chatId);
      this.#o.keys.raiseEpoch(chatId, state.epoch);
      const epoch = state.epoch;
      if (this.#o.keys.get(chatId, epoch)) continue;
      if (state.envelope !== null) {
        if (this.#o.accept({ chatId, epoch, envelope: state.envelope, sender: null })) continue;
        return false; // The server never replaces an envelope: only the next epoch can help.
      }
      if (this.#o.sessionId() === null) {
        throw new E2ESessionError('SESSION_UNKNOWN', 'This session’s key is not registered yet.', { chatId });
      }
      const keyed = await this.#o.sharing.keyEpoch(chatId, epoch, state.key_ring, deadline);
      // An archived chat takes no shares: an epoch nobody keyed there stays without a key.
      if (keyed === 'read-only') return false;
      if (keyed === 'taken') {
        // Someone keyed it first: their envelope for us comes as room:key (or the epoch moves on).
        const moved = () => ((this.#o.keys.epochOf(chatId) ?? 0) > epoch ? true : undefined);
        lostRace = !(await this.#o.keys.waitFor(
          () => this.#o.keys.get(chatId, epoch) ?? moved(),
          deadline - Date.now(),
        ));
      }
    }
    // The winner's room:key may never come (it went with a dropped socket): the server holds our
    // envelope all the same, so read it once more before giving up.
    if (lostRace && !this.#o.isClosed() && !this.#hasKey(chatId)) await this.refresh(chatId);
    return this.#hasKey(chatId);
  }

  #hasKey(chatId: number): boolean {
    return this.#o.keys.current(chatId) !== undefined;
  }
}
