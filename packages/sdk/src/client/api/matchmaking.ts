import type { BlocksAnswer, MatchLeaveAnswer, MatchStatistics, MatchStatus, OkAnswer } from '../types.js';
import { AuthRoutes } from './auth.js';

/** ParlorClient's block and matchmaking routes, strangers' included (spec 2.8). */
export abstract class MatchmakingRoutes extends AuthRoutes {
  // Blocks and matchmaking (spec 2.8)

  /** `GET /v1/users/me/blocks` → `{blocks}`. */
  blocks(): Promise<BlocksAnswer> {
    return this.get('/v1/users/me/blocks');
  }

  /** `POST /v1/users/me/blocks/create {user_id}` → `{ok}`: never matched with that user (409 `ERR_BLOCK_LIMIT` past 1,000). */
  block(userId: number): Promise<OkAnswer> {
    return this.post('/v1/users/me/blocks/create', { user_id: userId });
  }

  /** `POST /v1/users/me/blocks/delete {user_id}` → `{ok}` (false: there was no such block). */
  unblock(userId: number): Promise<OkAnswer> {
    return this.post('/v1/users/me/blocks/delete', { user_id: userId });
  }

  /** `POST /v1/portal/match {interests}` → the search (`searching`); `match:found` follows a pairing. */
  match(interests: string[]): Promise<MatchStatus> {
    return this.post('/v1/portal/match', { interests });
  }

  /** `GET /v1/portal/match/status` → `{state: idle|searching|matched, …}`. */
  matchStatus(): Promise<MatchStatus> {
    return this.get('/v1/portal/match/status');
  }

  /** `POST /v1/portal/match/dequeue`: ends the search → the status. */
  dequeue(): Promise<MatchStatus> {
    return this.post('/v1/portal/match/dequeue');
  }

  /** `POST /v1/portal/match/leave {chat_id?}`: leaves the newest active direct chat, or the one named. */
  leaveMatch(chatId?: number): Promise<MatchLeaveAnswer> {
    return this.post('/v1/portal/match/leave', chatId === undefined ? {} : { chat_id: chatId });
  }

  /** `GET /v1/portal/match/statistics` → `{online, top_tags}` (registered sessions only). */
  matchStatistics(): Promise<MatchStatistics> {
    return this.get('/v1/portal/match/statistics');
  }

  /** `POST /v1/portal/strangers/block {user_id}` → `{ok}`: bars a stranger from matchmaking (Moderators and above). */
  blockStranger(userId: number): Promise<OkAnswer> {
    return this.post('/v1/portal/strangers/block', { user_id: userId });
  }
}
