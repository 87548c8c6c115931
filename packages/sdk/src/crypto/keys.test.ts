import { describe, expect, it } from 'vitest';
import {
  generateChatKey,
  generateKeyPair,
  keyFingerprint,
  publicKeyFromBase64,
  publicKeyFromPrivateKey,
  publicKeyToBase64,
} from '../index.js';

describe('session keypairs', () => {
  it('generates 32-byte X25519 keys whose public half derives from the private half', () => {
    const pair = generateKeyPair();
    expect(pair.privateKey).toHaveLength(32);
    expect(pair.publicKey).toHaveLength(32);
    expect(publicKeyFromPrivateKey(pair.privateKey)).toEqual(pair.publicKey);
    expect(generateKeyPair().privateKey).not.toEqual(pair.privateKey);
  });

  it('writes a public key as 44 characters of padded standard base64 and reads it back', () => {
    const { publicKey } = generateKeyPair();
    const text = publicKeyToBase64(publicKey);
    expect(text).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(publicKeyFromBase64(text)).toEqual(publicKey);
  });

  it.each([
    ['31 bytes', Buffer.alloc(31).toString('base64')],
    ['33 bytes', Buffer.alloc(33).toString('base64')],
    ['unpadded', Buffer.alloc(32).toString('base64').replace('=', '')],
    ['base64url', Buffer.alloc(32, 0xff).toString('base64url')],
    ['not base64', 'not a key'],
  ])('refuses a public key of %s with PUBLIC_KEY_INVALID', (_, text) => {
    expect(() => publicKeyFromBase64(text)).toThrowError(expect.objectContaining({ code: 'PUBLIC_KEY_INVALID' }));
  });

  it('generates public keys as X25519 writes them: the top bit of the last byte clear', () => {
    // Half of 64 random 32-byte strings would have it set: a key that kept it would show.
    for (let i = 0; i < 64; i += 1) expect((generateKeyPair().publicKey[31] ?? 0) & 0x80).toBe(0);
  });

  it('refuses, as the server does, another text of a key: the top bit of the last byte set, or u of 2^255 - 19 or more', () => {
    const { publicKey } = generateKeyPair();
    const flipped = Uint8Array.from(publicKey);
    flipped[31] = (flipped[31] ?? 0) | 0x80;
    const fieldPrime = Buffer.concat([Buffer.from([0xed]), Buffer.alloc(30, 0xff), Buffer.from([0x7f])]);
    const largest = Buffer.from(fieldPrime);
    largest[0] = 0xec;
    for (const bytes of [flipped, fieldPrime]) {
      expect(() => publicKeyFromBase64(Buffer.from(bytes).toString('base64'))).toThrowError(
        expect.objectContaining({ code: 'PUBLIC_KEY_INVALID' }),
      );
    }
    // 2^255 - 20, the largest u below the prime, is read (whether it is usable is the wrap's check).
    expect(publicKeyFromBase64(largest.toString('base64'))).toEqual(Uint8Array.from(largest));
  });

  it('refuses to encode a key of the wrong length', () => {
    expect(() => publicKeyToBase64(new Uint8Array(31))).toThrowError(
      expect.objectContaining({ code: 'INVALID_INPUT' }),
    );
  });
});

describe('chat keys', () => {
  it('are 32 fresh random bytes', () => {
    const a = generateChatKey();
    expect(a).toHaveLength(32);
    expect(generateChatKey()).not.toEqual(a);
  });
});

describe('keyFingerprint', () => {
  it('is 8 groups of 4 hex digits, the same for raw and base64 keys', () => {
    const { publicKey } = generateKeyPair();
    const fingerprint = keyFingerprint(publicKey);
    expect(fingerprint).toMatch(/^(?:[0-9a-f]{4} ){7}[0-9a-f]{4}$/);
    expect(keyFingerprint(publicKeyToBase64(publicKey))).toBe(fingerprint);
  });

  it('differs between keys', () => {
    expect(keyFingerprint(generateKeyPair().publicKey)).not.toBe(keyFingerprint(generateKeyPair().publicKey));
  });
});
