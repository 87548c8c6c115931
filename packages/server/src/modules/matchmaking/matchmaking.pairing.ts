import { Limits } from '@parlor/protocol';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../../platform/clock.js';
import { AppError, appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { MatchQueue, QueueEntry } from '../../platform/state/match-queue.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { DirectRefusal } from '../chats/chats.store.js';

/** The caller of a pairing: the user whose enqueue (or restored entry) met a waiting peer. */
type Caller = { userId: number };

type Found = { id: number; username: string; stranger: boolean };

/**
 * What a pairing came to for its caller: `found`, the chat is made (`tell` sends the caller's
 * `match:found`); `refused` because of the peer only, the caller searches on; `ended`, the caller's
 * own search was ended meanwhile (a dequeue), nothing made.
 */
export type Completed = { kind: 'found'; tell: () => void } | { kind: 'refused' } | { kind: 'ended' };

export interface PairingDeps {
  clock: Clock;
  queue: MatchQueue;
  chats: Pick<ChatsService, 'createDirect'>;
  realtime: Pick<Realtime, 'emitTo'>;
  log: Pick<FastifyBaseLogger, 'warn'>;
}

/**
 * Pairings (matchmaking.service.ts composes them): the direct chat of a pair and its
 * `match:found`s, and what becomes of a peer and a caller when the chat store refuses the pair or
 * fails (back to the queue, or told their search ended).
 */
export function makePairing(deps: PairingDeps) {
  const { clock, queue, chats, realtime } = deps;

  /** Searches that ended without a pair (deadline, slots filled, a block): each user hears `match:timeout`. */
  const tellEnded = (entries: readonly QueueEntry[]): void => {
    for (const e of entries) realtime.emitTo(rooms.user(e.userId), 'match:timeout', { interests: e.tags });
  };

  /**
   * Puts a waiting peer that the queue handed to a pairing which then failed back in the queue as
   * it was (place in line, deadline, exclusions), best effort: the failure is the caller's, not the
   * peer's. When it cannot go back (its deadline passed meanwhile, or the queue failed, logged) its
   * search has ended and it is told so, as at its deadline (`match:timeout`). A peer searching again
   * on a newer entry is left to that search; one whose search was ended meanwhile (a dequeue, a ban
   * or timeout, a stranger's session ending: the queue's cancelled mark) stays out, told nothing
   * (it was answered, or is gone). Either holds also past its deadline (the queue answers them first).
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
  const refused = async (me: Caller, peer: QueueEntry, why: DirectRefusal): Promise<'refused' | 'ended'> => {
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
    // The caller's own account deleted meanwhile: its sessions ended with it.
    if (why.missing.includes(me.userId)) throw appError('ERR_UNAUTHENTICATED');
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
  const complete = async (me: Caller, mine: QueueEntry, peer: QueueEntry, tag: string): Promise<Completed> => {
    const shared = [tag, ...mine.tags.filter((t) => t !== tag && peer.tags.includes(t))];
    const searchesEnded = () => queue.cancelledOf([peer, mine]);
    // Names and kinds as stored, read by the statement that creates the chat (the peer may have renamed).
    // The pairing is over either way: the two no longer read as searching (the queue's marker of
    // an entry out in a pairing), before the peer goes back (a restore that pairs marks it anew).
    // Best effort: a chat committed stands; a marker left (logged) ends at the entry's deadline.
    const pairingOver = () =>
      queue.release([peer, mine]).catch((err: unknown) => {
        deps.log.warn({ err, userIds: [peer.userId, me.userId] }, 'match pairing markers not released');
      });
    const made = await chats.createDirect([peer.userId, me.userId], shared, searchesEnded).catch(async (err) => {
      await pairingOver();
      await putBack(peer);
      throw err;
    });
    await pairingOver();
    if ('refused' in made) return { kind: await refused(me, peer, made.refused) };
    const { chat, token, users, filled, committedAt } = made;
    if (filled.length > 0) endSearchesOfFull(filled, committedAt);
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
   * first pairing, which its full slots refuse, or at its deadline. The mark is the commit's time
   * (`committedAt`), not this call's: a user who saw the chat (its opening message) while the
   * pairing was still finishing, left it and searched again began that search after the commit,
   * and it must stand (its pre-check read the free slot).
   */
  const endSearchesOfFull = (userIds: number[], committedAt: number): void => {
    queue.markFull(userIds, committedAt).then(
      (ended) => tellEnded(ended),
      (err: unknown) => deps.log.warn({ err, userIds }, 'searches of users whose slots filled not ended'),
    );
  };

  return { complete, tellEnded };
}
