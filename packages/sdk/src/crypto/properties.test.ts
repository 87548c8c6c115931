import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decryptMessage,
  E2EError,
  encryptMessage,
  generateKeyPair,
  maxPlaintextBytes,
  unwrapChatKey,
  wrapChatKey,
} from '../index.js';

const id = fc.maxSafeNat();
const epoch = fc.nat({ max: 999_999_999 });
const key = fc.uint8Array({ minLength: 32, maxLength: 32 });
const text = fc.oneof(fc.string({ unit: 'grapheme', maxLength: 200 }), fc.string({ unit: 'binary', maxLength: 200 }));
/** Well-formed text only: a lone surrogate cannot be UTF-8 and is refused up front. */
const plaintext = text.filter((s) => !/\p{Surrogate}/u.test(s));
const recipient = generateKeyPair();

function flipBit(bytes: Uint8Array, bit: number): Buffer {
  const out = Buffer.from(bytes);
  out[bit >> 3] = (out[bit >> 3] ?? 0) ^ (1 << (bit & 7));
  return out;
}

function e2eCode(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    if (error instanceof E2EError) return error.code;
    throw error;
  }
  return 'ACCEPTED';
}

describe('message properties', () => {
  it('decrypt(encrypt(m)) is m for any well-formed text, chat, epoch and key', () => {
    fc.assert(
      fc.property(key, id, epoch, plaintext, (chatKey, chatId, e, m) => {
        const content = encryptMessage({ chatKey, chatId, epoch: e, plaintext: m });
        expect(content.length).toBeLessThanOrEqual(4096);
        expect(decryptMessage({ chatKey, chatId, content })).toEqual({ epoch: e, plaintext: m });
      }),
    );
  });

  it('any plaintext up to maxPlaintextBytes fits the content limit', () => {
    fc.assert(
      fc.property(key, id, epoch, fc.nat({ max: maxPlaintextBytes }), (chatKey, chatId, e, n) => {
        const content = encryptMessage({ chatKey, chatId, epoch: e, plaintext: 'x'.repeat(n) });
        expect(content.length).toBeLessThanOrEqual(4096);
      }),
      { numRuns: 50 },
    );
  });

  it('any single flipped bit of ct fails with DECRYPT_FAILED', () => {
    fc.assert(
      fc.property(key, id, epoch, plaintext, fc.nat(), (chatKey, chatId, e, m, pick) => {
        const content = encryptMessage({ chatKey, chatId, epoch: e, plaintext: m });
        const ct = (JSON.parse(content) as { ct: string }).ct;
        const bytes = Buffer.from(ct, 'base64');
        const tampered = content.replace(ct, flipBit(bytes, pick % (bytes.length * 8)).toString('base64'));
        expect(e2eCode(() => decryptMessage({ chatKey, chatId, content: tampered }))).toBe('DECRYPT_FAILED');
      }),
    );
  });

  it('any single flipped bit of the content text is refused', () => {
    fc.assert(
      fc.property(key, id, epoch, plaintext, fc.nat(), fc.nat({ max: 6 }), (chatKey, chatId, e, m, pick, bit) => {
        const content = encryptMessage({ chatKey, chatId, epoch: e, plaintext: m });
        const at = pick % content.length;
        const flipped = String.fromCharCode(content.charCodeAt(at) ^ (1 << bit));
        const tampered = content.slice(0, at) + flipped + content.slice(at + 1);
        expect(['BUNDLE_INVALID', 'DECRYPT_FAILED']).toContain(
          e2eCode(() => decryptMessage({ chatKey, chatId, content: tampered })),
        );
      }),
    );
  });
});

describe('envelope properties', () => {
  it('unwrap(wrap(k)) is k for any chat key, chat, epoch and session', () => {
    fc.assert(
      fc.property(key, id, epoch, id, (chatKey, chatId, e, sessionId) => {
        const context = { chatId, epoch: e, recipientSessionId: sessionId };
        const envelope = wrapChatKey({ ...context, chatKey, recipientPublicKey: recipient.publicKey });
        expect(unwrapChatKey({ ...context, envelope, recipientPrivateKey: recipient.privateKey })).toEqual(chatKey);
      }),
      { numRuns: 50 },
    );
  });

  it('any single flipped bit of an envelope fails with ENVELOPE_INVALID', () => {
    fc.assert(
      fc.property(key, id, epoch, id, fc.nat({ max: 104 * 8 - 1 }), (chatKey, chatId, e, sessionId, bit) => {
        const context = { chatId, epoch: e, recipientSessionId: sessionId };
        const envelope = wrapChatKey({ ...context, chatKey, recipientPublicKey: recipient.publicKey });
        const tampered = flipBit(Buffer.from(envelope, 'base64'), bit).toString('base64');
        const open = () => unwrapChatKey({ ...context, envelope: tampered, recipientPrivateKey: recipient.privateKey });
        expect(e2eCode(open)).toBe('ENVELOPE_INVALID');
      }),
      { numRuns: 50 },
    );
  });

  it('an envelope opens for no other context', () => {
    const context = fc.record({ chatId: id, epoch, recipientSessionId: id });
    fc.assert(
      fc.property(key, context, context, (chatKey, a, b) => {
        fc.pre(a.chatId !== b.chatId || a.epoch !== b.epoch || a.recipientSessionId !== b.recipientSessionId);
        const envelope = wrapChatKey({ ...a, chatKey, recipientPublicKey: recipient.publicKey });
        const open = () => unwrapChatKey({ ...b, envelope, recipientPrivateKey: recipient.privateKey });
        expect(e2eCode(open)).toBe('ENVELOPE_INVALID');
      }),
      { numRuns: 50 },
    );
  });
});
