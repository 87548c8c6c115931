import type { OkAnswer, PunishBody, ReasonBody, TargetInput, TimeoutBody } from '../types.js';
import { chatPath } from './base.js';
import { ChatRoutes } from './chats.js';

/** ParlorClient's moderation routes (spec 4.6, 4.8). */
export abstract class ModerationRoutes extends ChatRoutes {
  // Chat moderation (spec 4.6, 4.8: the chat owner, or staff who outrank it)

  /** `POST /v1/portal/chats/{chat_id}/kick {user_id, reason?}` → `{ok}`. */
  kick(chatId: number, body: ReasonBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/kick`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/ban {user_id, duration?, reason?}` → `{ok}` (permanent without `duration`). */
  ban(chatId: number, body: PunishBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/ban`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/unban {user_id, reason?}` → `{ok}`. */
  unban(chatId: number, body: ReasonBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/unban`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/mute {user_id, duration?, reason?}` → `{ok}` (the owner or Admin and above). */
  mute(chatId: number, body: PunishBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/mute`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/unmute {user_id}` → `{ok}`; `user:unmuted` to the chat. */
  unmute(chatId: number, body: TargetInput): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/unmute`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/timeout {user_id, duration, reason?}` → `{ok}`: platform-wide, 60 s to 30 days. */
  timeout(chatId: number, body: TimeoutBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/timeout`, body);
  }

  /** `POST /v1/portal/chats/{chat_id}/warn {user_id, reason?}` → `{ok}`. */
  warn(chatId: number, body: ReasonBody): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/warn`, body);
  }

  /** `POST /v1/portal/hard-mute {user_id, duration?, reason?}` → `{ok}`: mutes in every chat (Moderators and above). */
  hardMute(body: PunishBody): Promise<OkAnswer> {
    return this.post('/v1/portal/hard-mute', body);
  }

  /** `POST /v1/portal/hard-unmute {user_id}` → `{ok}`. */
  hardUnmute(body: TargetInput): Promise<OkAnswer> {
    return this.post('/v1/portal/hard-unmute', body);
  }
}
