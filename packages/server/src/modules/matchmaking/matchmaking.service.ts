import { INTEREST_PATTERN, Limits, type MatchStatus } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { StateStore } from '../../platform/state/index.js';
import type { MatchQueue, QueueEntry } from '../../platform/state/match-queue.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { UsersService } from '../users/users.service.js';
import type { BlocksStore } from './blocks.store.js';

const interestRe = new RegExp(INTEREST_PATTERN);
const ONLINE_SET = 'online-users';

export interface Searcher {
  userId: number;
  sessionId: number;
  stranger: boolean;
  matchBlocked: boolean;
}

export interface MatchmakingDeps {
  clock: Clock;
  state: StateStore;
  queue: MatchQueue;
  chats: ChatsService;
  users: Pick<UsersService, 'hasPremium' | 'mustGet'>;
  blocks: BlocksStore;
  /** The country of a session's address (from its stored geo), or null. */
  countryOf(sessionId: number): Promise<string | null>;
  realtime: Pick<Realtime, 'emitTo'>;
}

/** Spec 4.5 interests: 1-3 distinct tags, each 3-12 lower-case letters and digits. */
export function validInterests(tags: string[]): boolean {
  return (
    tags.length >= Limits.INTERESTS_MIN &&
    tags.length <= Limits.INTERESTS_MAX &&
    new Set(tags).size === tags.length &&
    tags.every((t) => interestRe.test(t))
  );
}

export function makeMatchmakingService(deps: MatchmakingDeps) {
  const { clock, state, queue, chats, realtime } = deps;

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

  /** Creates the direct chat of a pair and tells every session of both users. */
  const complete = async (me: QueueEntry, peer: QueueEntry, tag: string) => {
    const shared = [tag, ...me.tags.filter((t) => t !== tag && peer.tags.includes(t))];
    const [mine, theirs] = await Promise.all([deps.users.mustGet(me.userId), deps.users.mustGet(peer.userId)]);
    const { chat, token } = await chats.createDirect(
      [
        { userId: peer.userId, username: theirs.username },
        { userId: me.userId, username: mine.username },
      ],
      shared,
    );
    const expires_at = chat.expires_at ?? new Date(clock.now().getTime() + Limits.DIRECT_CHAT_TTL_MS).toISOString();
    const found = (other: typeof mine, otherEntry: QueueEntry) => ({
      chat_id: chat.id,
      token,
      interests: shared,
      expires_at,
      peer: { id: other.id, username: other.username, stranger: other.isStranger, country_code: otherEntry.country },
    });
    realtime.emitTo(rooms.user(me.userId), 'match:found', found(theirs, peer));
    realtime.emitTo(rooms.user(peer.userId), 'match:found', found(mine, me));
  };

  return {
    status,

    /** A user with a connected socket counts as online for ONLINE_TTL_MS (refreshed while connected). */
    async markOnline(userIds: number[]): Promise<void> {
      const until = clock.now().getTime() + Limits.ONLINE_TTL_MS;
      for (const id of new Set(userIds)) await state.addExpiring(ONLINE_SET, String(id), until);
    },

    /** POST /v1/portal/match: queue on every tag at once, or pair at once when a peer waits. */
    async enqueue(searcher: Searcher, interests: string[]): Promise<MatchStatus> {
      if (!validInterests(interests)) throw appError('ERR_MATCH_UNSUPPORTED_INTEREST');
      if (searcher.matchBlocked) throw appError('ERR_STRANGER_BLOCKED');
      const now = clock.now().getTime();
      if (await queue.get(searcher.userId, now)) throw appError('ERR_MATCH_ALREADY_SEARCHING');
      const premium = !searcher.stranger && (await deps.users.hasPremium(searcher.userId));
      const slots = premium ? Limits.DIRECT_SLOTS_PREMIUM : Limits.DIRECT_SLOTS_FREE;
      if ((await chats.activeDirect(searcher.userId)).length >= slots) throw appError('ERR_MATCH_SLOT_LIMIT');
      const online = await state.countExpiring(ONLINE_SET);
      const selfOnline = await state.hasExpiring(ONLINE_SET, String(searcher.userId));
      if (online - (selfOnline ? 1 : 0) < 1) throw appError('ERR_MATCH_NO_PEERS_ONLINE');
      const entry: QueueEntry = {
        userId: searcher.userId,
        tags: interests,
        enqueuedAt: now,
        deadline: now + Limits.MATCH_QUEUE_WAIT_MS,
        exclude: await deps.blocks.excludedFor(searcher.userId),
        country: await deps.countryOf(searcher.sessionId),
      };
      const result = await queue.enqueue(entry, now);
      if (result.kind === 'already') throw appError('ERR_MATCH_ALREADY_SEARCHING');
      if (result.kind === 'paired') {
        await complete(entry, result.peer, result.tag);
        return status(searcher.userId);
      }
      return { state: 'searching', interests, expires_at: new Date(entry.deadline).toISOString() };
    },

    async dequeue(userId: number): Promise<MatchStatus> {
      await queue.dequeue(userId);
      return status(userId);
    },

    async leave(userId: number, chatId: number | undefined) {
      return { ok: true, chat_id: await chats.leaveDirect(userId, chatId) };
    },

    async statistics() {
      return { online: await state.countExpiring(ONLINE_SET), top_tags: await queue.topTags(5) };
    },

    /** Drops users whose queue deadline passed and tells them (match:timeout). Safe on many nodes. */
    async sweepQueue(limit = 500): Promise<number> {
      const expired = await queue.popExpired(clock.now().getTime(), limit);
      for (const e of expired) realtime.emitTo(rooms.user(e.userId), 'match:timeout', { interests: e.tags });
      return expired.length;
    },
  };
}

export type MatchmakingService = ReturnType<typeof makeMatchmakingService>;
