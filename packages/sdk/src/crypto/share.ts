import { wrapChatKey } from './envelope.js';
import { E2EError } from './errors.js';
import { publicKeyFromBase64 } from './keys.js';

/** The server's key ring of a chat: user id → session id → base64 public key (spec 2.9). */
export type KeyRing = Readonly<Record<string, Readonly<Record<string, string>>>>;

/** One element of `envelopes` in `POST /v1/portal/chats/{chat_id}/keys/share`. */
export interface KeyShareEnvelope {
  session_id: number;
  wrapped: string;
}

/** Why a key ring entry got no envelope. */
export type SkipReason = 'INVALID_SESSION_ID' | 'PUBLIC_KEY_INVALID' | 'DUPLICATE_SESSION';

/** A key ring entry that got no envelope (never silently: a client should log or surface it). */
export interface SkippedSession {
  user_id: string;
  session_id: string;
  reason: SkipReason;
}

/** Input of {@link buildKeyShare}. */
export interface BuildKeyShareParams {
  keyRing: KeyRing;
  chatKey: Uint8Array;
  chatId: number;
  epoch: number;
  /** Sessions that already hold an envelope at this epoch (e.g. when answering portal:key_added). */
  skipSessionIds?: Iterable<number>;
}

/** Output of {@link buildKeyShare}: `envelopes` is the request body's array, by session id. */
export interface KeyShare {
  envelopes: KeyShareEnvelope[];
  skipped: SkippedSession[];
}

const DECIMAL_ID = /^(?:0|[1-9][0-9]*)$/;

/**
 * Wraps the chat key for every session of the key ring (minus `skipSessionIds`), giving the
 * `envelopes` of `POST /v1/portal/chats/{chat_id}/keys/share`. Session ids are strings in the
 * ring and integers on the wire. Entries that cannot be served safely are reported in `skipped`
 * instead of failing the whole share: a session id that is not a decimal safe integer, a public
 * key that is not base64 of 32 bytes or is a low-order point (an envelope to it would be readable
 * by anyone), or a session id listed twice.
 * @throws E2EError INVALID_INPUT on a malformed chat key, chat id or epoch.
 */
export function buildKeyShare(params: BuildKeyShareParams): KeyShare {
  const skip = new Set(params.skipSessionIds ?? []);
  const seen = new Set<number>();
  const envelopes: KeyShareEnvelope[] = [];
  const skipped: SkippedSession[] = [];
  for (const [userId, sessions] of Object.entries(params.keyRing)) {
    for (const [sessionKey, publicKey] of Object.entries(sessions)) {
      const sessionId = parseSessionId(sessionKey);
      const entry = { user_id: userId, session_id: sessionKey };
      if (sessionId === null) {
        skipped.push({ ...entry, reason: 'INVALID_SESSION_ID' });
        continue;
      }
      if (seen.has(sessionId)) {
        skipped.push({ ...entry, reason: 'DUPLICATE_SESSION' });
        continue;
      }
      seen.add(sessionId);
      if (skip.has(sessionId)) continue;
      const wrapped = wrapFor(params, sessionId, publicKey);
      if (wrapped === null) skipped.push({ ...entry, reason: 'PUBLIC_KEY_INVALID' });
      else envelopes.push({ session_id: sessionId, wrapped });
    }
  }
  envelopes.sort((a, b) => a.session_id - b.session_id);
  return { envelopes, skipped };
}

function parseSessionId(text: string): number | null {
  if (!DECIMAL_ID.test(text)) return null;
  const id = Number(text);
  return Number.isSafeInteger(id) ? id : null;
}

function wrapFor(params: BuildKeyShareParams, sessionId: number, publicKey: string): string | null {
  try {
    const recipientPublicKey = publicKeyFromBase64(publicKey);
    return wrapChatKey({ ...params, recipientPublicKey, recipientSessionId: sessionId });
  } catch (error) {
    if (error instanceof E2EError && error.code === 'PUBLIC_KEY_INVALID') return null;
    throw error;
  }
}
