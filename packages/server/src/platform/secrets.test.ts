import { LOGIN_CODE_ALPHABET } from '@parlor/protocol';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { randomCode, randomToken, safeEqual, sha256Hex } from './secrets.js';

/**
 * Pearson's chi-square statistic of observed symbol counts against a uniform distribution, and a
 * generous bound for it: the mean of the chi-square distribution (its degrees of freedom) plus
 * eight standard deviations. A fair generator exceeds it with negligible probability (well under
 * one in a million runs); a modulo-biased one exceeds it by orders of magnitude (see below).
 */
function chiSquare(counts: number[], draws: number): { statistic: number; bound: number } {
  const expectedEach = draws / counts.length;
  const statistic = counts.reduce((sum, c) => sum + (c - expectedEach) ** 2 / expectedEach, 0);
  const df = counts.length - 1;
  return { statistic, bound: df + 8 * Math.sqrt(2 * df) };
}

function symbolCounts(alphabet: string, text: string): number[] {
  const counts = new Array<number>(alphabet.length).fill(0);
  for (const ch of text) {
    const i = alphabet.indexOf(ch);
    if (i < 0) throw new Error(`symbol ${JSON.stringify(ch)} is not in the alphabet`);
    counts[i] = (counts[i] ?? 0) + 1;
  }
  return counts;
}

/** The naive `byte % n` draw that rejection sampling exists to avoid: the check must catch it. */
function biasedCode(alphabet: string, length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) out += alphabet[Math.floor(Math.random() * 256) % alphabet.length];
  return out;
}

describe('randomCode', () => {
  it('draws the login-code alphabet uniformly (chi-square over 256,000 symbols)', () => {
    const draws = 256_000;
    const text = Array.from({ length: draws / 8 }, () => randomCode(LOGIN_CODE_ALPHABET, 8)).join('');
    const { statistic, bound } = chiSquare(symbolCounts(LOGIN_CODE_ALPHABET, text), draws);
    expect(statistic).toBeLessThan(bound);
  });

  // 256 % n is large for these sizes, so a `byte % n` draw would favour the first symbols heavily.
  it.each(['0123456789', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwxyz-_.~!*'])(
    'draws a %s-sized alphabet uniformly where 256 is not a multiple of its size',
    (alphabet) => {
      const draws = 200_000;
      const text = randomCode(alphabet, draws);
      const { statistic, bound } = chiSquare(symbolCounts(alphabet, text), draws);
      expect(statistic).toBeLessThan(bound);
    },
  );

  it('has a uniformity check that does catch modulo bias', () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwxyz-_.~!*';
    const draws = 200_000;
    const { statistic, bound } = chiSquare(symbolCounts(alphabet, biasedCode(alphabet, draws)), draws);
    expect(statistic).toBeGreaterThan(bound);
  });

  it('uses every symbol of the alphabet and nothing else', () => {
    const text = randomCode(LOGIN_CODE_ALPHABET, 20_000);
    expect(new Set(text)).toEqual(new Set(LOGIN_CODE_ALPHABET));
  });

  it('returns exactly `length` symbols, all from the alphabet, for any printable-ASCII alphabet', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 0x21, max: 0x7e }), { minLength: 1, maxLength: 94 }),
        fc.integer({ min: 0, max: 300 }),
        (codes, length) => {
          const alphabet = String.fromCharCode(...codes);
          const code = randomCode(alphabet, length);
          expect(code).toHaveLength(length);
          for (const ch of code) expect(alphabet).toContain(ch);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('accepts an alphabet of exactly 256 symbols', () => {
    const alphabet = String.fromCharCode(...Array.from({ length: 256 }, (_, i) => 0x100 + i));
    const code = randomCode(alphabet, 64);
    expect(code).toHaveLength(64);
    for (const ch of code) expect(alphabet).toContain(ch);
  });

  it('gives a single-symbol alphabet its only symbol, and an empty code for length 0', () => {
    expect(randomCode('Z', 5)).toBe('ZZZZZ');
    expect(randomCode(LOGIN_CODE_ALPHABET, 0)).toBe('');
  });

  it('refuses an empty alphabet or one over 256 symbols instead of looping forever', () => {
    const big = String.fromCharCode(...Array.from({ length: 257 }, (_, i) => 0x100 + i));
    expect(() => randomCode('', 8)).toThrow(RangeError);
    expect(() => randomCode(big, 8)).toThrow(RangeError);
  });

  it('draws 8-symbol login codes that do not repeat in practice', () => {
    // 2,000 draws from 32^8 codes collide with probability about 2e-6.
    const codes = new Set(Array.from({ length: 2_000 }, () => randomCode(LOGIN_CODE_ALPHABET, 8)));
    expect(codes.size).toBe(2_000);
  });
});

describe('safeEqual', () => {
  it('is true exactly when the strings are equal', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), fc.string({ unit: 'grapheme' }), (a, b) => {
        expect(safeEqual(a, b)).toBe(a === b);
        expect(safeEqual(a, a)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  it('is false for strings that differ in one character, at any position', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 64 }), fc.nat(), (s, n) => {
        const i = n % s.length;
        const other = s.slice(0, i) + (s[i] === 'x' ? 'y' : 'x') + s.slice(i + 1);
        expect(safeEqual(s, other)).toBe(false);
      }),
    );
  });

  it('is false for a prefix, an extension and the empty string, and does not throw on unequal lengths', () => {
    const key = 'ppk_test_public_key_0123456789abcdef';
    expect(safeEqual(key, key.slice(0, -1))).toBe(false);
    expect(safeEqual(key, `${key}0`)).toBe(false);
    expect(safeEqual(key, '')).toBe(false);
    expect(safeEqual('', '')).toBe(true);
  });

  it('compares bytes, not UTF-16 lengths: equal-length strings with different encodings differ', () => {
    expect(safeEqual('é', 'e\u0301')).toBe(false);
    expect(safeEqual('ab', 'é')).toBe(false); // both two bytes in UTF-8
    expect(safeEqual('日本', '日本')).toBe(true);
  });
});

describe('sha256Hex', () => {
  it('matches the published SHA-256 test vectors', () => {
    expect(sha256Hex('')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(sha256Hex('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq')).toBe(
      '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
    );
  });

  it('hashes the UTF-8 encoding of its input (not Latin-1 or UTF-16)', () => {
    expect(sha256Hex('é')).toBe('4a99557e4033c3539de2eb65472017cad5f9557f7a0625a09f1c3f6e2ba69c4c');
    expect(sha256Hex('日本')).toBe('cf2abf0c5be326cb922a70f8163f91079c4d9aa8655c60ead89ad545c9de2e92');
  });

  it('is 64 lower-case hex digits, deterministic, and differs for different inputs', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), fc.string({ unit: 'grapheme' }), (a, b) => {
        const h = sha256Hex(a);
        expect(h).toMatch(/^[0-9a-f]{64}$/);
        expect(sha256Hex(a)).toBe(h);
        if (a !== b) expect(sha256Hex(b)).not.toBe(h);
      }),
      { numRuns: 300 },
    );
  });
});

describe('randomToken', () => {
  it('carries 32 bytes in 43 base64url characters by default', () => {
    const t = randomToken();
    expect(t).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(Buffer.from(t, 'base64url')).toHaveLength(32);
  });

  it('is ceil(4n/3) base64url characters (no padding) that decode back to n bytes', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 128 }), (bytes) => {
        const t = randomToken(bytes);
        expect(t).toHaveLength(Math.ceil((bytes * 4) / 3));
        expect(t).toMatch(/^[A-Za-z0-9_-]+$/);
        expect(Buffer.from(t, 'base64url')).toHaveLength(bytes);
      }),
    );
  });

  it('does not repeat, and uses the whole base64url alphabet', () => {
    const tokens = Array.from({ length: 5_000 }, () => randomToken());
    expect(new Set(tokens).size).toBe(tokens.length);
    expect(new Set(tokens.join('')).size).toBe(64);
  });
});
