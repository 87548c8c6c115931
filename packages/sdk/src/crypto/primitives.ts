import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { x25519 } from '@noble/curves/ed25519.js';
import { hkdf } from '@noble/hashes/hkdf.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { randomBytes as nobleRandomBytes } from '@noble/hashes/utils.js';

/**
 * The only place that touches the primitives, so the protocol files read as the spec does.
 * Failures come back as null; callers turn them into the E2EError code of their layer.
 */

/** Cryptographically secure random bytes (Web Crypto getRandomValues, in browsers and Node). */
export function randomBytes(length: number): Uint8Array {
  return nobleRandomBytes(length);
}

/** X25519 public key of a 32-byte private key (clamped as RFC 7748 says). */
export function x25519PublicKey(privateKey: Uint8Array): Uint8Array {
  return x25519.getPublicKey(privateKey);
}

/**
 * X25519 shared secret, or null for a low-order public key. noble rejects the low-order points
 * before the ladder; the all-zero check is kept as a second line (RFC 7748 section 6.1).
 */
export function x25519SharedSecret(privateKey: Uint8Array, publicKey: Uint8Array): Uint8Array | null {
  let shared: Uint8Array;
  try {
    shared = x25519.getSharedSecret(privateKey, publicKey);
  } catch {
    return null;
  }
  let bits = 0;
  for (const byte of shared) bits |= byte;
  return bits === 0 ? null : shared;
}

/** HKDF-SHA256 (RFC 5869). */
export function hkdfSha256(ikm: Uint8Array, salt: Uint8Array, info: Uint8Array, length: number): Uint8Array {
  return hkdf(sha256, ikm, salt, info, length);
}

/** SHA-256. */
export function sha256Digest(data: Uint8Array): Uint8Array {
  return sha256(data);
}

/** XChaCha20-Poly1305 encryption; the output is ciphertext ‖ tag. */
export function aeadSeal(key: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array, aad: Uint8Array): Uint8Array {
  return xchacha20poly1305(key, nonce, aad).encrypt(plaintext);
}

/** XChaCha20-Poly1305 decryption; null when the tag does not verify. */
export function aeadOpen(key: Uint8Array, nonce: Uint8Array, sealed: Uint8Array, aad: Uint8Array): Uint8Array | null {
  try {
    return xchacha20poly1305(key, nonce, aad).decrypt(sealed);
  } catch {
    return null;
  }
}
