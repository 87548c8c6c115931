import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createPrivateKey,
  createPublicKey,
  diffieHellman,
  hkdfSync,
  type KeyObject,
} from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { decryptMessage, type E2EErrorCode, keyFingerprint, unwrapChatKey } from '../index.js';
import { wrapChatKeyWith } from './envelope.js';
import { encryptMessageWith } from './message.js';
import { aeadSeal } from './primitives.js';

/**
 * The published vectors (docs/e2e.md) must be what the SDK produces, and must also come out of a
 * second computation that shares no code with it: node:crypto (OpenSSL) for X25519, HKDF and
 * ChaCha20-Poly1305, plus HChaCha20 written here from draft-irtf-cfrg-xchacha.
 */

interface EnvelopeVector {
  name: string;
  recipient_private_key: string;
  ephemeral_private_key: string;
  nonce: string;
  chat_key: string;
  chat_id: number;
  epoch: number;
  recipient_session_id: number;
  recipient_public_key: string;
  recipient_public_key_base64: string;
  ephemeral_public_key: string;
  shared_secret: string;
  envelope_key: string;
  aad: string;
  envelope: string;
}
interface MessageVector {
  name: string;
  chat_key: string;
  nonce: string;
  chat_id: number;
  epoch: number;
  plaintext: string;
  plaintext_utf8: string;
  aad: string;
  content: string;
}
type Reject<T> = Partial<T> & { name: string; of: number; code?: E2EErrorCode };
interface Vectors {
  envelopes: EnvelopeVector[];
  envelope_rejects: Reject<EnvelopeVector>[];
  messages: MessageVector[];
  message_rejects: Reject<MessageVector>[];
  fingerprints: { public_key: string; fingerprint: string }[];
}

const vectors = JSON.parse(readFileSync(new URL('./vectors.json', import.meta.url), 'utf8')) as Vectors;
const hex = (text: string): Buffer => Buffer.from(text, 'hex');

// --- the independent reference -----------------------------------------------------------------

function x25519Private(raw: Buffer): KeyObject {
  const der = Buffer.concat([hex('302e020100300506032b656e04220420'), raw]);
  return createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
}
function x25519Public(raw: Buffer): KeyObject {
  return createPublicKey({ key: Buffer.concat([hex('302a300506032b656e032100'), raw]), format: 'der', type: 'spki' });
}
function rawPublicOf(privateKey: KeyObject): Buffer {
  return createPublicKey(privateKey).export({ format: 'der', type: 'spki' }).subarray(12);
}

/** HChaCha20 (draft-irtf-cfrg-xchacha-03 section 2.2). */
function hchacha20(key: Buffer, nonce16: Buffer): Buffer {
  const s = new Uint32Array(16);
  s.set([0x61707865, 0x3320646e, 0x79622d32, 0x6b206574]);
  for (let i = 0; i < 8; i++) s[4 + i] = key.readUInt32LE(4 * i);
  for (let i = 0; i < 4; i++) s[12 + i] = nonce16.readUInt32LE(4 * i);
  const at = (i: number): number => s[i] ?? 0;
  const rotl = (v: number, c: number): number => (v << c) | (v >>> (32 - c));
  const qr = (a: number, b: number, c: number, d: number): void => {
    s[a] = at(a) + at(b);
    s[d] = rotl(at(d) ^ at(a), 16);
    s[c] = at(c) + at(d);
    s[b] = rotl(at(b) ^ at(c), 12);
    s[a] = at(a) + at(b);
    s[d] = rotl(at(d) ^ at(a), 8);
    s[c] = at(c) + at(d);
    s[b] = rotl(at(b) ^ at(c), 7);
  };
  for (let round = 0; round < 10; round++) {
    qr(0, 4, 8, 12);
    qr(1, 5, 9, 13);
    qr(2, 6, 10, 14);
    qr(3, 7, 11, 15);
    qr(0, 5, 10, 15);
    qr(1, 6, 11, 12);
    qr(2, 7, 8, 13);
    qr(3, 4, 9, 14);
  }
  const out = Buffer.alloc(32);
  [0, 1, 2, 3, 12, 13, 14, 15].forEach((word, i) => {
    out.writeUInt32LE(at(word), 4 * i);
  });
  return out;
}

/** XChaCha20-Poly1305 = ChaCha20-Poly1305(HChaCha20(key, n[0..16]), 0000 ‖ n[16..24]). */
function xchachaParams(key: Buffer, nonce: Buffer): [Buffer, Buffer] {
  return [hchacha20(key, nonce.subarray(0, 16)), Buffer.concat([Buffer.alloc(4), nonce.subarray(16)])];
}
function referenceSeal(key: Buffer, nonce: Buffer, plaintext: Buffer, aad: Buffer): Buffer {
  const [subkey, iv] = xchachaParams(key, nonce);
  const cipher = createCipheriv('chacha20-poly1305', subkey, iv, { authTagLength: 16 });
  cipher.setAAD(aad, { plaintextLength: plaintext.length });
  return Buffer.concat([cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
}
function referenceOpen(key: Buffer, nonce: Buffer, sealed: Buffer, aad: Buffer): Buffer {
  const [subkey, iv] = xchachaParams(key, nonce);
  const decipher = createDecipheriv('chacha20-poly1305', subkey, iv, { authTagLength: 16 });
  decipher.setAuthTag(sealed.subarray(sealed.length - 16));
  decipher.setAAD(aad, { plaintextLength: sealed.length - 16 });
  return Buffer.concat([decipher.update(sealed.subarray(0, sealed.length - 16)), decipher.final()]);
}

function referenceEnvelope(v: EnvelopeVector): Buffer {
  const ephemeral = x25519Private(hex(v.ephemeral_private_key));
  const recipientPub = rawPublicOf(x25519Private(hex(v.recipient_private_key)));
  const ephemeralPub = rawPublicOf(ephemeral);
  const shared = diffieHellman({ privateKey: ephemeral, publicKey: x25519Public(recipientPub) });
  const salt = Buffer.concat([ephemeralPub, recipientPub]);
  const key = Buffer.from(hkdfSync('sha256', shared, salt, 'parlor/v2/envelope', 32));
  expect(recipientPub.toString('hex')).toBe(v.recipient_public_key);
  expect(ephemeralPub.toString('hex')).toBe(v.ephemeral_public_key);
  expect(shared.toString('hex')).toBe(v.shared_secret);
  expect(key.toString('hex')).toBe(v.envelope_key);
  const aad = Buffer.from(`parlor/v2/envelope|${v.chat_id}|${v.epoch}|${v.recipient_session_id}`);
  expect(aad.toString()).toBe(v.aad);
  return Buffer.concat([ephemeralPub, hex(v.nonce), referenceSeal(key, hex(v.nonce), hex(v.chat_key), aad)]);
}

// --- the checks --------------------------------------------------------------------------------

describe('the reference implementation', () => {
  it('matches the HChaCha20 vector of draft-irtf-cfrg-xchacha section 2.2.1', () => {
    const key = Buffer.from(Array.from({ length: 32 }, (_, i) => i));
    const out = hchacha20(key, hex('000000090000004a0000000031415927'));
    expect(out.toString('hex')).toBe('82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc');
  });

  it('matches, as the SDK does, the XChaCha20-Poly1305 vector of draft-irtf-cfrg-xchacha A.3.1', () => {
    const key = Buffer.from(Array.from({ length: 32 }, (_, i) => 0x80 + i));
    const nonce = Buffer.from(Array.from({ length: 24 }, (_, i) => 0x40 + i));
    const aad = hex('50515253c0c1c2c3c4c5c6c7');
    const plaintext = Buffer.from(
      "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.",
    );
    const expected =
      'bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c2' +
      '16cb96b72e1213b4522f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff921f9664c97637da9768812f615c6' +
      '8b13b52ec0875924c1c7987947deafd8780acf49';
    expect(referenceSeal(key, nonce, plaintext, aad).toString('hex')).toBe(expected);
    expect(Buffer.from(aeadSeal(key, nonce, plaintext, aad)).toString('hex')).toBe(expected);
  });
});

describe('envelope vectors', () => {
  it.each(vectors.envelopes)('$name: the SDK and node:crypto both produce the envelope', (v) => {
    const params = {
      chatKey: hex(v.chat_key),
      recipientPublicKey: hex(v.recipient_public_key),
      chatId: v.chat_id,
      epoch: v.epoch,
      recipientSessionId: v.recipient_session_id,
    };
    const randomness = { ephemeralPrivateKey: hex(v.ephemeral_private_key), nonce: hex(v.nonce) };
    expect(wrapChatKeyWith(params, randomness)).toBe(v.envelope);
    expect(referenceEnvelope(v).toString('base64')).toBe(v.envelope);
    expect(Buffer.from(v.recipient_public_key_base64, 'base64').toString('hex')).toBe(v.recipient_public_key);
  });

  it.each(vectors.envelopes)('$name: unwraps to the chat key', (v) => {
    const chatKey = unwrapChatKey({
      envelope: v.envelope,
      recipientPrivateKey: hex(v.recipient_private_key),
      chatId: v.chat_id,
      epoch: v.epoch,
      recipientSessionId: v.recipient_session_id,
    });
    expect(Buffer.from(chatKey).toString('hex')).toBe(v.chat_key);
  });

  it.each(vectors.envelope_rejects)('rejects with ENVELOPE_INVALID: $name', (reject) => {
    const v = { ...vectors.envelopes[reject.of], ...reject } as EnvelopeVector;
    const open = () =>
      unwrapChatKey({
        envelope: v.envelope,
        recipientPrivateKey: hex(v.recipient_private_key),
        chatId: v.chat_id,
        epoch: v.epoch,
        recipientSessionId: v.recipient_session_id,
      });
    expect(open).toThrowError(expect.objectContaining({ name: 'E2EError', code: 'ENVELOPE_INVALID' }));
  });
});

describe('message vectors', () => {
  it.each(vectors.messages)('$name: the SDK and node:crypto both produce the content', (v) => {
    expect(Buffer.from(v.plaintext, 'utf8').toString('hex')).toBe(v.plaintext_utf8);
    const params = { chatKey: hex(v.chat_key), chatId: v.chat_id, epoch: v.epoch, plaintext: v.plaintext };
    expect(encryptMessageWith(params, hex(v.nonce))).toBe(v.content);
    const sealed = referenceSeal(hex(v.chat_key), hex(v.nonce), hex(v.plaintext_utf8), Buffer.from(v.aad));
    const ct = Buffer.concat([hex(v.nonce), sealed]).toString('base64');
    expect(`{"v":2,"epoch":${v.epoch},"ct":"${ct}"}`).toBe(v.content);
  });

  it.each(vectors.messages)('$name: decrypts with the SDK and with node:crypto', (v) => {
    expect(decryptMessage({ chatKey: hex(v.chat_key), chatId: v.chat_id, content: v.content })).toEqual({
      epoch: v.epoch,
      plaintext: v.plaintext,
    });
    const bytes = Buffer.from((JSON.parse(v.content) as { ct: string }).ct, 'base64');
    const opened = referenceOpen(hex(v.chat_key), bytes.subarray(0, 24), bytes.subarray(24), Buffer.from(v.aad));
    expect(opened.toString('utf8')).toBe(v.plaintext);
  });

  it.each(vectors.message_rejects)('rejects with $code: $name', (reject) => {
    const v = { ...vectors.messages[reject.of], ...reject } as MessageVector;
    expect(() => decryptMessage({ chatKey: hex(v.chat_key), chatId: v.chat_id, content: v.content })).toThrowError(
      expect.objectContaining({ name: 'E2EError', code: reject.code }),
    );
  });

  it('node:crypto also refuses the tampered ciphertext', () => {
    const v = vectors.messages[0] as MessageVector;
    const bytes = Buffer.from((JSON.parse(v.content) as { ct: string }).ct, 'base64');
    bytes[30] = (bytes[30] ?? 0) ^ 1;
    expect(() =>
      referenceOpen(hex(v.chat_key), bytes.subarray(0, 24), bytes.subarray(24), Buffer.from(v.aad)),
    ).toThrow();
  });
});

describe('fingerprint vectors', () => {
  it.each(vectors.fingerprints)('$fingerprint', (f) => {
    expect(keyFingerprint(hex(f.public_key))).toBe(f.fingerprint);
    const digest = createHash('sha256').update(hex(f.public_key)).digest('hex').slice(0, 32);
    expect(f.fingerprint.replaceAll(' ', '')).toBe(digest);
  });
});

describe('docs/e2e.md', () => {
  it('publishes every vector input and output of vectors.json', () => {
    const doc = readFileSync(new URL('../../../../docs/e2e.md', import.meta.url), 'utf8');
    const published = [
      ...vectors.envelopes.flatMap((v) => [
        v.recipient_private_key,
        v.ephemeral_private_key,
        v.nonce,
        v.chat_key,
        v.envelope,
      ]),
      ...vectors.messages.flatMap((v) => [v.chat_key, v.nonce, v.plaintext_utf8, v.content]),
      ...vectors.envelope_rejects.flatMap((r) => (r.envelope === undefined ? [] : [r.envelope])),
      ...vectors.message_rejects.flatMap((r) => (r.content === undefined ? [] : [r.content])),
      ...vectors.fingerprints.map((f) => f.fingerprint),
    ];
    for (const value of published) expect(doc, value).toContain(value);
  });
});
