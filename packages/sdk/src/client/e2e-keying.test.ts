import { describe, expect, it } from 'vitest';
import { generateChatKey, generateKeyPair, publicKeyToBase64, unwrapChatKey, wrapChatKey } from '../crypto/index.js';
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
    onReplaced: () => {},
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

describe('ChatKeying: a membership that ended under a background keying', () => {
  it('ends the keying a room:rekey started quietly on ERR_NOT_CHAT_MEMBER or ERR_CHAT_NOT_FOUND, and reports other failures', async () => {
    const outcomes: Record<string, string[]> = {};
    for (const code of ['ERR_NOT_CHAT_MEMBER', 'ERR_CHAT_NOT_FOUND', 'ERR_INTERNAL']) {
      let reads = 0;
      // A kick's room:rekey came before its room:left: the key read is refused.
      const client = {
        chatKey: async () => {
          reads++;
          throw ParlorApiError.fromAck({ code, message: 'Refused.' });
        },
      } as unknown as ParlorClient;
      const { keying, errors } = keyingOf(client, generateKeyPair(), { jitterMs: 1 });
      keying.rekey(1, 2);
      await new Promise((r) => setTimeout(r, 40));
      await keying.close();
      expect(reads).toBe(1);
      outcomes[code] = errors.map((e) => `${e.code} ${(e.cause as ParlorApiError).code}`);
    }
    expect(outcomes).toEqual({
      ERR_NOT_CHAT_MEMBER: [],
      ERR_CHAT_NOT_FOUND: [],
      ERR_INTERNAL: ['BACKGROUND_FAILURE ERR_INTERNAL'],
    });
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

describe('ChatKeying: sessions announced while the key was lacking, and later epochs', () => {
  const own = 4;
  type Share = { epoch: number; envelopes: { session_id: number; wrapped: string }[] };

  /** A keying of chat 1 at `epoch` without its key, over a client that records its shares. */
  function lacking(
    epoch: number,
    keyState: (() => unknown) | null = null,
    opts: Partial<ConstructorParameters<typeof ChatKeying>[0]> = {},
  ) {
    const pair = generateKeyPair();
    const shares: Share[] = [];
    let reads = 0;
    const client = {
      chatKey: async () => {
        reads++;
        if (!keyState) throw new Error('no GET …/keys expected');
        return keyState();
      },
      shareKeys: async (_chatId: number, body: Share) => {
        shares.push(body);
        return { epoch: body.epoch, stored: body.envelopes.length };
      },
    } as unknown as ParlorClient;
    const { keying, errors } = keyingOf(client, pair, { jitterMs: 1, ...opts });
    keying.setSessionId(own);
    keying.keys.raiseEpoch(1, epoch);
    /** This session's envelope of `chatKey` at `at`, as room:key brings it. */
    const receive = (at: number, chatKey = generateChatKey()) =>
      keying.accept({
        chatId: 1,
        epoch: at,
        sender: 3,
        envelope: wrapChatKey({
          chatKey,
          recipientPublicKey: pair.publicKey,
          chatId: 1,
          epoch: at,
          recipientSessionId: own,
        }),
      });
    return { keying, errors, shares, receive, reads: () => reads, publicKey: publicKeyToBase64(pair.publicKey) };
  }
  const key = () => publicKeyToBase64(generateKeyPair().publicKey);
  const sessionsOf = (shares: Share[]) => shares.flatMap((s) => s.envelopes.map((e) => [s.epoch, e.session_id]));
  /** Lets the stand-in client's answers and the coalescing timer (15 ms) run. */
  const settle = () => new Promise((r) => setTimeout(r, 40));

  it('portal:key_removed drops a session (or every session of its user) it was waiting to give the key to', async () => {
    // The server's ring still lists them all: the drop is the client's own.
    const ring = { '9': { '20': key(), '21': key() }, '8': { '30': key(), '31': key() } };
    const { keying, errors, shares, receive } = lacking(1, () => ({ epoch: 1, envelope: null, key_ring: ring }));
    keying.keyAdded(1, 9, 20, key());
    keying.keyAdded(1, 9, 21, key());
    keying.keyAdded(1, 8, 30, key());
    keying.keyAdded(1, 8, 31, key());
    await settle(); // the coalesced share finds no key: the sessions wait for it
    keying.keyRemoved(1, 9, null); // user 9 removed (kicked, banned, left): all its sessions
    keying.keyRemoved(1, 8, 31); // one session of user 8 ended
    expect(receive(1)).toBe(true);
    await settle();
    expect(sessionsOf(shares)).toEqual([[1, 30]]);
    await keying.close();
    expect(errors).toEqual([]);
  });

  it('gives kept keys imported for the current epoch to the sessions announced before, and to later ones', async () => {
    const ring = { '9': { '20': key(), '21': key() } };
    const { keying, errors, shares } = lacking(1, () => ({ epoch: 1, envelope: null, key_ring: ring }));
    keying.keyAdded(1, 9, 20, key());
    await settle(); // the coalesced share finds no key: session 20 waits for it
    keying.importKeys(1, new Map([[1, generateChatKey()]]));
    await settle();
    expect(sessionsOf(shares)).toEqual([[1, 20]]);
    keying.keyAdded(1, 9, 21, key());
    await settle();
    expect(sessionsOf(shares)).toEqual([
      [1, 20],
      [1, 21],
    ]);
    await keying.close();
    expect(errors).toEqual([]);
  });

  it('schedules a share for an announcement that follows one whose share found no key', async () => {
    const ring = { '9': { '20': key(), '21': key() } };
    const { keying, errors, shares } = lacking(1, () => ({ epoch: 1, envelope: null, key_ring: ring }));
    keying.keyAdded(1, 9, 20, key());
    await settle(); // no key: session 20 waits for it
    keying.keys.store(1, 1, generateChatKey()); // the key came by a way that serves nobody
    keying.keyAdded(1, 9, 21, key());
    await settle();
    expect(sessionsOf(shares)).toEqual([
      [1, 20],
      [1, 21],
    ]);
    await keying.close();
    expect(errors).toEqual([]);
  });

  it('keeps sessions announced before the answer to its room:join, and serves them once joined', async () => {
    const ring = { '9': { '20': key(), '21': key() } };
    let joined = false;
    const { keying, errors, shares, receive } = lacking(1, () => ({ epoch: 1, envelope: null, key_ring: ring }), {
      isJoined: () => joined,
    });
    keying.keyAdded(1, 9, 21, key()); // no join in flight: not ours to serve
    const ended = keying.joinStarted(1);
    keying.keyAdded(1, 9, 20, key());
    await settle();
    expect(shares).toEqual([]);
    joined = true;
    ended(1);
    expect(receive(1)).toBe(true);
    await settle();
    expect(sessionsOf(shares)).toEqual([[1, 20]]);
    await keying.close();
    expect(errors).toEqual([]);
  });

  it('drops the sessions announced during a room:join that failed, or that entered another chat', async () => {
    const ring = { '9': { '20': key() } };
    let joined = false;
    const { keying, errors, shares, receive } = lacking(1, () => ({ epoch: 1, envelope: null, key_ring: ring }), {
      isJoined: () => joined,
    });
    const refused = keying.joinStarted(1);
    keying.keyAdded(1, 9, 20, key());
    refused();
    const byInvite = keying.joinStarted(null); // its chat is known from the answer only
    keying.keyAdded(1, 9, 20, key());
    byInvite(2);
    joined = true; // a later join of chat 1
    expect(receive(1)).toBe(true);
    await settle();
    expect(shares).toEqual([]);
    await keying.close();
    expect(errors).toEqual([]);
  });

  it('leaves sessions announced before a room:rekey to whoever keys the new epoch (its whole ring)', async () => {
    const chatKey = generateChatKey();
    let state: unknown = null;
    const { keying, errors, shares, receive, publicKey } = lacking(1, () => state);
    keying.keyAdded(1, 9, 20, key());
    await settle();
    // The winner of epoch 2 wrapped it for the ring the server listed (session 20 in it): our envelope is there.
    state = { epoch: 2, envelope: null, key_ring: { '1': { [String(own)]: publicKey }, '9': { '20': key() } } };
    keying.rekey(1, 2);
    expect(receive(2, chatKey)).toBe(true);
    await settle();
    expect(shares).toEqual([]);
    await keying.close();
    expect(errors).toEqual([]);
  });

  it('gives a later epoch’s key to a session announced at an earlier epoch only if that epoch’s ring lists it, with the listed key', async () => {
    const later = generateKeyPair();
    const { keying, errors, shares, receive, reads, publicKey } = lacking(1, () => ({
      epoch: 2,
      envelope: null,
      // Session 20 is gone at epoch 2 (its user was kicked); session 30 is listed with a new key.
      key_ring: { '1': { [String(own)]: publicKey }, '8': { '30': publicKeyToBase64(later.publicKey) } },
    }));
    keying.keyAdded(1, 9, 20, key());
    keying.keyAdded(1, 8, 30, key());
    await settle();
    // The chat reached epoch 2 without a room:rekey seen here (e.g. read from GET …/keys), and its key comes.
    keying.keys.raiseEpoch(1, 2);
    const chatKey = generateChatKey();
    expect(receive(2, chatKey)).toBe(true);
    await settle();
    expect(reads()).toBe(1);
    expect(sessionsOf(shares)).toEqual([[2, 30]]);
    const wrapped = shares[0]?.envelopes[0]?.wrapped as string;
    const opened = unwrapChatKey({
      envelope: wrapped,
      recipientPrivateKey: later.privateKey,
      chatId: 1,
      epoch: 2,
      recipientSessionId: 30,
    });
    expect(Buffer.from(opened).equals(Buffer.from(chatKey))).toBe(true);
    await keying.close();
    expect(errors).toEqual([]);
  });

  it('shareWith a ring of an earlier epoch (a join’s) reads the ring again, and shares nothing once the chat moved on', async () => {
    let state: unknown = null;
    const { keying, errors, shares, receive, publicKey } = lacking(2, () => state);
    expect(receive(2)).toBe(true);
    const joinRing = { '1': { [String(own)]: publicKey }, '9': { '20': key() }, '8': { '30': key() } };
    const thirty = key();
    state = { epoch: 2, envelope: null, key_ring: { '1': { [String(own)]: publicKey }, '8': { '30': thirty } } };
    await keying.shareWith(1, joinRing, 1, true);
    expect(sessionsOf(shares)).toEqual([[2, 30]]);
    // The chat moved on to epoch 3 (another removal): the next keying covers its ring.
    state = { epoch: 3, envelope: null, key_ring: { '1': { [String(own)]: publicKey } } };
    await keying.shareWith(1, joinRing, 1, true);
    expect(shares).toHaveLength(1);
    await keying.close();
    expect(errors).toEqual([]);
  });
});

describe('ChatKeying: announcements are checked against the ring of the key’s epoch', () => {
  const own = 10;
  type Share = { epoch: number; envelopes: { session_id: number }[] };
  const key = () => publicKeyToBase64(generateKeyPair().publicKey);
  const settle = () => new Promise((r) => setTimeout(r, 40));

  /** A keying of chat 7 holding the key of `epoch`, over a client whose ring is `ring()`. */
  function holding(epoch: number, ring: (publicKey: string) => Record<string, Record<string, string>>) {
    const pair = generateKeyPair();
    const publicKey = publicKeyToBase64(pair.publicKey);
    const shares: Share[] = [];
    let reads = 0;
    const client = {
      chatKey: async () => {
        reads++;
        return { epoch, envelope: null, key_ring: ring(publicKey) };
      },
      shareKeys: async (_chatId: number, body: Share) => {
        shares.push(body);
        return { epoch: body.epoch, stored: body.envelopes.length };
      },
    } as unknown as ParlorClient;
    const replaced: E2ESessionError[] = [];
    const { keying, errors } = keyingOf(client, pair, { onReplaced: (e) => replaced.push(e) });
    keying.setSessionId(own);
    keying.keys.raiseEpoch(7, epoch);
    keying.keys.store(7, epoch, generateChatKey());
    const sessions = () => shares.flatMap((s) => s.envelopes.map((e) => [s.epoch, e.session_id]));
    return { keying, errors, replaced, sessions, reads: () => reads, publicKey };
  }

  it('does not wrap the key of the epoch after a kick for a session announced after the kick’s rekey', async () => {
    // The server's ring at epoch 2: our session only (the kicked user is gone).
    const { keying, errors, sessions, reads } = holding(2, (mine) => ({ '1': { [String(own)]: mine } }));
    // The kick's events, then an announcement of the kicked user's new session sent before the kick committed.
    keying.keyRemoved(7, 99, null);
    keying.rekey(7, 2);
    keying.keyAdded(7, 99, 500, key());
    await settle();
    await keying.close();
    expect(reads()).toBe(1);
    expect(sessions()).toEqual([]);
    expect(errors).toEqual([]);
  });

  it('reads the ring once per batch of announcements and wraps for the listed sessions under the listed keys', async () => {
    const listed = generateKeyPair();
    const { keying, errors, sessions, reads } = holding(3, (mine) => ({
      '1': { [String(own)]: mine },
      '8': { '30': publicKeyToBase64(listed.publicKey), '31': key() },
    }));
    keying.keyAdded(7, 8, 30, key());
    keying.keyAdded(7, 8, 31, key());
    keying.keyAdded(7, 9, 40, key()); // not in the ring at epoch 3
    await settle();
    expect(reads()).toBe(1);
    expect(sessions()).toEqual([
      [3, 30],
      [3, 31],
    ]);
    await keying.close();
    expect(errors).toEqual([]);
  });
});

describe('ChatKeying: another key registered for its own session (a second tab)', () => {
  const own = 10;
  const settle = () => new Promise((r) => setTimeout(r, 40));

  function keyingWithRing(ring: (publicKey: string) => Record<string, Record<string, string>>) {
    const pair = generateKeyPair();
    const publicKey = publicKeyToBase64(pair.publicKey);
    let reads = 0;
    const shares: unknown[] = [];
    const client = {
      chatKey: async () => {
        reads++;
        return { epoch: 1, envelope: null, key_ring: ring(publicKey) };
      },
      shareKeys: async (_chatId: number, body: { epoch: number }) => {
        shares.push(body);
        return { epoch: body.epoch, stored: 0 };
      },
    } as unknown as ParlorClient;
    const replaced: E2ESessionError[] = [];
    const { keying, errors } = keyingOf(client, pair, { onReplaced: (e) => replaced.push(e) });
    keying.setSessionId(own);
    return { keying, errors, replaced, shares, reads: () => reads, publicKey };
  }

  it('stops for good and reports KEY_REPLACED when the ring confirms the announced key', async () => {
    const other = publicKeyToBase64(generateKeyPair().publicKey);
    const { keying, errors, replaced, reads } = keyingWithRing(() => ({ '1': { [String(own)]: other } }));
    keying.keyAdded(1, 1, own, other);
    keying.keyAdded(2, 1, own, other); // the same registration, announced in another chat
    await settle();
    expect(reads()).toBe(1);
    expect(replaced.map((e) => [e.code, e.details])).toEqual([['KEY_REPLACED', { sessionId: own, publicKey: other }]]);
    // Its work has stopped: a keying now fails at once.
    await expect(keying.current(1, 0)).rejects.toMatchObject({ code: 'CLOSED' });
    await keying.close();
    expect(errors).toEqual([]);
  });

  it('a ring read that lists another key for this session ends a keying with KEY_REPLACED', async () => {
    const other = publicKeyToBase64(generateKeyPair().publicKey);
    const { keying, replaced, shares } = keyingWithRing(() => ({ '1': { [String(own)]: other } }));
    await expect(keying.ensure(1)).rejects.toMatchObject({ code: 'KEY_REPLACED' });
    expect(replaced).toHaveLength(1);
    expect(shares).toEqual([]);
    await keying.close();
  });

  it('stays open when the announcement is of its own key, or the ring still lists its key', async () => {
    const { keying, errors, replaced, reads, publicKey } = keyingWithRing((mine) => ({ '1': { [String(own)]: mine } }));
    keying.keyAdded(1, 1, own, publicKey);
    await settle();
    expect(reads()).toBe(0);
    keying.keyAdded(1, 1, own, publicKeyToBase64(generateKeyPair().publicKey)); // stale: read before our registration
    await settle();
    expect(reads()).toBe(1);
    expect(replaced).toEqual([]);
    await keying.close();
    expect(errors).toEqual([]);
  });
});
