import { INT32_MAX } from '@parlor/protocol';

/** nonce (24) ‖ ciphertext ‖ tag (16): the fewest bytes a `ct` holds, an empty message's (docs/e2e.md). */
export const BUNDLE_CT_MIN_BYTES = 24 + 16;

/**
 * Exactly what the SDK writes (docs/e2e.md "Message bundles"): these keys in this order, no
 * whitespace, no escapes, `v` the digit 2, the epoch in plain decimal without sign, leading zero,
 * fraction or exponent, and `ct` a run of base64 characters with at most two `=` at its end.
 */
const SHAPE = /^\{"v":2,"epoch":([1-9][0-9]{0,9}),"ct":"([A-Za-z0-9+/]+={0,2})"\}$/;

/**
 * The outer shape of a message `content` (DESIGN.md 7): exactly the JSON string
 * `{"v":2,"epoch":E,"ct":"<base64>"}` as the SDK serialises it, and nothing else that JSON would
 * read the same (other key orders, spacing, duplicate or escaped keys, `2.0`, `1e0`): one bundle,
 * one accepted text. `ct` is canonical standard base64 (padded, unused bits zero) of at least
 * BUNDLE_CT_MIN_BYTES; the server checks nothing inside it, which it cannot read. E is a positive
 * integer within the `integer` column chats keep their epoch in (like every epoch a client sends,
 * protocol `Epoch`): a larger one is not a bundle this server can hold (422), where it would
 * otherwise reach SQL as out of range (a 500).
 */
export function parseBundle(content: string): { epoch: number } | null {
  const match = SHAPE.exec(content);
  if (!match) return null;
  const epoch = Number(match[1]);
  if (epoch > INT32_MAX) return null;
  const ct = match[2] as string; // the regular expression's second group always matches
  if (ct.length % 4 !== 0) return null;
  const bytes = Buffer.from(ct, 'base64');
  // Decoding is lenient (unused bits, missing padding); the canonical text is the one it re-encodes to.
  if (bytes.length < BUNDLE_CT_MIN_BYTES || bytes.toString('base64') !== ct) return null;
  return { epoch };
}
