import { CHAT_KEY_BYTES, ENVELOPE_BYTES, ENVELOPE_LABEL, KEY_BYTES, NONCE_BYTES } from './constants.js';
import { bytesToBase64, tryBase64ToBytes, utf8Encode } from './encoding.js';
import { E2EError } from './errors.js';
import { aeadOpen, aeadSeal, hkdfSha256, randomBytes, x25519PublicKey, x25519SharedSecret } from './primitives.js';
import { assertBytes, assertId } from './validate.js';

/** What an envelope is bound to: it opens only for this chat, epoch and recipient session. */
export interface EnvelopeContext {
  chatId: number;
  epoch: number;
  recipientSessionId: number;
}

/** Input of {@link wrapChatKey}. */
export interface WrapChatKeyParams extends EnvelopeContext {
  chatKey: Uint8Array;
  recipientPublicKey: Uint8Array;
}

/** Input of {@link unwrapChatKey}. */
export interface UnwrapChatKeyParams extends EnvelopeContext {
  envelope: string;
  recipientPrivateKey: Uint8Array;
}

/** The random inputs of one envelope; injected only by test vectors. */
export interface EnvelopeRandomness {
  ephemeralPrivateKey: Uint8Array;
  nonce: Uint8Array;
}

/** AEAD associated data: UTF-8 of `parlor/v2/envelope|<chatId>|<epoch>|<recipientSessionId>`. */
export function envelopeAad(ctx: EnvelopeContext): Uint8Array {
  assertId('chatId', ctx.chatId);
  assertId('epoch', ctx.epoch);
  assertId('recipientSessionId', ctx.recipientSessionId);
  return utf8Encode(`${ENVELOPE_LABEL}|${ctx.chatId}|${ctx.epoch}|${ctx.recipientSessionId}`);
}

/** HKDF-SHA256(ikm = shared, salt = ephemeral_pub ‖ recipient_pub, info = "parlor/v2/envelope", 32). */
export function deriveEnvelopeKey(
  sharedSecret: Uint8Array,
  ephemeralPublicKey: Uint8Array,
  recipientPublicKey: Uint8Array,
): Uint8Array {
  const salt = new Uint8Array(2 * KEY_BYTES);
  salt.set(ephemeralPublicKey, 0);
  salt.set(recipientPublicKey, KEY_BYTES);
  return hkdfSha256(sharedSecret, salt, utf8Encode(ENVELOPE_LABEL), CHAT_KEY_BYTES);
}

/**
 * Deterministic core of {@link wrapChatKey}. Reusing randomness across envelopes breaks the
 * scheme; only the test vectors call this directly.
 */
export function wrapChatKeyWith(params: WrapChatKeyParams, randomness: EnvelopeRandomness): string {
  assertBytes('chatKey', params.chatKey, CHAT_KEY_BYTES);
  assertBytes('recipientPublicKey', params.recipientPublicKey, KEY_BYTES);
  assertBytes('ephemeralPrivateKey', randomness.ephemeralPrivateKey, KEY_BYTES);
  assertBytes('nonce', randomness.nonce, NONCE_BYTES);
  const aad = envelopeAad(params);
  const shared = x25519SharedSecret(randomness.ephemeralPrivateKey, params.recipientPublicKey);
  if (shared === null) throw new E2EError('PUBLIC_KEY_INVALID', 'recipient public key is a low-order point');
  const ephemeralPublicKey = x25519PublicKey(randomness.ephemeralPrivateKey);
  const key = deriveEnvelopeKey(shared, ephemeralPublicKey, params.recipientPublicKey);
  const sealed = aeadSeal(key, randomness.nonce, params.chatKey, aad);
  shared.fill(0);
  key.fill(0);
  const out = new Uint8Array(ENVELOPE_BYTES);
  out.set(ephemeralPublicKey, 0);
  out.set(randomness.nonce, KEY_BYTES);
  out.set(sealed, KEY_BYTES + NONCE_BYTES);
  return bytesToBase64(out);
}

/**
 * Seals a chat key to one recipient session (DESIGN.md 7): base64 of
 * `ephemeral_pub(32) ‖ nonce(24) ‖ XChaCha20-Poly1305(key, chat_key)`, 140 characters.
 * @throws E2EError INVALID_INPUT (bad lengths or ids), PUBLIC_KEY_INVALID (low-order recipient key).
 */
export function wrapChatKey(params: WrapChatKeyParams): string {
  const ephemeralPrivateKey = randomBytes(KEY_BYTES);
  try {
    return wrapChatKeyWith(params, { ephemeralPrivateKey, nonce: randomBytes(NONCE_BYTES) });
  } finally {
    ephemeralPrivateKey.fill(0);
  }
}

/**
 * Opens an envelope addressed to this session for this chat and epoch.
 * @returns the 32-byte chat key.
 * @throws E2EError ENVELOPE_INVALID on any malformation, tamper, wrong recipient or wrong context;
 *   INVALID_INPUT on a malformed private key or id.
 */
export function unwrapChatKey(params: UnwrapChatKeyParams): Uint8Array {
  assertBytes('recipientPrivateKey', params.recipientPrivateKey, KEY_BYTES);
  const aad = envelopeAad(params);
  const bytes = tryBase64ToBytes(params.envelope);
  if (bytes === null || bytes.length !== ENVELOPE_BYTES) {
    throw new E2EError('ENVELOPE_INVALID', `envelope must be base64 of ${ENVELOPE_BYTES} bytes`);
  }
  const ephemeralPublicKey = bytes.subarray(0, KEY_BYTES);
  const nonce = bytes.subarray(KEY_BYTES, KEY_BYTES + NONCE_BYTES);
  const sealed = bytes.subarray(KEY_BYTES + NONCE_BYTES);
  const shared = x25519SharedSecret(params.recipientPrivateKey, ephemeralPublicKey);
  if (shared === null) throw new E2EError('ENVELOPE_INVALID', 'envelope ephemeral key is a low-order point');
  const recipientPublicKey = x25519PublicKey(params.recipientPrivateKey);
  const key = deriveEnvelopeKey(shared, ephemeralPublicKey, recipientPublicKey);
  const chatKey = aeadOpen(key, nonce, sealed, aad);
  shared.fill(0);
  key.fill(0);
  if (chatKey === null) throw new E2EError('ENVELOPE_INVALID', 'envelope failed authentication');
  return chatKey;
}
