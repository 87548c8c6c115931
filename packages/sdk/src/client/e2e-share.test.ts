import { Limits } from '@parlor/protocol';
import { describe, expect, it } from 'vitest';
import { splitShare } from './e2e-share.js';

const envelopes = (n: number) => Array.from({ length: n }, (_, i) => ({ session_id: i + 1, wrapped: `w${i + 1}` }));

describe('splitShare', () => {
  it('keeps a share of at most one request whole', () => {
    const all = envelopes(Limits.KEY_SHARE_ENVELOPES_MAX);
    expect(splitShare(all, 7)).toHaveLength(1);
    expect(splitShare(all, 7)[0]?.[0]?.session_id).toBe(7);
    expect(splitShare([], 7)).toEqual([]);
  });

  it('splits a larger share into full requests, our own session in the first', () => {
    const all = envelopes(Limits.KEY_SHARE_ENVELOPES_MAX * 2 + 1);
    const own = Limits.KEY_SHARE_ENVELOPES_MAX * 2 + 1;
    const parts = splitShare(all, own);
    expect(parts.map((p) => p.length)).toEqual([Limits.KEY_SHARE_ENVELOPES_MAX, Limits.KEY_SHARE_ENVELOPES_MAX, 1]);
    expect(parts[0]?.[0]?.session_id).toBe(own);
    expect(
      parts
        .flat()
        .map((e) => e.session_id)
        .sort((a, b) => a - b),
    ).toEqual(all.map((e) => e.session_id));
  });

  it('takes another maximum', () => {
    expect(splitShare(envelopes(5), null, 2).map((p) => p.map((e) => e.session_id))).toEqual([[1, 2], [3, 4], [5]]);
  });
});
