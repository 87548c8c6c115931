import { decodeBundle, formatBundle } from './bundle.js';
import { CHAT_KEY_BYTES, MAX_CONTENT_CHARS, MESSAGE_LABEL, NONCE_BYTES, TAG_BYTES } from './constants.js';
import { tryUtf8Decode, utf8Encode } from './encoding.js';
import { E2EError } from './errors.js';
import { aeadOpen, aeadSeal, randomBytes } from './primitives.js';
import { assertBytes, assertId } from './validate.js';

/** Input of {@link encryptMessage}. */
export interface EncryptMessageParams {
  chatKey: Uint8Array;
  chatId: number;
  epoch: number;
  plaintext: string;
}

/** Finds the chat key of an epoch; undefined when this client has none. */
export type ChatKeyLookup = (epoch: number) => Uint8Array | undefined;

/** Input of {@link decryptMessage}: the chat key, or a lookup by the bundle's epoch. */
export interface DecryptMessageParams {
  chatKey: Uint8Array | ChatKeyLookup;
  chatId: number;
  content: string;
}

/** Output of {@link decryptMessage}. */
export interface DecryptedMessage {
  epoch: number;
  plaintext: string;
}

/** `{"v":2,"epoch":` + `,"ct":"` + `"}`: the characters around the epoch digits and the base64. */
const BUNDLE_OVERHEAD_CHARS = 24;

/** AEAD associated data: UTF-8 of `parlor/v2/message|<chatId>|<epoch>`. */
export function messageAad(chatId: number, epoch: number): Uint8Array {
  assertId('chatId', chatId);
  assertId('epoch', epoch);
  return utf8Encode(`${MESSAGE_LABEL}|${chatId}|${epoch}`);
}

/** Largest UTF-8 plaintext (bytes) whose bundle at this epoch fits in the 4096-character content. */
export function maxPlaintextBytesForEpoch(epoch: number): number {
  assertId('epoch', epoch);
  const base64Chars = MAX_CONTENT_CHARS - BUNDLE_OVERHEAD_CHARS - String(epoch).length;
  const ctBytes = Math.floor(base64Chars / 4) * 3;
  return Math.max(0, ctBytes - NONCE_BYTES - TAG_BYTES);
}

/** Largest UTF-8 plaintext (bytes) that fits in a message at any epoch of up to 9 digits: 3005. */
export const maxPlaintextBytes: number = maxPlaintextBytesForEpoch(999_999_999);

/** Deterministic core of {@link encryptMessage}; only test vectors pass the nonce. */
export function encryptMessageWith(params: EncryptMessageParams, nonce: Uint8Array): string {
  assertBytes('chatKey', params.chatKey, CHAT_KEY_BYTES);
  assertBytes('nonce', nonce, NONCE_BYTES);
  const aad = messageAad(params.chatId, params.epoch);
  const plaintext = utf8Encode(params.plaintext);
  const limit = maxPlaintextBytesForEpoch(params.epoch);
  if (plaintext.length > limit) {
    throw new E2EError('MESSAGE_TOO_LONG', `message is ${plaintext.length} bytes of UTF-8; at most ${limit} fit`);
  }
  return formatBundle(params.epoch, nonce, aeadSeal(params.chatKey, nonce, plaintext, aad));
}

/**
 * Encrypts a chat message into the `content` string `{"v":2,"epoch":E,"ct":"…"}`.
 * @throws E2EError MESSAGE_TOO_LONG (over {@link maxPlaintextBytesForEpoch}), INVALID_INPUT.
 */
export function encryptMessage(params: EncryptMessageParams): string {
  return encryptMessageWith(params, randomBytes(NONCE_BYTES));
}

/**
 * Decrypts a message `content` of this chat.
 * @throws E2EError BUNDLE_INVALID (shape), NO_KEY_FOR_EPOCH (lookup had none), DECRYPT_FAILED
 *   (wrong key or chat, or tampered), PLAINTEXT_INVALID (authentic but not UTF-8), INVALID_INPUT.
 */
export function decryptMessage(params: DecryptMessageParams): DecryptedMessage {
  assertId('chatId', params.chatId);
  const bundle = decodeBundle(params.content);
  const chatKey = typeof params.chatKey === 'function' ? params.chatKey(bundle.epoch) : params.chatKey;
  if (chatKey === undefined) throw new E2EError('NO_KEY_FOR_EPOCH', `no chat key for epoch ${bundle.epoch}`);
  assertBytes('chatKey', chatKey, CHAT_KEY_BYTES);
  const opened = aeadOpen(chatKey, bundle.nonce, bundle.sealed, messageAad(params.chatId, bundle.epoch));
  if (opened === null) throw new E2EError('DECRYPT_FAILED', 'message failed authentication');
  const plaintext = tryUtf8Decode(opened);
  if (plaintext === null) throw new E2EError('PLAINTEXT_INVALID', 'message plaintext is not UTF-8');
  return { epoch: bundle.epoch, plaintext };
}
