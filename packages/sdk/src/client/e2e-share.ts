import { Limits } from '@parlor/protocol';
import type { KeyShareEnvelope } from '../crypto/index.js';

/**
 * Splits a share into requests the server takes (at most `max` envelopes each), the envelope for
 * `first` (our own session, when keying an epoch) in the first one: for a key ring larger than one
 * request, that first request keys the epoch and the others top it up (docs/api.md, Keys).
 */
export function splitShare(
  envelopes: KeyShareEnvelope[],
  first: number | null,
  max: number = Limits.KEY_SHARE_ENVELOPES_MAX,
): KeyShareEnvelope[][] {
  const ordered = [
    ...envelopes.filter((e) => e.session_id === first),
    ...envelopes.filter((e) => e.session_id !== first),
  ];
  const parts: KeyShareEnvelope[][] = [];
  for (let i = 0; i < ordered.length; i += max) parts.push(ordered.slice(i, i + max));
  return parts;
}
