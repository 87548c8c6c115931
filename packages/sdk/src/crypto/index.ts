/** Parlor end-to-end encryption, protocol v2 (docs/e2e.md). */
export { type Bundle, parseBundle } from './bundle.js';
export { BUNDLE_VERSION, ENVELOPE_BYTES, MAX_CONTENT_CHARS } from './constants.js';
export { base64ToBytes, bytesToBase64 } from './encoding.js';
export {
  type EnvelopeContext,
  type UnwrapChatKeyParams,
  unwrapChatKey,
  type WrapChatKeyParams,
  wrapChatKey,
} from './envelope.js';
export { E2EError, E2EErrorCode } from './errors.js';
export {
  generateChatKey,
  generateKeyPair,
  type KeyPair,
  keyFingerprint,
  publicKeyFromBase64,
  publicKeyFromPrivateKey,
  publicKeyToBase64,
} from './keys.js';
export {
  type ChatKeyLookup,
  type DecryptedMessage,
  type DecryptMessageParams,
  decryptMessage,
  type EncryptMessageParams,
  encryptMessage,
  maxPlaintextBytes,
  maxPlaintextBytesForEpoch,
} from './message.js';
export {
  type BuildKeyShareParams,
  buildKeyShare,
  type KeyRing,
  type KeyShare,
  type KeyShareEnvelope,
  type SkippedSession,
  type SkipReason,
} from './share.js';
