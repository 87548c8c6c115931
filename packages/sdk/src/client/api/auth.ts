import { isApiError } from '../errors.js';
import type {
  LookupAnswer,
  OkAnswer,
  PageInput,
  PlatformIdentity,
  Punishment,
  RequestCodeAnswer,
  SearchInput,
  SessionsAnswer,
  StrangerAnswer,
  SubscriptionStatus,
  UpdateMeAnswer,
  UpdateMeBody,
  UserAnswer,
  UserProfile,
  UserSearchAnswer,
  VerifyAnswer,
} from '../types.js';
import { ParlorClientBase } from './base.js';

/** ParlorClient's login, user and session routes (spec 2.1, 2.5, 4.1, 5). */
export abstract class AuthRoutes extends ParlorClientBase {
  // Login (spec 4.1, 5)

  /** `POST /v1/authentication/lookup`: the linked platforms of a username (K). */
  lookup(username: string): Promise<LookupAnswer> {
    return this.post('/v1/authentication/lookup', { username });
  }

  /** `POST /v1/authentication/request`: starts a web login; a bot delivers the code (K). */
  requestCode(identity: PlatformIdentity): Promise<RequestCodeAnswer> {
    return this.post('/v1/authentication/request', identity);
  }

  /** `POST /v1/authentication/verify`: logs in with a code; the session cookie is kept (K). */
  verify(code: string): Promise<VerifyAnswer> {
    return this.post('/v1/authentication/verify', { code });
  }

  /**
   * `POST /v1/portal/stranger`: an anonymous session that may match, use its direct chats and keys,
   * nothing else; its session cookie is kept (K) → `{user: {id, username, stranger: true}}`.
   */
  stranger(): Promise<StrangerAnswer> {
    return this.post('/v1/portal/stranger');
  }

  /**
   * `POST /v1/authentication/logout`: ends this session and forgets its cookie. A session that had
   * already ended (401 `ERR_UNAUTHENTICATED`, thrown) is forgotten too.
   */
  async logout(): Promise<OkAnswer> {
    try {
      const answer = await this.post<OkAnswer>('/v1/authentication/logout');
      this.setSession(null);
      return answer;
    } catch (error) {
      if (isApiError(error, 'ERR_UNAUTHENTICATED')) this.setSession(null);
      throw error;
    }
  }

  // Users and sessions (spec 2.1, 2.5)

  /** `GET /v1/users/me` → `{user}`. */
  me(): Promise<UserAnswer> {
    return this.get('/v1/users/me');
  }

  /** `POST /v1/users/me/update` → `{user, errors}` (fields succeed or fail independently). */
  updateMe(body: UpdateMeBody): Promise<UpdateMeAnswer> {
    return this.post('/v1/users/me/update', body);
  }

  /** `GET /v1/users/me/subscription`. */
  subscription(): Promise<SubscriptionStatus> {
    return this.get('/v1/users/me/subscription');
  }

  /** `GET /v1/users/me/punishments` (a bare array, newest first). */
  punishments(page: PageInput = {}): Promise<Punishment[]> {
    return this.get('/v1/users/me/punishments', { ...page });
  }

  /** `GET /v1/users/me/sessions` → `{sessions, history}`. */
  sessions(): Promise<SessionsAnswer> {
    return this.get('/v1/users/me/sessions');
  }

  /** `POST /v1/users/me/sessions/{token_suffix}/destroy` → `{destroyed}`. */
  destroySession(tokenSuffix: string): Promise<{ destroyed: boolean }> {
    return this.post(`/v1/users/me/sessions/${encodeURIComponent(tokenSuffix)}/destroy`);
  }

  /** `POST /v1/users/me/sessions/destroy`: ends every other session → `{destroyed}`. */
  destroyOtherSessions(): Promise<{ destroyed: number }> {
    return this.post('/v1/users/me/sessions/destroy');
  }

  /** `GET /v1/users/search?q=` → `{users}` (full detail of users below an Admin caller's level). */
  searchUsers(input: SearchInput): Promise<UserSearchAnswer> {
    return this.get('/v1/users/search', { ...input });
  }

  /** `GET /v1/users/{id}`: the public profile, or the full one for an Admin above the user (K or session). */
  user(userId: number): Promise<UserProfile> {
    return this.get(`/v1/users/${userId}`);
  }
}
