import { INT32_MAX } from '@parlor/protocol';
import { describe, expect, it } from 'vitest';
import { parseBundle } from './messages.bundle.js';

const content = (epoch: unknown) => `{"v":2,"epoch":${JSON.stringify(epoch)},"ct":"AAAA"}`;

describe('parseBundle', () => {
  it('takes epochs 1 to 2^31-1, the range of the column chats keep it in', () => {
    expect(parseBundle(content(1))).toEqual({ epoch: 1 });
    expect(parseBundle(content(INT32_MAX))).toEqual({ epoch: INT32_MAX });
    expect(parseBundle('{"ct":"AAAA","epoch":2147483647.0,"v":2}')).toEqual({ epoch: INT32_MAX });
  });

  it('refuses epochs outside it, and any other shape', () => {
    for (const epoch of [0, -1, INT32_MAX + 1, 3_000_000_000, Number.MAX_SAFE_INTEGER, 1.5, '1', null]) {
      expect(parseBundle(content(epoch))).toBeNull();
    }
    expect(parseBundle('{"v":2,"epoch":1e400,"ct":"AAAA"}')).toBeNull();
    expect(parseBundle('{"v":2,"epoch":1,"ct":"AAA"}')).toBeNull();
    expect(parseBundle('{"v":1,"epoch":1,"ct":"AAAA"}')).toBeNull();
    expect(parseBundle('{"v":2,"epoch":1,"ct":"AAAA","x":0}')).toBeNull();
    expect(parseBundle('not json')).toBeNull();
  });
});
