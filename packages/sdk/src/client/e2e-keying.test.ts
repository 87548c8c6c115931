import { describe, expect, it } from 'vitest';
import { generateChatKey, generateKeyPair, publicKeyToBase64, wrapChatKey } from '../crypto/index.js';
import type { ParlorClient } from './api.js';
import { ChatKeying } from './e2e-keying.js';
import type { E2ESessionError } from './e2e-types.js';
import { ParlorApiError } from './errors.js';

/** A ChatKeying over a stand-in client, its errors collected; `opts` overrides the defaults. */
function keyingOf(
  client: unknown,
  pair: ReturnType<typeof generateKeyPair>,
  opts: Partial<ConstructorParameters<typeof ChatKeying>[0]> = {},
) {
  const errors: E2ESessionError[] = [];
  const keying = new ChatKeying({
    client: client as ParlorClient,
    publicKey: publicKeyToBase64(pair.publicKey),
    privateKey: pair.privateKey,
    keyWaitMs: 2000,
    jitterMs: 1,
    attempts: 1,
    isJoined: () => true,
    onKey: () => {},
    onError: (e) => errors.push(e),
    ...opts,
  });
  return { keying, errors };
}

describe('ChatKeying', () => {
  it('reports a failed keying once: to the caller awaiting it, not again as an error event when a rekey joined it', async () => {
    const pair = generateKeyPair();
    let joined = true;
    let fail: (error: Error) => void = () => {};
    const client = {
      // The server's answer to GET …/keys: held until the test fails it; the caller then leaves.
      chatKey: () =>
        new Promise((_, reject) => {
          fail = (error) => {
            joined = false;
            reject(error);
          };
        }),
    } as unknown as ParlorClient;
    const { keying, errors } = keyingOf(client, pair, { keyWaitMs: 5000, isJoined: () => joined });
    const run = keying.ensure(1); // a join waits for it
    keying.rekey(1, 2); // room:rekey while it runs: the keying it schedules finds this run
    await new Promise((r) => setTimeout(r, 20));
    fail(new Error('server unreachable'));
    await expect(run).rejects.toThrow('server unreachable');
    await new Promise((r) => setTimeout(r, 20));
    await keying.close();
    expect(errors).toEqual([]);
  });
});

describe('ChatKeying: its own session id', () => {
  it('opens its envelope under the session id the server named, whoever else a key ring lists with its key', async () => {
    const pair = generateKeyPair();
    const publicKey = publicKeyToBase64(pair.publicKey);
    const chatKey = generateChatKey();
    const own = 4;
    const client = {
      // A ring listing our key twice: under our session, and under another user's session that
      // registered it too (as a server could list it); the envelope is ours.
      chatKey: async () => ({
        epoch: 1,
        envelope: wrapChatKey({
          chatKey,
          recipientPublicKey: pair.publicKey,
          chatId: 1,
          epoch: 1,
          recipientSessionId: own,
        }),
        key_ring: { '3': { [String(own)]: publicKey }, '5': { '9': publicKey } },
      }),
    } as unknown as ParlorClient;
    const { keying, errors } = keyingOf(client, pair, { attempts: 2 });
    keying.setSessionId(own);
    expect(await keying.ensure(1)).toBe(true);
    expect(keying.sessionId).toBe(own);
    expect(Buffer.from(keying.keys.current(1)?.key ?? []).equals(Buffer.from(chatKey))).toBe(true);
    await keying.close();
    expect(errors).toEqual([]);
  });
});

describe('ChatKeying: a lost keying race', () => {
  it('reads its envelope from GET …/keys when the winner’s room:key does not come in time', async () => {
    const pair = generateKeyPair();
    const publicKey = publicKeyToBase64(pair.publicKey);
    const own = 4;
    const winnersKey = generateChatKey();
    const ring = { '3': { [String(own)]: publicKey } };
    let reads = 0;
    const client = {
      // The first read: nobody keyed epoch 1 yet. Then another member keys it first (our share is
      // refused with 409) and the server holds our envelope; its room:key never reaches us.
      chatKey: async () => {
        reads++;
        const envelope =
          reads === 1
            ? null
            : wrapChatKey({
                chatKey: winnersKey,
                recipientPublicKey: pair.publicKey,
                chatId: 1,
                epoch: 1,
                recipientSessionId: own,
              });
        return { epoch: 1, envelope, key_ring: ring };
      },
      shareKeys: async () => {
        throw ParlorApiError.fromAck({ code: 'ERR_EPOCH_ALREADY_KEYED', message: 'Keyed already.' });
      },
    } as unknown as ParlorClient;
    const { keying, errors } = keyingOf(client, pair, { keyWaitMs: 50 });
    keying.setSessionId(own);
    expect(await keying.ensure(1)).toBe(true);
    expect(reads).toBe(2);
    expect(Buffer.from(keying.keys.current(1)?.key ?? []).equals(Buffer.from(winnersKey))).toBe(true);
    await keying.close();
    expect(errors).toEqual([]);
  });
});
