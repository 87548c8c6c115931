import { createPrivateKey, createPublicKey, diffieHellman } from 'node:crypto';
import { type KeyRing, Limits, type ShareKeysBody } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { afterCommit, RunAgain } from '../../platform/db/after-commit.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import { isUniqueViolation, type Tx } from '../users/users.store.js';
import type { KeysStore, RingEntry } from './keys.store.js';

/** What the keys rules need to know of chats, wired by hand from the chats store. */
export interface Membership {
  chatIdsOf(userId: number, tx?: Tx): Promise<number[]>;
  /** Locks the chat row for the transaction; its current epoch and whether it is archived, or null. */
  lockChat(chatId: number, tx: Tx): Promise<{ epoch: number; archived: boolean } | null>;
}

export function toWireRing(entries: RingEntry[]): KeyRing {
  const ring: KeyRing = {};
  for (const e of entries) {
    const perUser = ring[String(e.userId)] ?? {};
    perUser[String(e.sessionId)] = e.publicKey;
    ring[String(e.userId)] = perUser;
  }
  return ring;
}

/** A fixed private key used only to probe submitted public keys (never for secrecy). */
const PROBE = createPrivateKey({
  key: { kty: 'OKP', crv: 'X25519', d: Buffer.alloc(32, 7).toString('base64url'), x: '' },
  format: 'jwk',
});

/** X25519's field prime, 2^255 - 19. */
const P = 2n ** 255n - 19n;

/**
 * True when the text is standard base64 of exactly 32 bytes that is a usable X25519 public key in
 * its one canonical encoding. RFC 7748 section 5 ignores the top bit of the last byte and reduces
 * u modulo p, so a key with that bit set (or a u of p or more) is the same key as the one written
 * without it: registered under another session, it would pass the unique index on the text while
 * rings list one key twice (docs/e2e.md, "A malicious member"). Honest clients never write one
 * (X25519 outputs u below p). A low-order point would make every envelope to it readable by anyone
 * (the shared secret is all zeros), so it is refused too: node:crypto's X25519 fails on exactly those.
 */
export function isUsableX25519Key(b64: string): boolean {
  if (!/^[A-Za-z0-9+/]{43}=$/.test(b64)) return false;
  const raw = Buffer.from(b64, 'base64');
  if (raw.length !== 32) return false;
  // Little-endian: the last byte is the most significant; one with its top bit set is 2^255 or more.
  if (BigInt(`0x${Buffer.from(raw).reverse().toString('hex')}`) >= P) return false;
  try {
    const publicKey = createPublicKey({
      key: { kty: 'OKP', crv: 'X25519', x: raw.toString('base64url') },
      format: 'jwk',
    });
    return !diffieHellman({ privateKey: PROBE, publicKey }).every((b) => b === 0);
  } catch {
    return false;
  }
}

/**
 * The rule of a share's body that its schema cannot state: one envelope per session. Its route
 * checks it before anything is read, so such a body is 400 ERR_VALIDATION whatever else is wrong
 * with the request (the epoch, the caller's key, the ring), and spends no write (write-limit.ts).
 */
export function assertOneEnvelopePerSession(body: ShareKeysBody): void {
  if (new Set(body.envelopes.map((e) => e.session_id)).size === body.envelopes.length) return;
  throw appError('ERR_VALIDATION', 'One envelope per session.', {
    errors: [{ path: 'body/envelopes', message: 'must hold one envelope per session_id' }],
  });
}

export interface KeysDeps {
  db: Db;
  store: KeysStore;
  clock: Clock;
  realtime: Pick<Realtime, 'emitTo'>;
  membership: Membership;
}

/**
 * DESIGN.md section 7 on the server side: public keys per session, the key ring, epochs and the
 * envelopes that carry chat keys. The server never sees a chat key, only envelopes.
 */
export function makeKeysService({ db, store, clock, realtime, membership }: KeysDeps) {
  /** Raises the epoch of chats and tells their members to rekey (call after the commit). */
  const announceRekey = (bumped: { id: number; epoch: number }[]) => {
    for (const c of bumped) realtime.emitTo(rooms.chat(c.id), 'room:rekey', { chat_id: c.id, epoch: c.epoch });
  };

  return {
    announceRekey,
    /** Raises epochs inside the caller's transaction; announce with announceRekey after commit. */
    bumpEpochs: (chatIds: number[], tx?: Tx) => store.bumpEpochs(chatIds, clock.now(), tx),

    async ring(chatId: number, tx?: Tx): Promise<KeyRing> {
      return toWireRing(await store.ring(chatId, clock.now(), tx));
    },

    /**
     * Spec 4.6 rule 5: a new or replaced key is registered; the identical key is unchanged. A key
     * another session (of any user) has registered is refused with ERR_PUBLIC_KEY_IN_USE: key
     * rings would list it under both sessions, and a client looking for its own key there could
     * take the other session for its own (the unique index on the key makes this hold for
     * registrations at once). A replaced key moves active chats to a new epoch, never archived
     * (read-only) ones.
     */
    async register(userId: number, sessionId: number, publicKey: string): Promise<'registered' | 'unchanged'> {
      if (!isUsableX25519Key(publicKey)) {
        throw appError(
          'ERR_VALIDATION',
          'public_key must be base64 of the 32 bytes of a usable X25519 key, as X25519 writes it.',
          {
            errors: [{ path: 'body/public_key', message: 'is not a usable X25519 public key in its canonical form' }],
          },
        );
      }
      const result = await db.transaction(async (tx) => {
        // Lock order (docs/api.md Moderation): the user's chats (only for a replacement: their
        // epochs rise), the user's row (KeysStore.lockUser: a join of this user at the same time
        // comes wholly before or after), then the session's row, all before the key is written;
        // a ban, an evicting login or a logout takes them in the same order. Whether the key is
        // replaced is read first without a lock to know whether the chats come first.
        const seen = await store.keyOf(sessionId, tx);
        if (seen === publicKey) {
          // The identical key again (a client registering once more): nothing is written, so only
          // the session's row is locked, to answer for a live session only.
          if (!(await store.lockLiveSession(sessionId, clock, tx))) throw appError('ERR_UNAUTHENTICATED');
          if ((await store.keyOf(sessionId, tx)) === publicKey) return null;
          throw new RunAgain('the session key changed meanwhile');
        }
        const replacing = seen !== null;
        if (replacing) await store.lockChatsOf(userId, tx);
        await store.lockUser(userId, tx);
        // Two registrations at once for one session (two tabs share its cookie) would both read
        // no key and neither raise the epochs; in turn, the second reads the first's key. A session
        // that ended while this waited (a logout in another tab, a ban, its expiry) removed its keys
        // when it ended: it takes no new one.
        if (!(await store.lockLiveSession(sessionId, clock, tx))) throw appError('ERR_UNAUTHENTICATED');
        const old = await store.keyOf(sessionId, tx);
        if (old === publicKey) return null;
        // A first key was registered between the read above and the locks (the other tab): this
        // is a replacement after all, and the chats' locks come before the user's. The next run
        // reads that key and takes them first.
        if (old !== null && !replacing) throw new RunAgain('the session was keyed meanwhile');
        try {
          await store.upsertKey(sessionId, userId, publicKey, clock.now(), tx);
        } catch (e) {
          if (isUniqueViolation(e)) throw appError('ERR_PUBLIC_KEY_IN_USE');
          throw e;
        }
        const chatIds = await membership.chatIdsOf(userId, tx);
        // A replaced key may be held by someone else now: the chats it could read move on.
        const bumped = old === null ? [] : await store.bumpEpochs(chatIds, clock.now(), tx);
        return { chatIds, bumped };
      });
      if (!result) return 'unchanged';
      for (const chatId of result.chatIds) {
        realtime.emitTo(rooms.chat(chatId), 'portal:key_added', {
          chat_id: chatId,
          user_id: userId,
          session_id: sessionId,
          public_key: publicKey,
        });
      }
      announceRekey(result.bumped);
      return 'registered';
    },

    /** lockChatsOfUser, for a path outside this module that raises the user's chats' epochs (ahead of the user's row). */
    lockChatsOf: (userId: number, tx: Tx) => store.lockChatsOf(userId, tx),

    /**
     * Removes the keys of ended sessions inside the transaction that ends them, and raises the
     * epoch of the user's active chats there too (archived ones are read-only and keep theirs, as
     * do the direct chats of a stranger whose last session this ends: they are archived next):
     * the sessions end, lose their keys and leave the chats' current epoch together or not at all
     * (DESIGN.md 9). `portal:key_removed` and `room:rekey`
     * go out once it commits (before the transaction's promise resolves, see after-commit.ts).
     * `portal:key_removed` names each removed session, or says `session_id: null` (every session
     * of that user, spec 6: "ban or full disconnect") once, for `wholeUser` (a ban) and for the
     * end of the user's last live session (a full disconnect: a logout, destroy or expiry that
     * leaves the user no live session; a login's eviction never does, its new session stays).
     */
    async removeSessionsIn(tx: Tx, userId: number, sessionIds: number[], wholeUser = false): Promise<void> {
      const removed = await store.deleteKeys(sessionIds, tx);
      if (removed.length === 0 && !wholeUser) return;
      // Lock order: the user's chats (when their epochs rise), the user's row, then the sessions'
      // rows. The caller took the first two before it ended the sessions (a ban itself, the
      // others through keys.store lockAheadOfSessionsEnd), so here they are held already. A key
      // registered after that read none was not foreseen: taking the chats now, behind the session rows,
      // could deadlock with a ban or a key replacement, so the transaction runs again and its
      // next run reads that key and locks the chats first.
      if (removed.length > 0 && !store.holdsChatsOf(userId, tx)) throw new RunAgain('an ended session was keyed');
      await store.lockUser(userId, tx);
      // Whether any session is left, read under the user's row: a login holds that row while it
      // opens a session, a key registration while it writes a key, and the end of a keyed session
      // while it ends it, so none of those comes between this read and the commit. (The sessions
      // ended here read as ended: this transaction wrote them.) The end of a session without a key
      // at the same time takes no such lock and may still read as live: then the removed sessions
      // are named, which drops the same keys from the rings as null would.
      const everySession = wholeUser || !(await store.hasLiveSession(userId, clock.now(), tx));
      const chatIds = await membership.chatIdsOf(userId, tx);
      // A stranger never signs in again: the end of its last session (a ban's included) ends its
      // active direct chats as a leave does once this commits (matchmaking sessionsEnded), archived
      // at the epoch they have. Raised here, they would be archived at an epoch nobody can key (an
      // archived chat takes no shares), their peers told to rekey, and no longer served the key of
      // their history. Only that the stranger's keys left the ring is announced for them.
      const exceptDirect = everySession && (await store.isStranger(userId, tx));
      const bumped = removed.length > 0 ? await store.bumpEpochs(chatIds, clock.now(), tx, { exceptDirect }) : [];
      await afterCommit(tx, async () => {
        const ids: (number | null)[] = everySession ? [null] : removed;
        for (const chatId of chatIds) {
          for (const sessionId of ids) {
            realtime.emitTo(rooms.chat(chatId), 'portal:key_removed', {
              chat_id: chatId,
              user_id: userId,
              session_id: sessionId,
            });
          }
        }
        announceRekey(bumped);
      });
    },

    /** The caller session's envelope at the current epoch (null until someone shares it). */
    async chatKey(chatId: number, epoch: number, sessionId: number) {
      const env = await store.envelope(chatId, epoch, sessionId);
      return { epoch, envelope: env?.wrapped ?? null, key_ring: toWireRing(await store.ring(chatId, clock.now())) };
    },

    async hasKey(chatId: number, epoch: number, sessionId: number, tx?: Tx): Promise<boolean> {
      return (await store.envelope(chatId, epoch, sessionId, tx)) !== undefined;
    },

    /**
     * Stores envelopes at the current epoch. The first share of an epoch keys it: it names the
     * caller and every session of the key ring or, for a ring of more sessions than one request
     * carries (KEY_SHARE_ENVELOPES_MAX), that many of them; the chat's envelopes of earlier epochs
     * go then (nothing reads them: clients keep the keys they held). Later shares come from
     * sessions that hold the key and only add envelopes for sessions still lacking one. An archived
     * chat is read-only: ERR_CHAT_READ_ONLY, nothing stored. The body holds one envelope per
     * session: its route checked that first (assertOneEnvelopePerSession).
     */
    async share(chatId: number, sessionId: number, body: ShareKeysBody): Promise<{ epoch: number; stored: number }> {
      const { stored, epoch, sender } = await db.transaction(async (tx) => {
        const chat = await membership.lockChat(chatId, tx);
        // The ring is read as of now, under the chat's row: a time read before the wait for it
        // would keep a session that expired meanwhile in the ring, and give it an envelope.
        const now = clock.now();
        if (chat === null) throw appError('ERR_CHAT_NOT_FOUND');
        if (chat.archived) throw appError('ERR_CHAT_READ_ONLY');
        const { epoch } = chat;
        if (body.epoch !== epoch) throw appError('ERR_EPOCH_MISMATCH');
        if ((await store.keyOf(sessionId, tx)) === null) throw appError('ERR_NO_SESSION_KEY');
        const ring = await store.ring(chatId, now, tx);
        const inRing = new Set(ring.map((e) => e.sessionId));
        const targets = new Set(body.envelopes.map((e) => e.session_id));
        if ([...targets].some((id) => !inRing.has(id))) throw appError('ERR_KEY_RING_CHANGED');
        if ((await store.envelopeCount(chatId, epoch, tx)) === 0) {
          // The keying share: the whole ring, or as much of it as one request carries when the
          // ring is larger (the keyer, a holder from then on, tops up the rest).
          const keying = Math.min(inRing.size, Limits.KEY_SHARE_ENVELOPES_MAX);
          if (targets.size !== keying || !targets.has(sessionId)) throw appError('ERR_KEY_RING_CHANGED');
          await store.deleteEnvelopesBefore(chatId, epoch, tx);
        } else if (targets.has(sessionId) || !(await store.envelope(chatId, epoch, sessionId, tx))) {
          // A holder tops up other sessions and never itself; a share naming the caller is a
          // keying attempt that lost the race.
          throw appError('ERR_EPOCH_ALREADY_KEYED');
        }
        const rows = body.envelopes.map((e) => ({
          chatId,
          epoch,
          recipientSessionId: e.session_id,
          senderSessionId: sessionId,
          wrapped: e.wrapped,
          createdAt: now,
        }));
        return { stored: await store.insertEnvelopes(rows, tx), epoch, sender: sessionId };
      });
      const wrappedFor = new Map(body.envelopes.map((e) => [e.session_id, e.wrapped]));
      for (const recipient of stored) {
        realtime.emitTo(rooms.session(recipient), 'room:key', {
          chat_id: chatId,
          epoch,
          envelope: wrappedFor.get(recipient) ?? '',
          sender_session_id: sender,
        });
      }
      return { epoch, stored: stored.length };
    },
  };
}

export type KeysService = ReturnType<typeof makeKeysService>;
