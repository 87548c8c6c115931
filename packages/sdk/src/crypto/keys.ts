import { CHAT_KEY_BYTES, KEY_BYTES } from './constants.js';
import { bytesToBase64, tryBase64ToBytes } from './encoding.js';
import { E2EError } from './errors.js';
import { randomBytes, sha256Digest, x25519PublicKey } from './primitives.js';
import { assertBytes } from './validate.js';

/** An X25519 keypair: one per session (spec 2.9). The private key never leaves the device. */
export interface KeyPair {
  /** 32 bytes; registered with `POST /v1/portal/keys` as base64. */
  publicKey: Uint8Array;
  /** 32 random bytes (clamped when used, RFC 7748). */
  privateKey: Uint8Array;
}

/** Generates a fresh X25519 keypair for a session. */
export function generateKeyPair(): KeyPair {
  const privateKey = randomBytes(KEY_BYTES);
  return { privateKey, publicKey: x25519PublicKey(privateKey) };
}

/** The public key of a stored private key (e.g. to check the server still holds ours). */
export function publicKeyFromPrivateKey(privateKey: Uint8Array): Uint8Array {
  assertBytes('privateKey', privateKey, KEY_BYTES);
  return x25519PublicKey(privateKey);
}

/** The wire form of a public key: standard padded base64 of the 32 bytes (44 characters). */
export function publicKeyToBase64(publicKey: Uint8Array): string {
  assertBytes('publicKey', publicKey, KEY_BYTES);
  return bytesToBase64(publicKey);
}

/** X25519's field prime, 2^255 - 19. */
const FIELD_PRIME = 2n ** 255n - 19n;

/**
 * Whether 32 bytes are an X25519 public key as X25519 writes it: the little-endian u below the
 * field prime, so the top bit of the last byte is clear. RFC 7748 section 5 ignores that bit and
 * reduces u, so any other text of the same u is the same key; the server refuses such texts at
 * registration (docs/e2e.md, "Keys per session"), and this agrees with it.
 */
function isCanonicalPublicKey(bytes: Uint8Array): boolean {
  let u = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) u = (u << 8n) | BigInt(bytes[i] ?? 0);
  return u < FIELD_PRIME;
}

/**
 * Parses a public key from the key ring.
 * @throws E2EError PUBLIC_KEY_INVALID unless the text is canonical base64 of exactly 32 bytes that
 * write a key in its canonical form (the top bit of the last byte clear, u below 2^255 - 19).
 */
export function publicKeyFromBase64(text: string): Uint8Array {
  const bytes = tryBase64ToBytes(text);
  if (bytes === null || bytes.length !== KEY_BYTES) {
    throw new E2EError('PUBLIC_KEY_INVALID', 'public key must be base64 of exactly 32 bytes');
  }
  if (!isCanonicalPublicKey(bytes)) {
    throw new E2EError('PUBLIC_KEY_INVALID', 'public key must be in its canonical form (u below 2^255 - 19)');
  }
  return bytes;
}

/** A fresh random 32-byte chat key for one epoch of one chat. */
export function generateChatKey(): Uint8Array {
  return randomBytes(CHAT_KEY_BYTES);
}

/**
 * A short fingerprint for comparing a session's public key out of band (the defence against a
 * server that substitutes keys): the first 16 bytes of SHA-256(public key), as 8 groups of
 * 4 lower-case hex digits, e.g. `3f2a 9c01 …`. Accepts the raw key or its base64 form.
 */
export function keyFingerprint(publicKey: Uint8Array | string): string {
  const key = typeof publicKey === 'string' ? publicKeyFromBase64(publicKey) : publicKey;
  assertBytes('publicKey', key, KEY_BYTES);
  const digest = sha256Digest(key).subarray(0, 16);
  const hex = Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
  return hex.match(/.{4}/g)?.join(' ') ?? hex;
}
