import { BUNDLE_VERSION, NONCE_BYTES, TAG_BYTES } from './constants.js';
import { bytesToBase64, tryBase64ToBytes } from './encoding.js';
import { E2EError } from './errors.js';

/** The outer shape of a message `content` (spec 2.9): the server sees only this. */
export interface Bundle {
  v: typeof BUNDLE_VERSION;
  /** The chat key generation the message was sealed under. */
  epoch: number;
  /** Standard base64 of nonce(24) ‖ ciphertext ‖ tag(16). */
  ct: string;
}

/** A bundle with its `ct` decoded. */
export interface DecodedBundle extends Bundle {
  nonce: Uint8Array;
  sealed: Uint8Array;
}

const KEYS = ['ct', 'epoch', 'v'];

function invalid(why: string): E2EError {
  return new E2EError('BUNDLE_INVALID', `message content is not a v2 bundle: ${why}`);
}

/**
 * Checks the outer shape and decodes `ct`: a JSON object with exactly the keys `v` (2), `epoch`
 * (a non-negative safe integer) and `ct` (canonical standard base64 of at least nonce + tag,
 * 40 bytes). Whitespace and key order are not checked; the length limit is not either.
 * @throws E2EError BUNDLE_INVALID.
 */
export function decodeBundle(content: string): DecodedBundle {
  let value: unknown;
  try {
    value = JSON.parse(content);
  } catch {
    throw invalid('not JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalid('not an object');
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  if (keys.length !== KEYS.length || keys.some((k, i) => k !== KEYS[i])) throw invalid('keys must be v, epoch, ct');
  const { v, epoch, ct } = record;
  if (v !== BUNDLE_VERSION) throw invalid('v must be 2');
  if (typeof epoch !== 'number' || !Number.isSafeInteger(epoch) || epoch < 0) throw invalid('bad epoch');
  if (typeof ct !== 'string') throw invalid('ct must be a string');
  const bytes = tryBase64ToBytes(ct);
  if (bytes === null) throw invalid('ct must be standard base64');
  if (bytes.length < NONCE_BYTES + TAG_BYTES) throw invalid('ct too short');
  return { v: BUNDLE_VERSION, epoch, ct, nonce: bytes.subarray(0, NONCE_BYTES), sealed: bytes.subarray(NONCE_BYTES) };
}

/**
 * Checks only the outer shape of a message `content` (what a server may check; see
 * {@link decodeBundle} for the rules) and returns it.
 * @throws E2EError BUNDLE_INVALID.
 */
export function parseBundle(content: string): Bundle {
  const { v, epoch, ct } = decodeBundle(content);
  return { v, epoch, ct };
}

/** Serialises exactly `{"v":2,"epoch":E,"ct":"…"}` (that key order, no spaces). */
export function formatBundle(epoch: number, nonce: Uint8Array, sealed: Uint8Array): string {
  const bytes = new Uint8Array(nonce.length + sealed.length);
  bytes.set(nonce, 0);
  bytes.set(sealed, nonce.length);
  return `{"v":${BUNDLE_VERSION},"epoch":${epoch},"ct":"${bytesToBase64(bytes)}"}`;
}
