import { describe, expect, it } from 'vitest';
import { generateChatKey, generateKeyPair, unwrapChatKey, wrapChatKey } from '../index.js';

/** u-coordinates of low order on Curve25519 and its twist, plus non-canonical encodings of 0 and 1. */
const LOW_ORDER_POINTS = [
  '0000000000000000000000000000000000000000000000000000000000000000',
  '0100000000000000000000000000000000000000000000000000000000000000',
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  'e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800',
  '5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157',
  'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
];

const recipient = generateKeyPair();
const chatKey = generateChatKey();
const context = { chatId: 12, epoch: 3, recipientSessionId: 77 };
const envelope = wrapChatKey({ ...context, chatKey, recipientPublicKey: recipient.publicKey });
const open = (overrides: Partial<Parameters<typeof unwrapChatKey>[0]> = {}) =>
  unwrapChatKey({ ...context, envelope, recipientPrivateKey: recipient.privateKey, ...overrides });
const invalid = expect.objectContaining({ name: 'E2EError', code: 'ENVELOPE_INVALID' });

describe('wrapChatKey / unwrapChatKey', () => {
  it('gives the recipient session the chat key', () => {
    expect(envelope).toMatch(/^[A-Za-z0-9+/]{139}=$/);
    expect(open()).toEqual(chatKey);
  });

  it('uses a fresh ephemeral key and nonce for every envelope', () => {
    const again = wrapChatKey({ ...context, chatKey, recipientPublicKey: recipient.publicKey });
    expect(again).not.toBe(envelope);
    expect(Buffer.from(again, 'base64').subarray(0, 56)).not.toEqual(Buffer.from(envelope, 'base64').subarray(0, 56));
  });

  it('refuses another session key', () => {
    expect(() => open({ recipientPrivateKey: generateKeyPair().privateKey })).toThrowError(invalid);
  });

  it.each([
    ['chat', { chatId: 13 }],
    ['epoch', { epoch: 4 }],
    ['session', { recipientSessionId: 78 }],
  ])('refuses the envelope for another %s', (_, overrides) => {
    expect(() => open(overrides)).toThrowError(invalid);
  });

  it('refuses every single flipped bit', () => {
    const bytes = Buffer.from(envelope, 'base64');
    for (let bit = 0; bit < bytes.length * 8; bit++) {
      const tampered = Buffer.from(bytes);
      tampered[bit >> 3] = (tampered[bit >> 3] ?? 0) ^ (1 << (bit & 7));
      expect(() => open({ envelope: tampered.toString('base64') }), `bit ${bit}`).toThrowError(invalid);
    }
  });

  it.each([
    ['empty', ''],
    ['one byte short', Buffer.from(envelope, 'base64').subarray(0, 103).toString('base64')],
    ['one byte long', Buffer.concat([Buffer.from(envelope, 'base64'), Buffer.alloc(1)]).toString('base64')],
    ['unpadded base64', Buffer.from(envelope, 'base64').subarray(0, 103).toString('base64').replace(/=+$/, '')],
    ['base64url', Buffer.from(envelope, 'base64').toString('base64url')],
    ['with whitespace', `${envelope.slice(0, 70)}\n${envelope.slice(70)}`],
  ])('refuses a malformed envelope: %s', (_, text) => {
    expect(() => open({ envelope: text })).toThrowError(invalid);
  });

  it.each(LOW_ORDER_POINTS)('refuses an envelope whose ephemeral key is the low-order point %s', (point) => {
    const bytes = Buffer.from(envelope, 'base64');
    Buffer.from(point, 'hex').copy(bytes, 0);
    expect(() => open({ envelope: bytes.toString('base64') })).toThrowError(invalid);
  });

  it.each(LOW_ORDER_POINTS)('refuses to wrap for the low-order public key %s', (point) => {
    const wrap = () => wrapChatKey({ ...context, chatKey, recipientPublicKey: Buffer.from(point, 'hex') });
    expect(wrap).toThrowError(expect.objectContaining({ code: 'PUBLIC_KEY_INVALID' }));
  });

  it.each([
    ['a short chat key', { chatKey: new Uint8Array(31) }],
    ['a short public key', { recipientPublicKey: new Uint8Array(31) }],
    ['a negative chat id', { chatId: -1 }],
    ['a fractional epoch', { epoch: 1.5 }],
    ['an unsafe session id', { recipientSessionId: 2 ** 53 }],
  ])('refuses to wrap with %s (INVALID_INPUT)', (_, overrides) => {
    const wrap = () => wrapChatKey({ ...context, chatKey, recipientPublicKey: recipient.publicKey, ...overrides });
    expect(wrap).toThrowError(expect.objectContaining({ code: 'INVALID_INPUT' }));
  });

  it('refuses to unwrap with a short private key (INVALID_INPUT)', () => {
    expect(() => open({ recipientPrivateKey: new Uint8Array(16) })).toThrowError(
      expect.objectContaining({ code: 'INVALID_INPUT' }),
    );
  });
});
