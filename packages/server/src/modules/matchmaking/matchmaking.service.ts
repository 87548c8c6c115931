import { INTEREST_PATTERN, Limits, type MatchStatus } from '@parlor/protocol';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../../platform/clock.js';
import { drain } from '../../platform/drain.js';
import { AppError, appError } from '../../platform/errors.js';
import { batched, batchedWrite } from '../../platform/group-commit.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { StateStore } from '../../platform/state/index.js';
import { FULL_MARK_MS, type MatchQueue, type QueueEntry } from '../../platform/state/match-queue.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { DirectRefusal } from '../chats/chats.store.js';
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

type Found = { id: number; username: string; stranger: boolean };

/**
 * What a pairing came to for its caller: `found`, the chat is made (`tell` sends the caller's
 * `match:found`); `refused` because of the peer only, the caller searches on; `ended`, the caller's
 * own search was ended meanwhile (a dequeue), nothing made.
 */
type Completed = { kind: 'found'; tell: () => void } | { kind: 'refused' } | { kind: 'ended' };

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

  /** Searches that ended without a pair (deadline, slots filled, a block): each user hears `match:timeout`. */
  const tellEnded = (entries: readonly QueueEntry[]): void => {
    for (const e of entries) realtime.emitTo(rooms.user(e.userId), 'match:timeout', { interests: e.tags });
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

  /**
   * Puts a waiting peer that the queue handed to a pairing which then failed back in the queue as
   * it was (place in line, deadline, exclusions), best effort: the failure is the caller's, not the
   * peer's. When it cannot go back (its deadline passed meanwhile, or the queue failed, logged) its
   * search has ended and it is told so, as at its deadline (`match:timeout`). A peer searching again
   * on a newer entry is left to that search; one whose search was ended meanwhile (a dequeue, a ban
   * or timeout, a stranger's session ending: the queue's cancelled mark) stays out, told nothing
   * (it was answered, or is gone).
   */
  const putBack = async (peer: QueueEntry): Promise<void> => {
    try {
      const result = await queue.restore(peer, clock.now().getTime());
      tellEnded(result.dropped);
      if (result.kind === 'paired') {
        // A user queued on a shared tag while the peer was out: they pair now, in the background
        // (neither is waiting on a request).
        void pairRestored(peer, result.peer, result.tag);
        return;
      }
      if (result.kind !== 'expired' && result.kind !== 'full') return;
    } catch (err) {
      deps.log.warn({ err, userId: peer.userId }, 'match peer not re-queued after a failed pairing');
    }
    realtime.emitTo(rooms.user(peer.userId), 'match:timeout', { interests: peer.tags });
  };

  /**
   * A restored entry paired with `other` (both were queued): the chat is made as for an enqueue,
   * with the restored user in the caller's place. When only `other` could not take it, the restored
   * user goes back again (each such round takes a peer out for good); when the restored user
   * cannot (its slots filled meanwhile, gone) or the chat store fails, its search ends and it is
   * told (`match:timeout`); `other` went back to the queue or was told by `complete`.
   */
  const pairRestored = async (mine: QueueEntry, other: QueueEntry, tag: string): Promise<void> => {
    try {
      const done = await complete(mine, mine, other, tag);
      if (done.kind === 'found') done.tell();
      // Ended by a dequeue, which answered it: told nothing.
      else if (done.kind === 'refused') await putBack(mine);
    } catch (err) {
      if (!(err instanceof AppError))
        deps.log.warn({ err, userId: mine.userId }, 'restored match search ended by a failure');
      realtime.emitTo(rooms.user(mine.userId), 'match:timeout', { interests: mine.tags });
    }
  };

  /**
   * A pair the chat store refused (a user gone; banned or timed out, or a stranger whose session
   * ended, since it queued; a stranger a moderator blocked from matchmaking meanwhile; a search a
   * dequeue ended meanwhile; or its direct-chat slots full by now: parallel enqueues of one user,
   * on any node, pass the pre-check together; or a block between the two committed after the
   * caller's pre-check read the blocks). A peer that is not a reason goes back to the queue, after
   * a block excluding the caller, so that neither the caller searching on nor a later placing
   * pairs the two again. One that is leaves it: told when only its slots are full (its search
   * ended); silently when gone, inactive or blocked (it has no socket left to tell, or it may not
   * search) or dequeued (its dequeue answered it). The caller, if it is a reason, gets the
   * refusal, or `ended` when its own search was ended by a dequeue; else it searches on.
   */
  const refused = async (
    me: Pick<Searcher, 'userId'>,
    peer: QueueEntry,
    why: DirectRefusal,
  ): Promise<'refused' | 'ended'> => {
    const inactive = (id: number) => why.inactive.find((u) => u.id === id);
    const gone = (id: number) =>
      why.missing.includes(id) ||
      inactive(id) !== undefined ||
      why.matchBlocked.includes(id) ||
      why.cancelled.includes(id);
    if (!gone(peer.userId)) {
      if (why.full.includes(peer.userId)) tellEnded([peer]);
      else await putBack(why.blocked ? { ...peer, exclude: [...peer.exclude, me.userId] } : peer);
    }
    if (why.missing.includes(me.userId)) throw appError('ERR_USER_NOT_FOUND');
    const mine = inactive(me.userId);
    if (mine)
      throw appError(mine.state === 2 ? 'ERR_BANNED' : mine.state === 1 ? 'ERR_TIMED_OUT' : 'ERR_UNAUTHENTICATED');
    if (why.matchBlocked.includes(me.userId)) throw appError('ERR_STRANGER_BLOCKED');
    if (why.full.includes(me.userId)) throw appError('ERR_MATCH_SLOT_LIMIT');
    return why.cancelled.includes(me.userId) ? 'ended' : 'refused';
  };

  /**
   * Creates the direct chat of a pair and tells every session of the waiting peer at once; the
   * pairing caller is told by the returned `tell`, which the route runs once its answer is out
   * (spec 4.5: the enqueue answers `searching`, `match:found` follows). If the chat cannot be made,
   * the peer goes back to the queue and the caller gets the error; `refused` when only the peer
   * could not take the chat (it has left the queue) and the caller should search on. Once the
   * chat store holds both users' locks it asks the queue whether a dequeue ended either search
   * (dequeue waits for those locks), so a dequeue answered `idle` is never followed by this chat.
   */
  const complete = async (
    me: Pick<Searcher, 'userId'>,
    mine: QueueEntry,
    peer: QueueEntry,
    tag: string,
  ): Promise<Completed> => {
    const shared = [tag, ...mine.tags.filter((t) => t !== tag && peer.tags.includes(t))];
    const searchesEnded = () => queue.cancelledOf([peer, mine]);
    // Names and kinds as stored, read by the statement that creates the chat (the peer may have renamed).
    const made = await chats.createDirect([peer.userId, me.userId], shared, searchesEnded).catch(async (err) => {
      await putBack(peer);
      throw err;
    });
    if ('refused' in made) return { kind: await refused(me, peer, made.refused) };
    const { chat, token, users, filled } = made;
    if (filled.length > 0) endSearchesOfFull(filled);
    const [theirs, ours] = users as [Found, Found];
    const expires_at = chat.expires_at ?? new Date(clock.now().getTime() + Limits.DIRECT_CHAT_TTL_MS).toISOString();
    const found = (other: Found, otherEntry: QueueEntry) => ({
      chat_id: chat.id,
      token,
      interests: shared,
      expires_at,
      peer: { ...other, country_code: otherEntry.country },
    });
    realtime.emitTo(rooms.user(peer.userId), 'match:found', found(ours, mine));
    return { kind: 'found', tell: () => realtime.emitTo(rooms.user(me.userId), 'match:found', found(theirs, peer)) };
  };

  /**
   * Users whose direct-chat slots the chat just made filled: a search of theirs running in parallel
   * with the pairing (queued meanwhile, or reaching the queue later with a pre-check read before
   * the commit) ends; a queued one is told (`match:timeout`), as at its deadline. In the
   * background: nobody waits on it, and a failure (logged) only leaves such a search to end at its
   * first pairing, which its full slots refuse, or at its deadline.
   */
  const endSearchesOfFull = (userIds: number[]): void => {
    queue.markFull(userIds, clock.now().getTime()).then(
      (ended) => tellEnded(ended),
      (err: unknown) => deps.log.warn({ err, userIds }, 'searches of users whose slots filled not ended'),
    );
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
      const refuse = async (code: 'ERR_USER_NOT_FOUND' | 'ERR_MATCH_SLOT_LIMIT' | 'ERR_MATCH_NO_PEERS_ONLINE') => {
        // A searching caller hears that first, whatever else would refuse it.
        if (await queue.get(searcher.userId, now)) throw appError('ERR_MATCH_ALREADY_SEARCHING');
        throw appError(code);
      };
      if (!mine) return refuse('ERR_USER_NOT_FOUND');
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
     * chat store checks the state), so an enqueue already in flight is harmless.
     */
    async endSearch(userId: number): Promise<void> {
      await queue.dequeue(userId, clock.now().getTime());
    },

    /**
     * Sessions of a user ended (logout, destroy, eviction, expiry), committed. A stranger never signs in
     * again, so its search ends with its session (it is told nothing: its sockets are gone), also
     * one a pairing has out of the queue right now (as endSearch: the queue holds no entry then,
     * so it is not asked first). A registered user's search stays: it may sign in again before the
     * deadline.
     */
    async sessionsEnded(userId: number): Promise<void> {
      if (await deps.store.isStranger(userId)) await queue.dequeue(userId, clock.now().getTime());
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
