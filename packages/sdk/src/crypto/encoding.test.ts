import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { base64ToBytes, bytesToBase64, tryBase64ToBytes, tryUtf8Decode, utf8Encode } from './encoding.js';

describe('base64', () => {
  it('agrees with Buffer on standard padded base64 for any bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        const text = bytesToBase64(bytes);
        expect(text).toBe(Buffer.from(bytes).toString('base64'));
        expect(tryBase64ToBytes(text)).toEqual(bytes);
      }),
    );
  });

  it('encodes more than one chunk', () => {
    const bytes = new Uint8Array(100_000).map((_, i) => i * 7);
    expect(bytesToBase64(bytes)).toBe(Buffer.from(bytes).toString('base64'));
  });

  it.each([
    ['missing padding', 'QQ'],
    ['whitespace', 'QUJD RA=='],
    ['a newline', 'QUJD\nRA=='],
    ['URL-safe letters', '-_-_'],
    ['non-canonical trailing bits', 'QR=='],
    ['too much padding', 'QQ==='],
    ['a lone padding block', '===='],
  ])('rejects %s', (_, text) => {
    expect(tryBase64ToBytes(text)).toBeNull();
    expect(() => base64ToBytes(text)).toThrowError(expect.objectContaining({ code: 'INVALID_INPUT' }));
  });

  it('accepts the empty string as zero bytes', () => {
    expect(tryBase64ToBytes('')).toEqual(new Uint8Array(0));
  });

  it('checks an expected length', () => {
    expect(base64ToBytes('AAAA', 3)).toEqual(new Uint8Array(3));
    expect(() => base64ToBytes('AAAA', 4)).toThrowError(expect.objectContaining({ code: 'INVALID_INPUT' }));
  });
});

describe('UTF-8', () => {
  it('round-trips a leading byte-order mark and astral characters', () => {
    const text = '\uFEFFa\u{1F44B}';
    expect(tryUtf8Decode(utf8Encode(text))).toBe(text);
  });

  it('refuses to encode a lone surrogate', () => {
    expect(() => utf8Encode('a\uD800b')).toThrowError(expect.objectContaining({ code: 'INVALID_INPUT' }));
    expect(() => utf8Encode('\uDC00')).toThrowError(expect.objectContaining({ code: 'INVALID_INPUT' }));
  });

  it('refuses to decode malformed UTF-8', () => {
    expect(tryUtf8Decode(Uint8Array.of(0xff))).toBeNull();
    expect(tryUtf8Decode(Uint8Array.of(0xed, 0xa0, 0x80))).toBeNull();
  });
});
