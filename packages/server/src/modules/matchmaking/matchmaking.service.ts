import { INTEREST_PATTERN, Limits, type MatchStatus } from '@parlor/protocol';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../../platform/clock.js';
import { drain } from '../../platform/drain.js';
import { appError } from '../../platform/errors.js';
import { batched, batchedWrite } from '../../platform/group-commit.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { StateStore } from '../../platform/state/index.js';
import { FULL_MARK_MS, type MatchQueue, type QueueEntry } from '../../platform/state/match-queue.js';
import type { ChatsService } from '../chats/chats.service.js';
import { makePairing } from './matchmaking.pairing.js';
import type { MatchmakingStore, SearcherKey } from './matchmaking.store.js';

const interestRe = new RegExp(INTEREST_PATTERN);
const ONLINE_SET = 'online-users';
/**
 * How long a node trusts a count of two or more online users before it counts again. Online is
 * already approximate by ONLINE_TTL_MS (75 s after the last socket); this saves a state call per
 * enqueue. Answers below two are never reused.
 */
export const PEERS_ONLINE_REUSE_MS = 1_000;
/**
 * How old an enqueue's pre-check may be when it reaches the queue; older ones answer 503. The
 * queue refuses a stale pre-check by the enqueue's start time, against marks it keeps for a
 * limited time: a stranger block's bar (STRANGER_BAR_MS) and a user's slots-filled mark
 * (FULL_MARK_MS). This keeps every such enqueue well inside both. Only a database or state store
 * stalled for this long gets here.
 */
export const MATCH_PRECHECK_MAX_MS = FULL_MARK_MS / 2;
/** Expired queue entries one deadline-sweep step takes out (a Lua script in cluster mode: kept short). */
export const MATCH_SWEEP_BATCH = 500;
/** Sweep steps per tick at most (the sweep runs every 5 s): 5,000 expired entries a tick. */
export const MATCH_SWEEP_MAX_BATCHES = 10;

export interface Searcher {
  userId: number;
  sessionId: number;
  stranger: boolean;
  matchBlocked: boolean;
}

/** An enqueue's answer, and when it paired, the caller's `match:found` to send after the answer. */
export interface Enqueued {
  answer: MatchStatus;
  tellCaller?: () => void;
}

export interface MatchmakingDeps {
  clock: Clock;
  state: StateStore;
  queue: MatchQueue;
  chats: ChatsService;
  store: MatchmakingStore;
  realtime: Pick<Realtime, 'emitTo'>;
  log: Pick<FastifyBaseLogger, 'warn'>;
}

/** Spec 4.5 interests: 1-3 distinct tags, each 3-12 lower-case letters and digits. */
export function validInterests(tags: readonly unknown[]): tags is string[] {
  return (
    tags.length >= Limits.INTERESTS_MIN &&
    tags.length <= Limits.INTERESTS_MAX &&
    new Set(tags).size === tags.length &&
    tags.every((t) => typeof t === 'string' && interestRe.test(t))
  );
}

export function makeMatchmakingService(deps: MatchmakingDeps) {
  const { clock, state, queue, chats, realtime } = deps;
  /**
   * The enqueue pre-check reads of one event-loop turn (and those arriving while a read runs) go
   * to the database as one statement: a burst of enqueues pays one round trip, not one each.
   */
  const factsOf = batched((keys: SearcherKey[]) => deps.store.searcherFacts(keys, clock.now()));
  /** Until when (clock ms) this node's last count said two or more users were online. */
  let peersOnlineUntil = 0;
  const onlineCount = async (now: number): Promise<number> => {
    if (now < peersOnlineUntil) return 2;
    const n = await state.countExpiring(ONLINE_SET);
    if (n >= 2) peersOnlineUntil = now + PEERS_ONLINE_REUSE_MS;
    return n;
  };

  const status = async (userId: number): Promise<MatchStatus> => {
    const now = clock.now().getTime();
    const searching = await queue.get(userId, now);
    if (searching)
      return { state: 'searching', interests: searching.tags, expires_at: new Date(searching.deadline).toISOString() };
    const [latest] = await chats.activeDirect(userId);
    if (latest?.matchToken && latest.expiresAt) {
      return {
        state: 'matched',
        token: latest.matchToken,
        chat_id: latest.id,
        expires_at: latest.expiresAt.toISOString(),
      };
    }
    return { state: 'idle' };
  };

  const { complete, tellEnded } = makePairing(deps);

  /**
   * An enqueue the queue refused because its user may no longer search since it began: the
   * refusal its session would now get; the search ended, as for a dequeue, when none applies any
   * more (the restriction was already lifted).
   */
  const restricted = async (userId: number, ended: () => Enqueued): Promise<Enqueued> => {
    const refusal = await deps.store.refusalOf(userId, clock.now());
    if (refusal) throw appError(refusal);
    return ended();
  };

  const markOnline = async (userIds: number[]): Promise<void> => {
    const until = clock.now().getTime() + Limits.ONLINE_TTL_MS;
    if (userIds.length > 0) await state.addExpiring(ONLINE_SET, [...new Set(userIds)].map(String), until);
  };
  const connectedBatch = batchedWrite(markOnline, 1000);

  return {
    status,

    /** A user with a connected socket counts as online for ONLINE_TTL_MS (refreshed while connected). */
    markOnline,

    /** markOnline for one socket's user; the connections of one turn (a reconnect storm) are one write. */
    connected: (userId: number): Promise<void> => connectedBatch(userId),

    /**
     * POST /v1/portal/match: queue on every tag at once, or pair at once when a peer waits. Either
     * way the answer is the caller's search (spec 4.5: state searching, interests, the queue
     * deadline); a pair made here is committed before it, and `tellCaller` sends the caller's
     * `match:found`, for the route to run once the answer is out.
     */
    async enqueue(searcher: Searcher, interests: readonly unknown[]): Promise<Enqueued> {
      if (!validInterests(interests)) throw appError('ERR_MATCH_UNSUPPORTED_INTEREST');
      if (searcher.matchBlocked) throw appError('ERR_STRANGER_BLOCKED');
      const now = clock.now().getTime();
      // One SQL statement and the online count (reused for a second when two or more), at once.
      // Whether the caller already searches is answered atomically by the queue call itself; it
      // is looked up first only to refuse.
      const [mine, online] = await Promise.all([
        factsOf({ userId: searcher.userId, sessionId: searcher.sessionId }),
        onlineCount(now),
      ]);
      const refuse = async (code: 'ERR_UNAUTHENTICATED' | 'ERR_MATCH_SLOT_LIMIT' | 'ERR_MATCH_NO_PEERS_ONLINE') => {
        // A searching caller hears that first, whatever else would refuse it.
        if (await queue.get(searcher.userId, now)) throw appError('ERR_MATCH_ALREADY_SEARCHING');
        throw appError(code);
      };
      // The caller's own account deleted since its session was checked: its sessions ended with it.
      if (!mine) return refuse('ERR_UNAUTHENTICATED');
      // A block committed since the session's account was cached (the queue bars one still being written).
      if (mine.matchBlocked) throw appError('ERR_STRANGER_BLOCKED');
      const premium = !searcher.stranger && mine.premium;
      const slots = premium ? Limits.DIRECT_SLOTS_PREMIUM : Limits.DIRECT_SLOTS_FREE;
      if (mine.activeDirect >= slots) return refuse('ERR_MATCH_SLOT_LIMIT');
      // Two online users always include another one; with fewer, the caller may be the only one.
      if (online < 2 && online - ((await state.hasExpiring(ONLINE_SET, String(searcher.userId))) ? 1 : 0) < 1)
        return refuse('ERR_MATCH_NO_PEERS_ONLINE');
      const entry: QueueEntry = {
        userId: searcher.userId,
        tags: interests,
        enqueuedAt: now,
        deadline: now + Limits.MATCH_QUEUE_WAIT_MS,
        exclude: mine.exclude,
        country: mine.country,
      };
      const answer: MatchStatus = { state: 'searching', interests, expires_at: new Date(entry.deadline).toISOString() };
      // The caller's own dequeue ended the search while it was being paired: the answer is still
      // the search (spec 4.5), and `match:timeout` after it says that it has ended.
      const ended = (): Enqueued => ({
        answer,
        tellCaller: () => realtime.emitTo(rooms.user(searcher.userId), 'match:timeout', { interests }),
      });
      // Each round that pairs with a peer unable to take the chat has taken that peer out of the
      // queue for good, so the rounds end: queued, or paired. The first round begins the search;
      // a later one goes on with it, as a restore: a dequeue that ended it meanwhile holds there
      // (`cancelled`), where an enqueue would take it for a new search.
      for (let round = 0; ; round++) {
        const at = clock.now().getTime();
        if (at - now > MATCH_PRECHECK_MAX_MS)
          throw appError('ERR_SERVICE_UNAVAILABLE', 'Matchmaking is slow right now; try again.');
        const result = round === 0 ? await queue.enqueue(entry, at) : await queue.restore(entry, at);
        // Users whose deadline passed, met on the way (before the deadline sweep came to them).
        tellEnded(result.dropped);
        if (result.kind === 'already') throw appError('ERR_MATCH_ALREADY_SEARCHING');
        if (result.kind === 'barred') throw appError('ERR_STRANGER_BLOCKED');
        // Its slots filled (a parallel search paired) after this pre-check read them.
        if (result.kind === 'full') throw appError('ERR_MATCH_SLOT_LIMIT');
        // A ban, timeout or session end committed after this pre-check began (endSearch).
        if (result.kind === 'restricted') return restricted(searcher.userId, ended);
        if (result.kind === 'cancelled' || result.kind === 'expired') return ended();
        if (result.kind !== 'paired') return { answer };
        const done = await complete(searcher, entry, result.peer, result.tag);
        if (done.kind === 'found') return { answer, tellCaller: done.tell };
        if (done.kind === 'ended') return ended();
      }
    },

    /**
     * Ends the user's search, also one a pairing has out of the queue right now (the queue's
     * cancelled mark: if that pairing fails, the search is not put back, putBack), and answers
     * the status after it. A pairing holding the user's slot lock is waited for first: it asked
     * for the mark before it was set, so its chat stands and the answer is `matched`, or it read
     * the mark and made none; a pairing that takes the lock later reads the mark and makes none
     * (complete). So an `idle` answer is never followed by a match of that search.
     */
    async dequeue(userId: number): Promise<MatchStatus> {
      await queue.dequeue(userId, clock.now().getTime());
      await chats.waitForPairings(userId);
      return status(userId);
    },

    /**
     * Ends a user's search, if any, without telling it: it may not use the platform now (a ban or
     * a timeout committed; wiring/services.ts). A pairing holding the search out of the queue does
     * not put it back (as for dequeue), and one that reads the user later refuses it anyway (the
     * chat store checks the state). An enqueue already in flight, whose pre-check began before,
     * is refused by the queue (`endRestricted`), so it cannot outlast a timeout.
     */
    async endSearch(userId: number): Promise<void> {
      await queue.endRestricted(userId, clock.now().getTime());
    },

    /**
     * Sessions of a user ended (logout, destroy, eviction, expiry), committed. A stranger never signs in
     * again, so its search ends with its session (it is told nothing: its sockets are gone), also
     * one a pairing has out of the queue right now (as endSearch: the queue holds no entry then,
     * so it is not asked first). Once its last session has ended its active direct chats end too,
     * as at a leave (chats `leaveAllDirectOfGone`): its peers' slots are free again, not taken
     * until the chats expire. Each step is tried whatever the other did; the first failure is
     * thrown. A registered user's search and chats stay: it may sign in again.
     */
    async sessionsEnded(userId: number): Promise<void> {
      if (!(await deps.store.isStranger(userId))) return;
      const steps = await Promise.allSettled([
        queue.endRestricted(userId, clock.now().getTime()),
        deps.store
          .hasLiveSession(userId, clock.now())
          .then((live) => (live ? undefined : chats.leaveAllDirectOfGone(userId))),
      ]);
      const failed = steps.find((s) => s.status === 'rejected');
      if (failed) throw failed.reason;
    },

    async leave(userId: number, chatId: number | undefined) {
      return { ok: true, chat_id: await chats.leaveDirect(userId, chatId) };
    },

    async statistics() {
      return { online: await state.countExpiring(ONLINE_SET), top_tags: await queue.topTags(5) };
    },

    /**
     * Drops users whose queue deadline passed and tells them (match:timeout), `batch` at a time
     * (one atomic queue step each) while batches come back full, at most `maxBatches` a tick: a
     * backlog (after an outage) is gone in one tick, not one batch every tick, and statistics stop
     * counting it. Safe on many nodes.
     */
    async sweepQueue(opts: { batch?: number; maxBatches?: number } = {}): Promise<number> {
      const size = opts.batch ?? MATCH_SWEEP_BATCH;
      const now = clock.now().getTime();
      return drain(size, opts.maxBatches ?? MATCH_SWEEP_MAX_BATCHES, async () => {
        const expired = await queue.popExpired(now, size);
        tellEnded(expired);
        return expired.length;
      });
    },
  };
}

export type MatchmakingService = ReturnType<typeof makeMatchmakingService>;
