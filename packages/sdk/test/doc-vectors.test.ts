/**
 * The test vectors as docs/e2e.md prints them (vectors.test.ts checks that vectors.json's values
 * appear in the page): each block's own inputs, read field by field, give that block's outputs with
 * the SDK's code, so a value moved to the wrong block or mistyped in the page fails here.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { wrapChatKeyWith } from '../src/crypto/envelope.js';
import { decryptMessage, E2EError, keyFingerprint, publicKeyToBase64, unwrapChatKey } from '../src/crypto/index.js';
import { encryptMessageWith } from '../src/crypto/message.js';
import { x25519PublicKey } from '../src/crypto/primitives.js';

const doc = readFileSync(new URL('../../../docs/e2e.md', import.meta.url), 'utf8');
const hex = (h: string) => Uint8Array.from(Buffer.from(h, 'hex'));
const toHex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** The ``` block under the heading that starts with `title`, as {field: value} plus its output line. */
function block(title: string): { fields: Record<string, string>; output: string } {
  const at = doc.indexOf(`#### ${title}`);
  if (at < 0) throw new Error(`no heading ${title}`);
  const start = doc.indexOf('```\n', at) + 4;
  const end = doc.indexOf('```', start);
  const lines = doc.slice(start, end).trimEnd().split('\n');
  const fields: Record<string, string> = {};
  let output = '';
  let inOutput = false;
  for (const line of lines) {
    if (line.startsWith('-- output')) {
      inOutput = true;
      continue;
    }
    if (line.startsWith('--')) continue;
    if (inOutput) output = line.trim();
    else {
      const m = /^(\S+)\s+(.*)$/.exec(line);
      if (m?.[1] && m[2] !== undefined) fields[m[1]] = m[2].trim();
    }
  }
  return { fields, output };
}

const plaintextOf = (f: Record<string, string>) => JSON.parse((f.plaintext ?? '').replace(/ \(JSON\)$/, '')) as string;

describe('docs/e2e.md envelope vectors', () => {
  for (const title of ['Envelope 1', 'Envelope 2']) {
    it(`${title} wraps and unwraps as printed`, () => {
      const { fields: f, output } = block(title);
      const ctx = {
        chatId: Number(f.chat_id),
        epoch: Number(f.epoch),
        recipientSessionId: Number(f.recipient_session_id),
      };
      const recipientPublicKey = x25519PublicKey(hex(f.recipient_private_key ?? ''));
      expect(toHex(recipientPublicKey)).toBe(f.recipient_public_key);
      expect(publicKeyToBase64(recipientPublicKey)).toBe(f.recipient_public_key_base64);
      expect(toHex(x25519PublicKey(hex(f.ephemeral_private_key ?? '')))).toBe(f.ephemeral_public_key);
      const envelope = wrapChatKeyWith(
        { ...ctx, chatKey: hex(f.chat_key ?? ''), recipientPublicKey },
        { ephemeralPrivateKey: hex(f.ephemeral_private_key ?? ''), nonce: hex(f.nonce ?? '') },
      );
      expect(envelope).toBe(output);
      expect(f.aad).toBe(`parlor/v2/envelope|${ctx.chatId}|${ctx.epoch}|${ctx.recipientSessionId}`);
      const key = unwrapChatKey({ ...ctx, envelope: output, recipientPrivateKey: hex(f.recipient_private_key ?? '') });
      expect(toHex(key)).toBe(f.chat_key);
    });
  }
});

describe('docs/e2e.md message vectors', () => {
  for (const title of ['Message 1', 'Message 2', 'Message 3']) {
    it(`${title} encrypts and decrypts as printed`, () => {
      const { fields: f, output } = block(title);
      const plaintext = plaintextOf(f);
      const utf8 = f.plaintext_utf8 === '(empty)' ? '' : f.plaintext_utf8;
      expect(Buffer.from(plaintext, 'utf8').toString('hex')).toBe(utf8);
      const params = { chatKey: hex(f.chat_key ?? ''), chatId: Number(f.chat_id), epoch: Number(f.epoch), plaintext };
      expect(encryptMessageWith(params, hex(f.nonce ?? ''))).toBe(output);
      expect(decryptMessage({ chatKey: params.chatKey, chatId: params.chatId, content: output })).toEqual({
        epoch: params.epoch,
        plaintext,
      });
    });
  }
});

describe('docs/e2e.md rejections', () => {
  const rows = [...doc.matchAll(/^\| (envelope \d|message \d) \| [^|:]+: `([a-z_]+)` = `([^`]+)` \| ([A-Z_]+) \|$/gm)];
  it('lists the 16 rejections', () => expect(rows.length).toBe(16));
  for (const [, of, field, value, code] of rows) {
    it(`${of}: ${field} = ${value?.slice(0, 20)} → ${code}`, () => {
      const n = of?.split(' ')[1];
      if (of?.startsWith('envelope')) {
        const { fields: f, output } = block(`Envelope ${n}`);
        const all = { ...f, envelope: output, [field as string]: value as string };
        const run = () =>
          unwrapChatKey({
            envelope: all.envelope,
            chatId: Number(all.chat_id),
            epoch: Number(all.epoch),
            recipientSessionId: Number(all.recipient_session_id),
            recipientPrivateKey: hex(all.recipient_private_key ?? ''),
          });
        expect(run).toThrow(E2EError);
        try {
          run();
        } catch (e) {
          expect((e as E2EError).code).toBe(code);
        }
      } else {
        const { fields: f, output } = block(`Message ${n}`);
        const all = { ...f, content: output, [field as string]: value as string };
        try {
          decryptMessage({ chatKey: hex(all.chat_key ?? ''), chatId: Number(all.chat_id), content: all.content });
          throw new Error('decrypted');
        } catch (e) {
          expect((e as E2EError).code).toBe(code);
        }
      }
    });
  }
});

describe('docs/e2e.md fingerprints', () => {
  const rows = [...doc.matchAll(/^([0-9a-f]{64})\s+→\s+((?:[0-9a-f]{4} ){7}[0-9a-f]{4})$/gm)];
  it('lists two', () => expect(rows.length).toBe(2));
  for (const [, key, fp] of rows) it(`${fp}`, () => expect(keyFingerprint(hex(key ?? ''))).toBe(fp));
});
