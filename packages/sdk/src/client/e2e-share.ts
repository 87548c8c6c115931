import { type KeyRing, Limits } from '@parlor/protocol';
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

/**
 * The sessions of `ring` that `now` lists, with the public keys `now` gives them (the server's
 * listing at the epoch whose key is shared).
 */
export function withinRing(ring: KeyRing, now: KeyRing): KeyRing {
  const listed = new Map<string, { userId: string; publicKey: string }>();
  for (const [userId, sessions] of Object.entries(now)) {
    for (const [sessionId, publicKey] of Object.entries(sessions)) listed.set(sessionId, { userId, publicKey });
  }
  const out: Record<string, Record<string, string>> = {};
  for (const sessions of Object.values(ring)) {
    for (const sessionId of Object.keys(sessions)) {
      const entry = listed.get(sessionId);
      if (entry) out[entry.userId] = { ...out[entry.userId], [sessionId]: entry.publicKey };
    }
  }
  return out;
}
