import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/** A random URL-safe token carrying `bytes` of entropy (32 bytes → 43 characters). */
export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString('base64url');
}

/** sha256 as hex: how long-lived secrets (session tokens, bot keys) are stored. */
export function sha256Hex(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

/** Constant-time string comparison. */
export function safeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  if (ab.length !== bb.length) {
    timingSafeEqual(ab, ab);
    return false;
  }
  return timingSafeEqual(ab, bb);
}

/**
 * A code of `length` symbols drawn uniformly from `alphabet` by rejection sampling, so no symbol
 * is more likely than another whatever the alphabet's size.
 */
export function randomCode(alphabet: string, length: number): string {
  const n = alphabet.length;
  // One random byte picks one symbol: with no symbols, or more than 256, no byte is ever accepted.
  if (n < 1 || n > 256) throw new RangeError(`randomCode needs an alphabet of 1 to 256 symbols (got ${n})`);
  const limit = 256 - (256 % n);
  let out = '';
  while (out.length < length) {
    for (const b of randomBytes(length * 2)) {
      if (b < limit && out.length < length) out += alphabet[b % n];
    }
  }
  return out;
}
