import type { KeyRing } from '@parlor/protocol';
import { buildKeyShare, generateChatKey, type KeyShareEnvelope, type SkippedSession } from '../crypto/index.js';
import type { ParlorClient } from './api.js';
import type { ChatKeyStore, EpochKey } from './e2e-keys.js';
import type { RingReader } from './e2e-ring.js';
import { splitShare, withinRing } from './e2e-share.js';
import { E2ESessionError } from './e2e-types.js';
import { isApiError } from './errors.js';

/** Tries of one share request refused with ERR_RATE_LIMITED (each after its `retry_after`). */
const TOP_UP_ATTEMPTS = 5;

/** A session announced by `portal:key_added`, at the epoch this session knew of then. */
export type PendingShare = { userId: string; publicKey: string; epoch: number };

export interface KeySharingOptions {
  client: ParlorClient;
  keys: ChatKeyStore;
  ring: RingReader;
  /** This session's id (null until the key registration answered). */
  sessionId: () => number | null;
  isClosed: () => boolean;
  /** Stores the key this session made for an epoch it keyed (a `key` event, then its shares). */
  storeKeyed: (chatId: number, epoch: number, key: Uint8Array) => void;
  /** Reports a background failure as an `error` event. */
  report: (error: E2ESessionError) => void;
}

/**
 * How a ChatKeying gives keys away (DESIGN.md 7): keys a new epoch for the whole ring, and gives
 * the current key to sessions announced by `portal:key_added` or listed in a joined ring that
 * lack it, skipping those known to hold an envelope.
 */
export class KeySharing {
  readonly #o: KeySharingOptions;
  readonly #pendingShares = new Map<number, Map<number, PendingShare>>();
  /** Chats whose announcements have a {@link flush} scheduled (it clears the mark when it starts). */
  readonly #scheduled = new Set<number>();
  /** Sessions known to hold an envelope at a chat's newest epoch we shared at (so shares skip them). */
  readonly #holders = new Map<number, { epoch: number; sessions: Set<number> }>();
  readonly #wakers = new Set<() => void>();

  constructor(opts: KeySharingOptions) {
    this.#o = opts;
  }

  /**
   * Keeps a session announced by `portal:key_added` for the next {@link flush}; true when the
   * caller is to schedule that flush (none is). Sessions still waiting for a key do not count: a
   * flush that found no key leaves them waiting, and the next announcement schedules its own.
   */
  announce(chatId: number, sessionId: number, share: PendingShare): boolean {
    this.keep(chatId, sessionId, share);
    if (this.#scheduled.has(chatId)) return false;
    this.#scheduled.add(chatId);
    return true;
  }

  /** Keeps an announced session for the next {@link flush} without scheduling one (a join in flight). */
  keep(chatId: number, sessionId: number, share: PendingShare): void {
    const pending = this.#pendingShares.get(chatId) ?? new Map<number, PendingShare>();
    pending.set(sessionId, share);
    this.#pendingShares.set(chatId, pending);
  }

  /** The chats with announced sessions waiting for a {@link flush}. */
  waitingChats(): number[] {
    return [...this.#pendingShares.keys()];
  }

  /** Drops the announcements of a chat made before `epoch` (a `room:rekey`: see ChatKeying.rekey). */
  dropBefore(chatId: number, epoch: number): void {
    const pending = this.#pendingShares.get(chatId);
    for (const [sessionId, entry] of pending ?? []) if (entry.epoch < epoch) pending?.delete(sessionId);
  }

  /** Drops the announcement of a session (`sessionId` null: of every session of the user). */
  withdraw(chatId: number, userId: number, sessionId: number | null): void {
    const pending = this.#pendingShares.get(chatId);
    if (!pending) return;
    for (const [id, entry] of pending) {
      if (sessionId === null ? entry.userId === String(userId) : id === sessionId) pending.delete(id);
    }
  }

  forget(chatId: number): void {
    this.#pendingShares.delete(chatId);
    this.#scheduled.delete(chatId);
    this.#holders.delete(chatId);
  }

  /** Ends the pauses (at close). */
  wake(): void {
    for (const wake of [...this.#wakers]) wake();
  }

  /**
   * Gives the current key to the sessions announced (`portal:key_added`) that lack it. An
   * announcement is only the server's word of some moment: one sent before a kick may arrive after
   * the kick's rekey, at the epoch that removed the member. So the ring is read once for the whole
   * batch, and only the sessions the server lists at the key's epoch get it, under the keys listed
   * there (none when the chat has moved on: its next keying covers them). Without the current key
   * they wait: storing it (ChatKeying's #store, an import) flushes again.
   */
  async flush(chatId: number): Promise<void> {
    this.#scheduled.delete(chatId);
    const pending = this.#pendingShares.get(chatId);
    const current = this.#o.keys.current(chatId);
    if (!pending || pending.size === 0 || !current) return;
    this.#pendingShares.delete(chatId);
    const known = this.#holders.get(chatId);
    const announced: Record<string, Record<string, string>> = {};
    for (const [sessionId, { userId, publicKey }] of pending) {
      if (known?.epoch === current.epoch && known.sessions.has(sessionId)) continue;
      announced[userId] = { ...announced[userId], [String(sessionId)]: publicKey };
    }
    if (Object.keys(announced).length === 0 || this.#o.isClosed()) return;
    const now = await this.#o.ring.ringAt(chatId, current.epoch);
    if (now === null || this.#o.isClosed()) return;
    await this.shareListed(chatId, current, withinRing(announced, now), false);
  }

  /** Wraps `current` for the sessions of `target` (as the server lists them at its epoch) that lack it. */
  async shareListed(chatId: number, current: EpochKey, target: KeyRing, skipSelf: boolean): Promise<void> {
    const self = this.#o.sessionId();
    const skip = skipSelf && self !== null ? [self] : [];
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

  /**
   * Makes a chat key and shares it with the whole ring: the first complete share keys the epoch.
   * A ring larger than one request is keyed by its first request (ours among its envelopes), and
   * the rest follow as top-ups once we hold the key. A share refused with ERR_RATE_LIMITED (the
   * user's write limit, shared by its sessions) is sent again after its `retry_after` when that
   * comes before `deadline`.
   */
  async keyEpoch(
    chatId: number,
    epoch: number,
    ring: KeyRing,
    deadline: number,
  ): Promise<'keyed' | 'taken' | 'retry' | 'read-only'> {
    const chatKey = generateChatKey();
    const share = buildKeyShare({ keyRing: ring, chatKey, chatId, epoch });
    this.#reportSkipped(chatId, share.skipped);
    const [keying = [], ...rest] = splitShare(share.envelopes, this.#o.sessionId());
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
        this.#o.report(
          new E2ESessionError(
            'KEY_CONFLICT',
            `A late keying of chat ${chatId} epoch ${epoch} reached ${stored} sessions.`,
            {
              chatId,
              details: { epoch, stored },
            },
          ),
        );
      }
      return 'retry';
    }
    this.#held(chatId, epoch, keying);
    this.#o.keys.markEnvelope(chatId, epoch);
    this.#o.storeKeyed(chatId, epoch, chatKey);
    for (const part of rest) if (!(await this.#topUp(chatId, epoch, part))) break;
    return 'keyed';
  }

  /** One share request from a holder; false when the rest need not be tried (the epoch moved on). */
  async #topUp(chatId: number, epoch: number, envelopes: KeyShareEnvelope[]): Promise<boolean> {
    let narrowed = false;
    for (let attempt = 1; ; attempt++) {
      if (this.#o.isClosed()) return false;
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
          const still = await this.#o.ring.stillInRing(chatId, epoch, envelopes);
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
        this.#o.report(
          new E2ESessionError('BACKGROUND_FAILURE', `Could not share the key of chat ${chatId}.`, {
            chatId,
            cause: error,
          }),
        );
        return false;
      }
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
        resolve(!this.#o.isClosed());
      };
      const timer = setTimeout(done, ms);
      this.#wakers.add(done);
    });
  }

  #reportSkipped(chatId: number, skipped: SkippedSession[]): void {
    if (skipped.length > 0) {
      this.#o.report(
        new E2ESessionError('SHARE_SKIPPED', `${skipped.length} key ring entries got no envelope.`, {
          chatId,
          details: skipped,
        }),
      );
    }
  }
}
