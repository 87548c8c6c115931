import { CHAT_KEY_BYTES } from '../crypto/constants.js';
import { assertBytes, assertId } from '../crypto/validate.js';

interface Waiter {
  check(): boolean;
  timer: ReturnType<typeof setTimeout>;
  cancel?: () => void;
}

/** The chat key of one epoch. */
export interface EpochKey {
  epoch: number;
  key: Uint8Array;
}

/**
 * The chat keys one session holds, by chat and epoch, with the newest epoch it knows of per chat,
 * and bounded waits for a key to arrive. Keys of past epochs are kept to read history. A key once
 * stored for an epoch is never replaced (the server never overwrites an envelope either).
 */
export class ChatKeyStore {
  readonly #keys = new Map<number, Map<number, Uint8Array>>();
  readonly #epochs = new Map<number, number>();
  /** Per chat, the newest epoch at which the server is known to hold this session's envelope. */
  readonly #envelopes = new Map<number, number>();
  readonly #waiters = new Set<Waiter>();
  #closed = false;

  /** The newest epoch known for the chat (from the server or a received key), if any. */
  epochOf(chatId: number): number | undefined {
    return this.#epochs.get(chatId);
  }

  /** Records that the chat is at least at `epoch`; returns true when that is news. */
  raiseEpoch(chatId: number, epoch: number): boolean {
    const known = this.#epochs.get(chatId);
    if (known !== undefined && known >= epoch) return false;
    this.#epochs.set(chatId, epoch);
    this.#notify();
    return true;
  }

  /**
   * Records that the server holds this session's envelope at `epoch` (it sent it, or stored our
   * keying share): the server takes messages from a session only at an epoch it holds one for.
   */
  markEnvelope(chatId: number, epoch: number): void {
    if ((this.#envelopes.get(chatId) ?? -1) >= epoch) return;
    this.#envelopes.set(chatId, epoch);
    this.#notify();
  }

  /** Whether the server is known to hold this session's envelope at `epoch`. */
  hasEnvelope(chatId: number, epoch: number): boolean {
    return this.#envelopes.get(chatId) === epoch;
  }

  get(chatId: number, epoch: number): Uint8Array | undefined {
    return this.#keys.get(chatId)?.get(epoch);
  }

  /** The key of the newest known epoch, when held. */
  current(chatId: number): EpochKey | undefined {
    const epoch = this.#epochs.get(chatId);
    if (epoch === undefined) return undefined;
    const key = this.get(chatId, epoch);
    return key ? { epoch, key } : undefined;
  }

  /** Stores a key; returns false when one was already held for that epoch (it is kept). */
  store(chatId: number, epoch: number, key: Uint8Array): boolean {
    let perChat = this.#keys.get(chatId);
    if (!perChat) {
      perChat = new Map();
      this.#keys.set(chatId, perChat);
    }
    if (perChat.has(epoch)) return false;
    perChat.set(epoch, key);
    const known = this.#epochs.get(chatId);
    if (known === undefined || epoch > known) this.#epochs.set(chatId, epoch);
    this.#notify();
    return true;
  }

  /** Every key held for the chat, by epoch (copies: wiping them leaves the held keys intact). */
  keysOf(chatId: number): Map<number, Uint8Array> {
    return new Map([...(this.#keys.get(chatId) ?? [])].map(([epoch, key]) => [epoch, key.slice()]));
  }

  /**
   * Stores kept keys (copies; held epochs are not replaced). Every entry is checked first, so a bad
   * one stores none of them.
   * @throws E2EError INVALID_INPUT for a chat id or epoch that is not a non-negative safe integer,
   *   or a key that is not 32 bytes.
   */
  import(chatId: number, keys: ReadonlyMap<number, Uint8Array>): void {
    assertId('chatId', chatId);
    for (const [epoch, key] of keys) {
      assertId('epoch', epoch);
      assertBytes('chat key', key, CHAT_KEY_BYTES);
    }
    for (const [epoch, key] of keys) this.store(chatId, epoch, key.slice());
  }

  /** The `epoch → key` lookup that `decryptMessage` takes. */
  lookup(chatId: number): (epoch: number) => Uint8Array | undefined {
    return (epoch) => this.get(chatId, epoch);
  }

  /**
   * Waits until `check` gives a value (checked now and after every change), at most `timeoutMs`;
   * resolves undefined on timeout or {@link cancelAll}.
   */
  waitFor<T>(check: () => T | undefined, timeoutMs: number): Promise<T | undefined> {
    const now = check();
    if (now !== undefined || timeoutMs <= 0 || this.#closed) return Promise.resolve(now);
    return new Promise((resolve) => {
      const waiter: Waiter = {
        check: () => {
          const value = check();
          if (value === undefined) return false;
          this.#finish(waiter);
          resolve(value);
          return true;
        },
        timer: setTimeout(() => {
          this.#finish(waiter);
          resolve(undefined);
        }, timeoutMs),
      };
      waiter.cancel = () => resolve(undefined);
      this.#waiters.add(waiter);
    });
  }

  /** Waits for the key of exactly this epoch. */
  waitForEpoch(chatId: number, epoch: number, timeoutMs: number): Promise<Uint8Array | undefined> {
    return this.waitFor(() => this.get(chatId, epoch), timeoutMs);
  }

  /** Waits until the key of the newest known epoch is held and that epoch is at least `minEpoch`. */
  waitForCurrent(chatId: number, minEpoch: number, timeoutMs: number): Promise<EpochKey | undefined> {
    return this.waitFor(() => {
      const current = this.current(chatId);
      return current && current.epoch >= minEpoch ? current : undefined;
    }, timeoutMs);
  }

  /** Ends every pending wait (they resolve undefined); later waits do not wait. */
  cancelAll(): void {
    this.#closed = true;
    for (const waiter of [...this.#waiters]) {
      this.#finish(waiter);
      waiter.cancel?.();
    }
  }

  #finish(waiter: Waiter): void {
    clearTimeout(waiter.timer);
    this.#waiters.delete(waiter);
  }

  #notify(): void {
    for (const waiter of [...this.#waiters]) waiter.check();
  }
}
