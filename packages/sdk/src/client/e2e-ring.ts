import type { KeyRing } from '@parlor/protocol';
import type { KeyShareEnvelope } from '../crypto/index.js';
import type { ParlorClient } from './api.js';
import type { ChatKeyStore } from './e2e-keys.js';
import { E2ESessionError } from './e2e-types.js';
import { isApiError } from './errors.js';
import { type KeysAnswer, KeysAnswerSchema, shapeProblem } from './server-events.js';

export interface RingReaderOptions {
  client: ParlorClient;
  keys: ChatKeyStore;
  /** This session's public key, base64. */
  publicKey: string;
  /** This session's id (null until the key registration answered). */
  sessionId: () => number | null;
  isClosed: () => boolean;
  /** The server lists this session with another key: stop the keying and tell (ChatKeyingOptions.onReplaced). */
  onReplaced: (error: E2ESessionError) => void;
  /** Reports a background failure as an `error` event. */
  report: (error: E2ESessionError) => void;
}

/**
 * How a ChatKeying reads a chat's key state and key ring from the server (`GET …/keys`), and
 * checks that each ring it reads lists this session with this session's own key.
 */
export class RingReader {
  readonly #o: RingReaderOptions;
  /** A ring read is checking an announcement of this session with another key. */
  #confirming = false;

  constructor(opts: RingReaderOptions) {
    this.#o = opts;
  }

  /**
   * The envelopes of `envelopes` whose sessions are in the chat's key ring now (`GET …/keys`);
   * null when the chat moved past `epoch` (its next keying covers them) or the ring is unreadable.
   */
  async stillInRing(chatId: number, epoch: number, envelopes: KeyShareEnvelope[]): Promise<KeyShareEnvelope[] | null> {
    const ring = await this.ringAt(chatId, epoch);
    if (ring === null) return null;
    const inRing = new Set(Object.values(ring).flatMap((sessions) => Object.keys(sessions).map(Number)));
    return envelopes.filter((e) => inRing.has(e.session_id));
  }

  /**
   * The chat's key ring as the server lists it now (`GET …/keys`), when the chat is still at
   * `epoch`; null when it moved on (its next keying covers the ring) or the ring is unreadable.
   */
  async ringAt(chatId: number, epoch: number): Promise<KeyRing | null> {
    let state: KeysAnswer;
    try {
      state = await this.readKeys(chatId);
    } catch (error) {
      if (error instanceof E2ESessionError) this.#o.report(error);
      else if (!isApiError(error, 'ERR_NOT_CHAT_MEMBER', 'ERR_CHAT_NOT_FOUND')) {
        this.#o.report(
          new E2ESessionError('BACKGROUND_FAILURE', `Could not read the key ring of chat ${chatId}.`, {
            chatId,
            cause: error,
          }),
        );
      }
      return null;
    }
    this.#o.keys.raiseEpoch(chatId, state.epoch);
    return state.epoch === epoch ? state.key_ring : null;
  }

  /**
   * `GET …/keys`, its answer checked: an epoch that is not a non-negative integer or a missing key
   * ring would be stored as the chat's epoch, or fail later where no caller can be told. A ring
   * listing this session with another public key ends the keying ({@link checkOwnKey}).
   * @throws E2ESessionError BAD_SERVER_ANSWER (nothing of the answer kept), KEY_REPLACED; the server's errors.
   */
  async readKeys(chatId: number): Promise<KeysAnswer> {
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

  /**
   * Checks that `ring` lists this session (when it does) with this session's public key. When it
   * lists another, the server holds that key for this session: the keying stops for good, and
   * `onReplaced` is told.
   * @throws E2ESessionError KEY_REPLACED in that case.
   */
  checkOwnKey(ring: KeyRing): void {
    const own = this.#o.sessionId() === null ? undefined : String(this.#o.sessionId());
    if (own === undefined) return;
    for (const sessions of Object.values(ring)) {
      const listed = sessions[own];
      if (listed !== undefined && listed !== this.#o.publicKey) throw this.#replaced(listed);
    }
  }

  #replaced(listed: string): E2ESessionError {
    const error = new E2ESessionError(
      'KEY_REPLACED',
      `Another client registered a new key for session ${this.#o.sessionId()}: envelopes for it no longer open here.`,
      { details: { sessionId: this.#o.sessionId(), publicKey: listed } },
    );
    if (!this.#o.isClosed()) this.#o.onReplaced(error);
    return error;
  }

  /**
   * An announcement named this session with another key: reads the ring (its check ends the keying
   * when another key is listed for this session). Undefined while a read is checking already.
   */
  confirmOwnKey(chatId: number): Promise<void> | undefined {
    if (this.#confirming) return undefined;
    this.#confirming = true;
    return this.#confirm(chatId);
  }

  async #confirm(chatId: number): Promise<void> {
    try {
      await this.readKeys(chatId);
    } catch (error) {
      if (!isApiError(error, 'ERR_NOT_CHAT_MEMBER', 'ERR_CHAT_NOT_FOUND')) throw error;
    } finally {
      this.#confirming = false;
    }
  }
}
