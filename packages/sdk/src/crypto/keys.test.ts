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
