import type { Message } from '@parlor/protocol';
import type { E2EError, KeyPair } from '../crypto/index.js';
import type { ParlorClient } from './api.js';
import type { ParlorApiError } from './errors.js';
import type { ParlorSocket, RoomJoined } from './socket.js';

/** Failures of the E2E session layer (the crypto layer's own failures are `E2EError`). */
export const E2ESessionErrorCode = {
  /** No chat key for the current epoch arrived in time (nobody online holds it, or keying lost). */
  NO_CHAT_KEY: 'NO_CHAT_KEY',
  /** This session's id is not known: its key was not registered (the server's answer names the session). */
  SESSION_UNKNOWN: 'SESSION_UNKNOWN',
  /** The session was closed. */
  CLOSED: 'CLOSED',
  /**
   * The server lists this session with another public key: another client on the same login
   * session (a second browser tab sharing its cookie) registered a new key for it, so envelopes
   * for it no longer open here. The session has closed (`closed {reason: 'key_replaced'}`).
   * `details`: `{sessionId, publicKey}` (the key the server lists now).
   */
  KEY_REPLACED: 'KEY_REPLACED',
  /** `decrypt` was given a system message (it has no ciphertext). */
  SYSTEM_MESSAGE: 'SYSTEM_MESSAGE',
  /** An envelope addressed to this session did not open (tampered, or wrapped for another key). */
  ENVELOPE_REJECTED: 'ENVELOPE_REJECTED',
  /** Key ring entries got no envelope (bad public keys); see `details`. */
  SHARE_SKIPPED: 'SHARE_SKIPPED',
  /**
   * The server stored only part of this session's keying share, so the sessions that got an
   * envelope from it hold a key other than the epoch's. Parlor's server refuses a late keying
   * whole (409), so this reports a server that does not.
   */
  KEY_CONFLICT: 'KEY_CONFLICT',
  /** A background step (keying, sharing, rejoining) failed; `cause` has the error. */
  BACKGROUND_FAILURE: 'BACKGROUND_FAILURE',
  /**
   * A server event whose payload does not have the protocol's shape (e.g. `null`, an epoch sent as
   * a string): it was dropped, nothing was done with it. `details`: `{event, path, problem}`.
   */
  BAD_SERVER_EVENT: 'BAD_SERVER_EVENT',
  /**
   * An answer the E2E layer relies on does not have the protocol's shape (`GET …/keys` without an
   * integer epoch or a key ring, a `room:join` acknowledgement likewise): nothing of it was kept.
   * Thrown to the caller waiting for it, else reported as an `error` event. `details`:
   * `{answer, path, problem}`.
   */
  BAD_SERVER_ANSWER: 'BAD_SERVER_ANSWER',
} as const;
export type E2ESessionErrorCode = (typeof E2ESessionErrorCode)[keyof typeof E2ESessionErrorCode];

export class E2ESessionError extends Error {
  readonly code: E2ESessionErrorCode;
  readonly chatId: number | undefined;
  readonly details: unknown;

  constructor(
    code: E2ESessionErrorCode,
    message: string,
    opts: { chatId?: number; cause?: unknown; details?: unknown } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'E2ESessionError';
    this.code = code;
    this.chatId = opts.chatId;
    this.details = opts.details;
  }
}

/** A chat message as this session reads it. */
export type ChatEntry =
  | { kind: 'user'; chatId: number; message: Message; epoch: number; plaintext: string }
  | { kind: 'system'; chatId: number; message: Message }
  /** A user message this session cannot open: `error.code` is `NO_KEY_FOR_EPOCH` for epochs it never held. */
  | { kind: 'undecryptable'; chatId: number; message: Message; error: E2EError };

/** Events of {@link E2EChatSession}. */
export interface E2EChatSessionEvents {
  /** A `message:new`, decrypted (in arrival order per chat). */
  message: (entry: ChatEntry) => void;
  /**
   * Messages were deleted (`message:bulk_deleted`; `deletedBy`: the user who deleted them): remove
   * them from what is shown. Their ids stay tombstones for 2 minutes: a `message:new` of one that
   * arrives later (another server node sent it, docs/api.md Cluster mode) is dropped, as is one
   * still waiting for its key.
   */
  deleted: (e: { chatId: number; ids: string[]; deletedBy: number }) => void;
  /** A chat key was obtained: from an envelope (`senderSessionId` when known) or made here. */
  key: (e: { chatId: number; epoch: number; source: 'envelope' | 'keyed'; senderSessionId: number | null }) => void;
  /**
   * The membership ended. `reason` as the server's `room:left` gives it (docs/api.md): `left` (the
   * user left, on any of its sessions), `kicked`, `banned`, `deleted` (the chat was deleted), or
   * `removed` (the server found the user no longer a member when it restored a recovered
   * connection). The session also reports `removed` itself when a resync after a reconnection
   * found the user no longer a member (its `room:left` was missed).
   */
  left: (e: { chatId: number; reason: string }) => void;
  /**
   * The socket disconnected (`reason` as Socket.IO gives it: `io server disconnect` when the server
   * dropped it, `transport close`, `ping timeout`, …). It reconnects by itself (see `reconnected`);
   * meanwhile nothing arrives, while `send` (HTTP) still works.
   */
  disconnected: (e: { reason: string }) => void;
  /**
   * The socket is connected again, in `chats`. `recovered`: the server restored its rooms and
   * replayed the events it missed (when a drop had cut a resync short, the session first entered
   * the chats that resync had not). Otherwise the session re-entered `chats` itself before this
   * event, and what was sent to them meanwhile is not replayed: read it with `history` (the keys
   * of epochs that passed meanwhile may be missing, as for any gap).
   */
  reconnected: (e: { recovered: boolean; chats: number[] }) => void;
  /**
   * The session ended: `close()` (`reason: 'closed'`), the server refused its session for good on
   * a reconnection (`reason: 'refused'`, `code` `ERR_UNAUTHENTICATED` after a logout, an eviction
   * or a ban), or the socket came back as another login session (`reason: 'session_changed'`: the
   * cookie it sends changed while it was away, as a second login in another tab of the same browser
   * does; the server gave it none of this session's rooms, and this session's key and envelopes
   * belong to the old one), or another client on the same login session (a second tab sharing its
   * cookie) registered a new key for it (`reason: 'key_replaced'`, `code` `KEY_REPLACED`: the
   * server lists that key for this session now, so no envelope opens here any more; tabs that
   * share a login session must share one keypair, `keyPair`). Message iterators end; open a new
   * session (it registers a new key).
   */
  closed: (e: {
    reason: 'closed' | 'refused' | 'session_changed' | 'key_replaced';
    code?: string;
    error?: ParlorApiError | E2ESessionError;
  }) => void;
  /** A background failure; never thrown, since no caller is waiting for it. */
  error: (error: E2ESessionError) => void;
}

export interface E2EChatSessionOptions {
  /** A logged-in client (its session cookie authenticates the socket too). */
  client: ParlorClient;
  /** An open socket of the same session; by default one is opened, and `close()` closes it. */
  socket?: ParlorSocket;
  /**
   * This session's X25519 keypair (default: a fresh one). The private key never leaves this object.
   * Every E2E session on one login session (browser tabs sharing its cookie) must use the same
   * keypair: a session with another one replaces the key of the first, which then closes
   * (`closed {reason: 'key_replaced'}`).
   */
  keyPair?: KeyPair;
  /** Longest wait for a chat key: in `join`, `send`, and before giving up on an incoming message (ms, default 5000). */
  keyWaitMs?: number;
  /** Upper bound of the random delay before trying to key a new epoch after `room:rekey` (ms, default 300). */
  rekeyJitterMs?: number;
  /** Keying attempts while the key ring keeps changing (default 5). */
  keyingAttempts?: number;
  /** On join, give the current key to ring sessions that lack it (idempotent on the server; default true). */
  shareOnJoin?: boolean;
}

export interface JoinOptions {
  /** Wait (at most `keyWaitMs`) until the current chat key is held (default true). */
  waitForKey?: boolean;
}

/** `room:join`'s answer, plus whether this session holds the current chat key. */
export type JoinedChat = RoomJoined & { hasKey: boolean };
