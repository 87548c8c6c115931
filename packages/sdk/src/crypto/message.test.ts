import { describe, expect, it } from 'vitest';
import {
  decryptMessage,
  encryptMessage,
  generateChatKey,
  maxPlaintextBytes,
  maxPlaintextBytesForEpoch,
  parseBundle,
} from '../index.js';
import { formatBundle } from './bundle.js';
import { aeadSeal } from './primitives.js';

const chatKey = generateChatKey();
const chatId = 5;

describe('encryptMessage / decryptMessage', () => {
  it('writes exactly {"v":2,"epoch":E,"ct":"…"} and reads it back', () => {
    const content = encryptMessage({ chatKey, chatId, epoch: 17, plaintext: 'hi there' });
    expect(content).toMatch(/^\{"v":2,"epoch":17,"ct":"[A-Za-z0-9+/]+={0,2}"\}$/);
    expect(decryptMessage({ chatKey, chatId, content })).toEqual({ epoch: 17, plaintext: 'hi there' });
  });

  it('uses a fresh nonce per message', () => {
    const a = encryptMessage({ chatKey, chatId, epoch: 1, plaintext: 'same' });
    expect(encryptMessage({ chatKey, chatId, epoch: 1, plaintext: 'same' })).not.toBe(a);
  });

  it('finds the key of the bundle epoch through a lookup', () => {
    const keys = new Map([
      [1, generateChatKey()],
      [2, generateChatKey()],
    ]);
    const lookup = (epoch: number) => keys.get(epoch);
    const old = encryptMessage({ chatKey: keys.get(1) ?? chatKey, chatId, epoch: 1, plaintext: 'old' });
    expect(decryptMessage({ chatKey: lookup, chatId, content: old })).toEqual({ epoch: 1, plaintext: 'old' });
    const future = encryptMessage({ chatKey, chatId, epoch: 3, plaintext: 'x' });
    expect(() => decryptMessage({ chatKey: lookup, chatId, content: future })).toThrowError(
      expect.objectContaining({ code: 'NO_KEY_FOR_EPOCH' }),
    );
  });

  it('refuses another chat, another key and a rewritten epoch with DECRYPT_FAILED', () => {
    const content = encryptMessage({ chatKey, chatId, epoch: 1, plaintext: 'secret' });
    const failed = expect.objectContaining({ code: 'DECRYPT_FAILED' });
    expect(() => decryptMessage({ chatKey, chatId: 6, content })).toThrowError(failed);
    expect(() => decryptMessage({ chatKey: generateChatKey(), chatId, content })).toThrowError(failed);
    const moved = content.replace('"epoch":1', '"epoch":2');
    expect(() => decryptMessage({ chatKey, chatId, content: moved })).toThrowError(failed);
  });

  it('reports an authentic bundle that holds malformed UTF-8 as PLAINTEXT_INVALID', () => {
    const nonce = new Uint8Array(24);
    const aad = new TextEncoder().encode(`parlor/v2/message|${chatId}|1`);
    const content = formatBundle(1, nonce, aeadSeal(chatKey, nonce, Uint8Array.of(0xc3, 0x28), aad));
    expect(() => decryptMessage({ chatKey, chatId, content })).toThrowError(
      expect.objectContaining({ code: 'PLAINTEXT_INVALID' }),
    );
  });

  it('refuses a plaintext with a lone surrogate (INVALID_INPUT)', () => {
    expect(() => encryptMessage({ chatKey, chatId, epoch: 1, plaintext: '\uD83D' })).toThrowError(
      expect.objectContaining({ code: 'INVALID_INPUT' }),
    );
  });
});

describe('the 4096-character content limit', () => {
  it('is 3005 bytes of UTF-8 for any epoch of up to 9 digits', () => {
    expect(maxPlaintextBytes).toBe(3005);
    expect(maxPlaintextBytesForEpoch(999_999_999)).toBe(3005);
    expect(maxPlaintextBytesForEpoch(0)).toBe(3011);
  });

  it('fits 3005 bytes at epoch 999999999 and refuses 3006 with MESSAGE_TOO_LONG', () => {
    const epoch = 999_999_999;
    const content = encryptMessage({ chatKey, chatId, epoch, plaintext: 'a'.repeat(maxPlaintextBytes) });
    expect(content.length).toBeLessThanOrEqual(4096);
    expect(() => encryptMessage({ chatKey, chatId, epoch, plaintext: 'a'.repeat(maxPlaintextBytes + 1) })).toThrowError(
      expect.objectContaining({ code: 'MESSAGE_TOO_LONG' }),
    );
  });

  it('is the largest size that fits, at every epoch length', () => {
    for (const epoch of [0, 9, 10, 99_999, 123_456_789, 1_000_000_000, Number.MAX_SAFE_INTEGER]) {
      const max = maxPlaintextBytesForEpoch(epoch);
      expect(encryptMessage({ chatKey, chatId, epoch, plaintext: 'b'.repeat(max) }).length).toBeLessThanOrEqual(4096);
      const over = formatBundle(epoch, new Uint8Array(24), new Uint8Array(max + 1 + 16));
      expect(over.length, `epoch ${epoch}`).toBeGreaterThan(4096);
    }
  });

  it('counts bytes of UTF-8, not characters', () => {
    const epoch = 999_999_999;
    const fits = `${'€'.repeat(1001)}aa`; // 3005 bytes in 1003 characters
    expect(() => encryptMessage({ chatKey, chatId, epoch, plaintext: fits })).not.toThrow();
    const tooLong = '€'.repeat(1002); // 3006 bytes in 1002 characters
    expect(() => encryptMessage({ chatKey, chatId, epoch, plaintext: tooLong })).toThrowError(
      expect.objectContaining({ code: 'MESSAGE_TOO_LONG' }),
    );
  });
});

describe('parseBundle', () => {
  const ct = Buffer.alloc(40).toString('base64');

  it('returns the outer shape and tolerates whitespace and key order', () => {
    expect(parseBundle(` { "ct" : "${ct}", "epoch": 4, "v": 2 } `)).toEqual({ v: 2, epoch: 4, ct });
  });

  it.each([
    ['not JSON', 'hello'],
    ['an array', `[2, 4, "${ct}"]`],
    ['null', 'null'],
    ['a JSON string', JSON.stringify(`{"v":2,"epoch":4,"ct":"${ct}"}`)],
    ['a missing key', `{"v":2,"epoch":4}`],
    ['an extra key', `{"v":2,"epoch":4,"ct":"${ct}","sig":""}`],
    ['v as a string', `{"v":"2","epoch":4,"ct":"${ct}"}`],
    ['v 3', `{"v":3,"epoch":4,"ct":"${ct}"}`],
    ['a negative epoch', `{"v":2,"epoch":-1,"ct":"${ct}"}`],
    ['an epoch as a string', `{"v":2,"epoch":"4","ct":"${ct}"}`],
    ['an epoch beyond 2^53', `{"v":2,"epoch":9007199254740993,"ct":"${ct}"}`],
    ['ct as a number', `{"v":2,"epoch":4,"ct":4}`],
    ['ct not base64', `{"v":2,"epoch":4,"ct":"!!!!"}`],
    ['ct shorter than nonce and tag', `{"v":2,"epoch":4,"ct":"${Buffer.alloc(39).toString('base64')}"}`],
  ])('refuses %s with BUNDLE_INVALID', (_, content) => {
    expect(() => parseBundle(content)).toThrowError(expect.objectContaining({ code: 'BUNDLE_INVALID' }));
  });
});
