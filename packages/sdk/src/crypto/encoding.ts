import { E2EError } from './errors.js';

/**
 * Standard base64 (RFC 4648 section 4: `+` and `/`, `=` padding), strictly: no whitespace, no
 * missing padding, no URL-safe letters and no non-canonical trailing bits, so each byte string
 * has exactly one accepted text form. Uses atob/btoa, present in browsers and Node ≥ 16.
 */
const BASE64_PATTERN = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const CHUNK = 0x8000;

/** Encodes bytes as standard padded base64. */
export function bytesToBase64(bytes: Uint8Array): string {
  let binary = '';
  for (let i = 0; i < bytes.length; i += CHUNK) {
    binary += String.fromCharCode(...bytes.subarray(i, i + CHUNK));
  }
  return btoa(binary);
}

/** Decodes strict standard base64; null when the text is not the canonical encoding of any bytes. */
export function tryBase64ToBytes(text: string): Uint8Array | null {
  if (!BASE64_PATTERN.test(text)) return null;
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  // Non-zero unused bits in the last character decode fine but are not canonical.
  if (bytesToBase64(bytes) !== text) return null;
  return bytes;
}

/**
 * Decodes strict standard base64, optionally requiring an exact decoded length.
 * @throws E2EError INVALID_INPUT when the text is not canonical base64 (of that length).
 */
export function base64ToBytes(text: string, expectedLength?: number): Uint8Array {
  const bytes = tryBase64ToBytes(text);
  if (bytes === null) throw new E2EError('INVALID_INPUT', 'not canonical standard base64');
  if (expectedLength !== undefined && bytes.length !== expectedLength) {
    throw new E2EError('INVALID_INPUT', `expected base64 of ${expectedLength} bytes, got ${bytes.length}`);
  }
  return bytes;
}

const encoder = new TextEncoder();
// fatal: reject invalid UTF-8; ignoreBOM: keep a leading U+FEFF, so round trips are exact.
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const LONE_SURROGATE = /\p{Surrogate}/u;

/**
 * UTF-8 of a well-formed string.
 * @throws E2EError INVALID_INPUT on a lone surrogate (it would not survive the round trip).
 */
export function utf8Encode(text: string): Uint8Array {
  if (LONE_SURROGATE.test(text)) throw new E2EError('INVALID_INPUT', 'text holds a lone surrogate');
  return encoder.encode(text);
}

/** Strict UTF-8 decoding; null on malformed input. */
export function tryUtf8Decode(bytes: Uint8Array): string | null {
  try {
    return decoder.decode(bytes);
  } catch {
    return null;
  }
}
