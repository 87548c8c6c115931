/**
 * Failure codes of the E2E layer. Every function of `crypto/` throws only {@link E2EError} for
 * bad input or failed checks, so callers can switch on `code` instead of parsing messages.
 */
export const E2EErrorCode = {
  /** A caller passed something malformed (wrong key length, non-integer id, lone surrogate). */
  INVALID_INPUT: 'INVALID_INPUT',
  /** A public key is not base64 of 32 bytes, or is a low-order point (no shared secret). */
  PUBLIC_KEY_INVALID: 'PUBLIC_KEY_INVALID',
  /** An envelope is malformed, tampered with, or not for this recipient/chat/epoch/session. */
  ENVELOPE_INVALID: 'ENVELOPE_INVALID',
  /** A message `content` does not have the outer shape `{"v":2,"epoch":E,"ct":"…"}`. */
  BUNDLE_INVALID: 'BUNDLE_INVALID',
  /** A bundle failed authentication: wrong key, wrong chat, or tampered ciphertext. */
  DECRYPT_FAILED: 'DECRYPT_FAILED',
  /** An authentic bundle whose plaintext is not well-formed UTF-8 (a member sent garbage). */
  PLAINTEXT_INVALID: 'PLAINTEXT_INVALID',
  /** The bundle of this plaintext would exceed the server's 4096-character content limit. */
  MESSAGE_TOO_LONG: 'MESSAGE_TOO_LONG',
  /** The key lookup given to decryptMessage has no chat key for the bundle's epoch. */
  NO_KEY_FOR_EPOCH: 'NO_KEY_FOR_EPOCH',
} as const;
export type E2EErrorCode = (typeof E2EErrorCode)[keyof typeof E2EErrorCode];

/** The one error type of the E2E layer; `code` says what failed. */
export class E2EError extends Error {
  readonly code: E2EErrorCode;

  constructor(code: E2EErrorCode, message?: string, options?: ErrorOptions) {
    super(message ?? code, options);
    this.name = 'E2EError';
    this.code = code;
  }
}
