import { describe, expect, it } from 'vitest';
import {
  buildKeyShare,
  generateChatKey,
  generateKeyPair,
  type KeyPair,
  publicKeyToBase64,
  unwrapChatKey,
} from '../index.js';

const chatKey = generateChatKey();
const chatId = 9;
const epoch = 4;
const sessions = new Map<number, KeyPair>([
  [31, generateKeyPair()],
  [4, generateKeyPair()],
  [12, generateKeyPair()],
]);
const pub = (id: number): string => {
  const pair = sessions.get(id);
  if (pair === undefined) throw new Error(`no session ${id}`);
  return publicKeyToBase64(pair.publicKey);
};
const keyRing = { '100': { '31': pub(31), '4': pub(4) }, '200': { '12': pub(12) } };

describe('buildKeyShare', () => {
  it('wraps the chat key for every session of the ring, by integer session id', () => {
    const { envelopes, skipped } = buildKeyShare({ keyRing, chatKey, chatId, epoch });
    expect(skipped).toEqual([]);
    expect(envelopes.map((e) => e.session_id)).toEqual([4, 12, 31]);
    for (const { session_id, wrapped } of envelopes) {
      const pair = sessions.get(session_id);
      if (pair === undefined) throw new Error('unexpected session');
      const opened = unwrapChatKey({
        envelope: wrapped,
        recipientPrivateKey: pair.privateKey,
        chatId,
        epoch,
        recipientSessionId: session_id,
      });
      expect(opened).toEqual(chatKey);
    }
  });

  it('leaves out the sessions that already hold an envelope', () => {
    const { envelopes } = buildKeyShare({ keyRing, chatKey, chatId, epoch, skipSessionIds: new Set([4, 31]) });
    expect(envelopes.map((e) => e.session_id)).toEqual([12]);
  });

  it('gives an empty share for an empty ring', () => {
    expect(buildKeyShare({ keyRing: {}, chatKey, chatId, epoch })).toEqual({ envelopes: [], skipped: [] });
  });

  it('reports instead of serving entries it cannot serve safely', () => {
    const ring = {
      '100': { '4': pub(4), '01': pub(12), x: pub(12), '9007199254740993': pub(12) },
      '200': { '4': pub(31), '5': Buffer.alloc(32).toString('base64'), '6': 'AAAA', '7': pub(31) },
    };
    const { envelopes, skipped } = buildKeyShare({ keyRing: ring, chatKey, chatId, epoch });
    expect(envelopes.map((e) => e.session_id)).toEqual([4, 7]);
    expect(skipped).toEqual([
      { user_id: '100', session_id: '01', reason: 'INVALID_SESSION_ID' },
      { user_id: '100', session_id: 'x', reason: 'INVALID_SESSION_ID' },
      { user_id: '100', session_id: '9007199254740993', reason: 'INVALID_SESSION_ID' },
      { user_id: '200', session_id: '4', reason: 'DUPLICATE_SESSION' },
      { user_id: '200', session_id: '5', reason: 'PUBLIC_KEY_INVALID' },
      { user_id: '200', session_id: '6', reason: 'PUBLIC_KEY_INVALID' },
    ]);
  });

  it('throws INVALID_INPUT for a malformed chat key rather than skipping everyone', () => {
    expect(() => buildKeyShare({ keyRing, chatKey: new Uint8Array(16), chatId, epoch })).toThrowError(
      expect.objectContaining({ code: 'INVALID_INPUT' }),
    );
  });
});
