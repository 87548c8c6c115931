import { Limits } from '@parlor/protocol';
import type { SessionResolver } from '../../platform/auth.js';
import { type PartFailure, partsFailed } from '../../platform/background.js';
import type { Clock } from '../../platform/clock.js';
import { afterCommit } from '../../platform/db/after-commit.js';
import type { Db, SweepCursor } from '../../platform/db/index.js';
import { drain } from '../../platform/drain.js';
import { appError } from '../../platform/errors.js';
import type { GeoLookup } from '../../platform/geo.js';
import { batched, batchedWrite } from '../../platform/group-commit.js';
import { randomToken, sha256Hex } from '../../platform/secrets.js';
import { effectiveState } from '../users/users.presenter.js';
import type { Tx } from '../users/users.store.js';
import { type AuthCache, resolvedOf, toAuthEntry } from './sessions.cache.js';
import { toActiveSession, toHistoryEntry } from './sessions.presenter.js';
import type { SessionRow, SessionsStore } from './sessions.store.js';

/** How often every node ends the sessions that expired (their keys, their chats' epochs, their sockets). */
export const EXPIRY_SWEEP_INTERVAL_MS = 60_000;
/** Sessions the expiry sweep reads per batch. */
export const EXPIRY_SWEEP_BATCH = 200;
/** Batches per tick at most: 2,000 sessions per node and tick (the next tick goes on with a backlog). */
export const EXPIRY_SWEEP_MAX_BATCHES = 10;
/** What an expiry's failures are named by (wiring runs the sweep as the `session-expiry` task). */
const EXPIRY_TASK = 'session-expiry';

/** How often a live session records activity; reads in between cost no write. */
const TOUCH_EVERY_MS = 60_000;
const HISTORY_LIMIT = 50;
export const TOKEN_SUFFIX_LENGTH = 6;

/** Admin and Owner sessions last 1 day, others 30 (spec 5). */
export function sessionTtlMs(permissionLevel: number): number {
  return permissionLevel >= 2 ? Limits.SESSION_TTL_STAFF_MS : Limits.SESSION_TTL_USER_MS;
}

/** Sessions of one user that ended together, and why (logout, destroyed, evicted, expired). */
export interface SessionsEnd {
  userId: number;
  sessionIds: number[];
  reason: string;
}
/** A live session's expiry and what a socket's handshake read of its user, read again (liveOwner). */
export interface LiveOwner {
  expiresAt: Date;
  permissionLevel: number;
  username: string;
}

export type SessionsEndedListener = (e: SessionsEnd) => void;
/** Work that must commit with the end of sessions (their keys go, their chats rekey): runs in its transaction. */
export type SessionsEndingHook = (e: SessionsEnd, tx: Tx) => Promise<void>;

export interface SessionsDeps {
  db: Db;
  store: SessionsStore;
  clock: Clock;
  geo: GeoLookup;
  /** Token hash → live session and user, kept right by the user-change channel; none: SQL every time. */
  cache?: AuthCache;
}

export function makeSessionsService({ db, store, clock, geo, cache }: SessionsDeps) {
  /** Look-ups that miss the cache in one event-loop turn (a burst of handshakes) share a statement. */
  const lookup = batched((hashes: string[]) => store.resolve(hashes));
  /** Liveness checks of one turn (a burst of connections) share a statement too. */
  const owners = batched((ids: number[]) => store.liveOwners(ids, clock.now()));
  /**
   * Activity of the sessions seen in one turn (and while the previous write runs) is one UPDATE:
   * after a restart every client reconnects at once, and each would otherwise write its own row.
   */
  const touch = batchedWrite((ids: number[]) => store.touch(ids, clock.now()));
  const listeners: SessionsEndedListener[] = [];
  const hooks: SessionsEndingHook[] = [];
  const ended = (userId: number, sessionIds: number[], reason: string) => {
    if (sessionIds.length === 0) return;
    for (const l of listeners) l({ userId, sessionIds, reason });
  };
  /**
   * Inside the transaction that will end these sessions, before it writes any session row: the
   * locks that come ahead of session rows in the lock order (docs/api.md Moderation), those the
   * `onEnding` hooks need when a key goes (the user's chats, then the user's row).
   */
  const lockAhead = (userId: number, sessionIds: number[], tx: Tx) => store.lockAheadOfEnding(userId, sessionIds, tx);
  /**
   * Inside a transaction that a session's request runs to end others, after lockAhead and before
   * it writes a session row: locks the caller's session row with those of `ending`, in id order,
   * and answers 401 ERR_UNAUTHENTICATED (nothing written) when the caller's session is no longer
   * live. A session that ended while its request waited (destroyed by another, expired) acts no
   * more: two sessions destroying each other run one after the other, and the second answers 401
   * (spec 5: the ended session's cookie becomes invalid).
   */
  const lockCaller = async (currentId: number, ending: number[], tx: Tx) => {
    const live = await store.lockLive([currentId, ...ending], clock, tx);
    if (!live.includes(currentId)) throw appError('ERR_UNAUTHENTICATED');
  };
  /**
   * Inside the transaction that ended the sessions: the `onEnding` hooks run in it, and the
   * `onEnded` listeners are queued for its commit, ahead of what the hooks queue (the sockets drop
   * before the chats hear of the rekey). All of it is done before the transaction's promise
   * resolves, so before the route answers (DESIGN.md 9).
   */
  const finishEnding = async (userId: number, sessionIds: number[], reason: string, tx: Tx) => {
    if (sessionIds.length === 0) return;
    await afterCommit(tx, async () => ended(userId, sessionIds, reason));
    for (const hook of hooks) await hook({ userId, sessionIds, reason }, tx);
  };

  /**
   * Ends the sessions among `due` that expired and that nothing ended yet, through the same path
   * as a logout: one transaction per user (its key rows go and its chats move to a new epoch with
   * the end; its sockets drop on every node once that commits). Sessions another node is ending
   * are skipped (or, when one has a key, waited for: lockAhead), so every node may run this on the
   * same sessions at once. Each user's end is on its own: one that fails is added to `failed` (with
   * the user's id) and the other users' still end. Answers the ids ended.
   */
  const endEach = async (due: { id: number; userId: number }[], failed: PartFailure[]): Promise<number[]> => {
    const byUser = new Map<number, number[]>();
    for (const s of due) byUser.set(s.userId, [...(byUser.get(s.userId) ?? []), s.id]);
    const done: number[] = [];
    for (const [userId, ids] of byUser) {
      try {
        await db.transaction(async (tx) => {
          // The locks ahead of the session rows first: a node that is ending the same sessions
          // holds them, and this one waits for it, then finds them ended (skipped below).
          await lockAhead(userId, ids, tx);
          const gone = await store.endExpired(userId, ids, clock.now(), tx);
          await finishEnding(userId, gone, 'expired', tx);
          done.push(...gone);
        });
      } catch (err) {
        failed.push({ err, part: { userId } });
      }
    }
    return done;
  };

  /** endEach, the users whose end failed thrown together once the others ended (partsFailed). */
  const endExpired = async (due: { id: number; userId: number }[]): Promise<number[]> => {
    const failed: PartFailure[] = [];
    const done = await endEach(due, failed);
    if (failed.length > 0) throw partsFailed(EXPIRY_TASK, failed);
    return done;
  };

  const service = {
    /**
     * Called once sessions ended by logout, destroy, eviction or expiry have committed, e.g. to drop
     * their sockets. (Bans and deletions end every session of a user and do their own clean-up.)
     */
    onEnded(listener: SessionsEndedListener) {
      listeners.push(listener);
    },

    /** Runs inside the transaction that ends sessions by logout, destroy, eviction or expiry (their keys). */
    onEnding(hook: SessionsEndingHook) {
      hooks.push(hook);
    },

    /**
     * Inside a login's transaction, before it locks the user's row: when the new session will
     * evict the user's oldest live sessions (create, MAX_SESSIONS_PER_USER), the locks that their
     * end takes ahead of the user's row (the user's chats, when an evicted session has a key).
     * A login that evicts nothing (below the cap), or of a user none of whose live sessions has a
     * key, locks nothing here: logins are frequent, and locking every chat of the user would hold
     * up its chats' sends.
     * The sessions are read without a lock, and logins of the user at the same time change which
     * ones go (each evicts the oldest left): so a login that will evict at all takes the locks when
     * any live session has a key, not only the ones it would evict as read. Should the count cross
     * the cap meanwhile (a login that read itself below it), the keys' check where they are removed
     * makes the transaction run again, and its next run reads itself at the cap.
     */
    async lockForLogin(userId: number, tx: Tx): Promise<void> {
      const live = await store.activeOf(userId, clock.now(), tx);
      if (live.length < Limits.MAX_SESSIONS_PER_USER) return;
      await lockAhead(
        userId,
        live.map((s) => s.id),
        tx,
      );
    },

    /**
     * Opens a session inside the caller's transaction, after the caller locked the user row (and,
     * before that, lockForLogin when the user exists already).
     * Evicts the oldest live sessions beyond MAX_SESSIONS_PER_USER, their keys with them (in the
     * same transaction; their sockets drop once it commits). Returns the raw token once.
     */
    async create(
      input: { userId: number; permissionLevel: number; ip: string; userAgent: string },
      tx: Tx,
    ): Promise<{ token: string; session: SessionRow; evicted: number[] }> {
      const now = clock.now();
      // The live sessions locked (in id order) before the evictions are chosen among them: a destroy
      // or logout of the user's sessions holding them (one that takes no users row: none of its
      // sessions has a key) is waited for, and those it ended do not count. Chosen from an unlocked
      // read, a login at the cap could evict the session whose "destroy the others" was ending the
      // rest, leaving an outcome of neither order.
      const seen = await store.activeOf(input.userId, now, tx);
      const held = new Set(
        await store.lockLive(
          seen.map((s) => s.id),
          clock,
          tx,
        ),
      );
      const live = seen.filter((s) => held.has(s.id));
      let token = randomToken(32);
      // A user's live sessions are told apart by suffix; draw again on the rare clash.
      while (live.some((s) => s.tokenSuffix === token.slice(-TOKEN_SUFFIX_LENGTH))) token = randomToken(32);
      const session = await store.insert(
        {
          userId: input.userId,
          tokenHash: sha256Hex(token),
          tokenSuffix: token.slice(-TOKEN_SUFFIX_LENGTH),
          createdAt: now,
          expiresAt: new Date(now.getTime() + sessionTtlMs(input.permissionLevel)),
          clientIp: input.ip,
          userAgent: input.userAgent,
          geo: await geo.lookup(input.ip),
          lastSeenAt: now,
        },
        tx,
      );
      const overflow = live.slice(Limits.MAX_SESSIONS_PER_USER - 1).map((s) => s.id);
      const evicted = await store.end(overflow, 'evicted', now, tx);
      await finishEnding(input.userId, evicted, 'evicted', tx);
      return { token, session, evicted };
    },

    /**
     * Token → live session and user. A cache hit costs no SQL: expiry and timeouts are checked
     * against the clock on every read, and every change to the user or its sessions drops the
     * entry on every node (users.changes.ts). Activity is still recorded once a minute per node.
     */
    resolver(): SessionResolver {
      return {
        async resolve(token) {
          const now = clock.now();
          const hash = sha256Hex(token);
          const read = async () => {
            const found = await lookup(hash);
            return found ? toAuthEntry(found.session, found.user) : null;
          };
          const entry = cache ? (cache.get(hash) ?? (await cache.load(hash, read))) : await read();
          if (!entry) return null;
          if (entry.session.expiresAt <= now) {
            cache?.delete(hash);
            // Its first use after its expiry ends it, as the sweep would. Should that fail, the
            // sweep does it (and logs why): the answer is "no session" either way.
            await endExpired([{ id: entry.session.id, userId: entry.session.userId }]).catch(() => {});
            return null;
          }
          if (now.getTime() - entry.lastSeenAt > TOUCH_EVERY_MS) {
            // Set first, so concurrent hits of this entry write once.
            entry.lastSeenAt = now.getTime();
            await touch(entry.session.id);
          }
          return resolvedOf(entry, now);
        },
      };
    },

    /**
     * A session that is still live and whose user may connect (active, or a timeout that ran out),
     * read from SQL (no cache): its expiry, and its user's level and name as they are now; null
     * otherwise. What a socket must still have once it is in its session's room
     * (sessions.sockets.ts), and when it recovers after a drop.
     */
    async liveOwner(userId: number, sessionId: number): Promise<LiveOwner | null> {
      const owner = await owners(sessionId);
      if (owner?.userId !== userId || effectiveState(owner, clock.now()) !== 0) return null;
      return { expiresAt: owner.expiresAt, permissionLevel: owner.permissionLevel, username: owner.username };
    },

    /** Whether a session is still live and its user may connect (liveOwner): platform/recovery.ts. */
    async mayConnect(userId: number, sessionId: number): Promise<boolean> {
      return (await service.liveOwner(userId, sessionId)) !== null;
    },

    /** Ends the given sessions that expired (and nothing ended yet): a node's sockets past their expiry. */
    endExpired,

    /**
     * The expiry sweep: ends the sessions whose expiry passed and that nothing ended yet, oldest
     * first, `batch` a read while they come back full, at most `maxBatches` a tick (the next tick
     * goes on), each as a logout ends one. Safe on many nodes. Answers how many it ended.
     * A user whose sessions cannot be ended holds up no other: each batch reads on past the last
     * (the failed ones are tried again at the next tick), and the users that failed are thrown
     * together once the tick is done (partsFailed), for the task to log.
     */
    async sweepExpired(opts: { batch?: number; maxBatches?: number } = {}): Promise<number> {
      const size = opts.batch ?? EXPIRY_SWEEP_BATCH;
      const maxBatches = opts.maxBatches ?? EXPIRY_SWEEP_MAX_BATCHES;
      const now = clock.now();
      let ended = 0;
      let after: SweepCursor | undefined;
      const failed: PartFailure[] = [];
      await drain(size, maxBatches, async () => {
        const due = await store.dueExpired(now, size, after);
        after = due.at(-1);
        ended += (await endEach(due, failed)).length;
        return due.length;
      });
      if (failed.length > 0) throw partsFailed(EXPIRY_TASK, failed);
      return ended;
    },

    async list(userId: number, currentId: number) {
      const now = clock.now();
      const [live, past] = await Promise.all([
        store.activeOf(userId, now),
        store.historyOf(userId, now, HISTORY_LIMIT),
      ]);
      return { sessions: live.map((s) => toActiveSession(s, currentId)), history: past.map(toHistoryEntry) };
    },

    /**
     * Spec 4.2 rule 2: the current session → 400, an unknown suffix → 404; a caller whose session
     * ended while this waited → 401, nothing ended (lockCaller).
     */
    async destroyBySuffix(userId: number, currentId: number, suffix: string): Promise<boolean> {
      const now = clock.now();
      return db.transaction(async (tx) => {
        const live = await store.activeOf(userId, now, tx);
        // The caller's session ended before this began: 401, not a 404 or 400 (lockCaller decides under the lock).
        if (!live.some((s) => s.id === currentId)) throw appError('ERR_UNAUTHENTICATED');
        const target = live.find((s) => s.tokenSuffix === suffix);
        if (!target) throw appError('ERR_SESSION_NOT_FOUND');
        if (target.id === currentId) throw appError('ERR_CANNOT_DESTROY_CURRENT_SESSION');
        await lockAhead(userId, [target.id], tx);
        await lockCaller(currentId, [target.id], tx);
        const done = await store.end([target.id], 'destroyed', now, tx);
        await finishEnding(userId, done, 'destroyed', tx);
        return done.length === 1;
      });
    },

    /** Spec 4.2: every session but the caller's, while the caller's is live (else 401: lockCaller). */
    async destroyOthers(userId: number, currentId: number): Promise<number> {
      return db.transaction(async (tx) => {
        const others = (await store.activeOf(userId, clock.now(), tx))
          .filter((s) => s.id !== currentId)
          .map((s) => s.id);
        await lockAhead(userId, others, tx);
        await lockCaller(currentId, others, tx);
        const done = await store.endAllOf(userId, currentId, 'destroyed', clock.now(), tx);
        await finishEnding(userId, done, 'destroyed', tx);
        return done.length;
      });
    },

    async logout(userId: number, sessionId: number): Promise<void> {
      await db.transaction(async (tx) => {
        await lockAhead(userId, [sessionId], tx);
        const done = await store.end([sessionId], 'logout', clock.now(), tx);
        await finishEnding(userId, done, 'logout', tx);
      });
    },

    /**
     * Ends every session of a user inside the caller's transaction (ban, deletion). The caller
     * removes their keys and drops their sockets (no hooks or listeners run).
     */
    async endAll(userId: number, reason: string, tx?: Tx): Promise<number[]> {
      return store.endAllOf(userId, null, reason, clock.now(), tx ?? db);
    },

    store,
  };
  return service;
}

export type SessionsService = ReturnType<typeof makeSessionsService>;
