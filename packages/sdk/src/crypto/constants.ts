/** Wire constants of the Parlor E2E protocol, version 2 (docs/e2e.md). */

/** Bundle format version carried in `v`. */
export const BUNDLE_VERSION = 2;
/** HKDF info and prefix of the envelope associated data. */
export const ENVELOPE_LABEL = 'parlor/v2/envelope';
/** Prefix of the message associated data. */
export const MESSAGE_LABEL = 'parlor/v2/message';

/** X25519 key length, private and public. */
export const KEY_BYTES = 32;
/** Chat keys are 32 random bytes (an XChaCha20-Poly1305 key). */
export const CHAT_KEY_BYTES = 32;
/** XChaCha20 nonce length. */
export const NONCE_BYTES = 24;
/** Poly1305 tag length. */
export const TAG_BYTES = 16;
/** ephemeral_pub(32) ‖ nonce(24) ‖ sealed chat key(32 + 16). */
export const ENVELOPE_BYTES = KEY_BYTES + NONCE_BYTES + CHAT_KEY_BYTES + TAG_BYTES;
/** Spec 4.6 and section 8: message content is at most 4096 characters. */
export const MAX_CONTENT_CHARS = 4096;
