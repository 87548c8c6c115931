import { BotType, Limits, Platforms, type User } from '@parlor/protocol';
import type { Principal } from '../../platform/auth.js';
import { addressKey } from '../../platform/client-address.js';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { rateLimited } from '../../platform/http.js';
import type { StateStore } from '../../platform/state/index.js';
import type { NotificationsService } from '../notifications/notifications.service.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import type { UserRow, UsersStore } from '../users/users.store.js';
import { makeVerifyAttempts } from './auth.attempts.js';
import { CODE_SHAPE, type CodeStore, type HeldCode, type TakenCode } from './auth.codes.js';
import { type LoginResult, makeLogin } from './auth.login.js';
import { makeStrangers } from './auth.strangers.js';

// Signing in (auth.login.ts) and strangers (auth.strangers.ts) live beside this file; importers take their names from here.
export { STRANGER_ADDRESS_BAR_MS, STRANGER_GRACE_MS, STRANGER_SWEEP_INTERVAL_MS } from './auth.strangers.js';
export type { LoginResult };

export interface AuthDeps {
  db: Db;
  clock: Clock;
  state: StateStore;
  codes: CodeStore;
  users: UsersStore;
  sessions: SessionsService;
  notifications: NotificationsService;
  present: (u: UserRow) => Promise<User>;
}

function assertPlatform(platform: string) {
  if (!(Platforms as readonly string[]).includes(platform)) throw appError('ERR_UNSUPPORTED_PLATFORM');
}

/** The calling bot as the bot guard resolved it from its key at this request. */
export type CallingBot = NonNullable<Principal['bot']>;

/**
 * Only Official (first-party) bots deliver login codes: bot/send-code hands out a working code for
 * any existing identity and bot/login-code any pending one, so whoever holds a key that may call
 * them can sign in as anyone. Verified and Community bots are third parties (and Admins register
 * them), so they get 403 before anything is read or written. The spec does not restrict these
 * routes by bot type: this is Parlor's choice (docs/api.md Login, docs/security.md). The type is
 * the one the key's row has at this request, so a bot made non-official is refused from its next.
 */
function assertDeliversCodes(bot: CallingBot) {
  if (bot.type !== BotType.OFFICIAL) throw appError('ERR_FORBIDDEN', 'Only official bots deliver login codes.');
}

export function makeAuthService(deps: AuthDeps) {
  const { state, codes, users } = deps;
  const attempts = makeVerifyAttempts(state);
  const { assertMayLogIn, login } = makeLogin(deps);

  const pendingLimit = (ms: number) =>
    rateLimited(ms, 'Too many pending login codes from this address; use one or wait for one to expire.');

  /** Takes a code that `ip` may use, from whichever pool holds it; null when there is none. */
  const takeCode = async (code: string, ip: string): Promise<TakenCode | null> => {
    if (!CODE_SHAPE.test(code)) return null;
    for (const pool of ['web', 'bot'] as const) {
      const rec = await codes.read(pool, code);
      if (rec && (await codes.usableFrom(code, rec, ip))) return codes.take(pool, code, ip);
    }
    return null;
  };

  return {
    ...makeStrangers(deps),

    /**
     * Spec 4.1 lookup: the linked platforms of a username, so the site can offer them. An anonymous
     * stranger is not found: nobody logs in as one, and its name would only tell whether it lives
     * (strangers are not listed in user search either).
     */
    async lookup(username: string) {
      const user = await users.byUsername(username);
      if (!user || user.isStranger) throw appError('ERR_USER_NOT_FOUND');
      const platforms = await users.platformsOf(user.id);
      return {
        username: user.username,
        linked_platforms: platforms.map((p) => ({
          platform: p.platform,
          platform_user_id: p.platformUserId,
          platform_username: p.platformUsername,
          platform_avatar_url: p.platformAvatarUrl,
        })),
      };
    },

    /**
     * Web-initiated code (spec 5): an identity has one active code, and every request for it gets
     * that code, from whatever address it comes (no request can cancel another's pending login).
     * Each requesting address may verify a web code; each has at most PENDING_WEB_CODES_PER_IP
     * codes pending, repeated requests for one identity counting once (spec 8).
     */
    async request(platform: string, platformUserId: string, ip: string): Promise<{ expires_at: string }> {
      assertPlatform(platform);
      assertMayLogIn(await users.byIdentity(platform, platformUserId));
      const held =
        (await codes.active(platform, platformUserId)) ?? (await codes.issue('web', platform, platformUserId, ip));
      if ('limited' in held) throw pendingLimit(held.limited);
      const wait = await codes.join(held.code, held.rec, ip);
      if (wait !== null) throw pendingLimit(wait);
      return { expires_at: new Date(held.rec.expiresAt).toISOString() };
    },

    /**
     * A bot fetches the identity's pending code to deliver it, supplying the platform profile (used
     * if verify creates the account). That is the web code a request made, or a bot code when
     * send-code made one first: a request then answered with that code.
     */
    async botLoginCode(
      bot: CallingBot,
      input: {
        platform: string;
        platform_user_id: string;
        platform_username: string;
        platform_avatar_url: string;
      },
    ): Promise<{ code: string | null; expires_at: string | null }> {
      assertDeliversCodes(bot);
      assertPlatform(input.platform);
      const active = await codes.active(input.platform, input.platform_user_id);
      if (!active) return { code: null, expires_at: null };
      await codes.setProfile(active.code, active.rec, {
        username: input.platform_username,
        avatarUrl: input.platform_avatar_url,
      });
      return { code: active.code, expires_at: new Date(active.rec.expiresAt).toISOString() };
    },

    /**
     * Bot-initiated quick login: existing accounts only, and the website every 6th time. A pending
     * bot code is returned again. A pending web code is replaced by a bot code: only an official
     * bot can ask, for the identity's owner, who receives the new code (as every code of the
     * identity), which works from any address where the web code works only where it was requested.
     */
    async botSendCode(
      bot: CallingBot,
      platform: string,
      platformUserId: string,
    ): Promise<{ code: string; expires_at: string }> {
      assertDeliversCodes(bot);
      assertPlatform(platform);
      const user = await users.byIdentity(platform, platformUserId);
      if (!user) throw appError('ERR_PLATFORM_IDENTITY_NOT_FOUND');
      assertMayLogIn(user);
      if (user.botLoginsSinceWeb >= Limits.BOT_LOGIN_WEB_REQUIRED_EVERY) throw appError('ERR_WEB_LOGIN_REQUIRED');
      const answer = (held: HeldCode) => ({
        code: held.code,
        expires_at: new Date(held.rec.expiresAt).toISOString(),
      });
      for (;;) {
        const held =
          (await codes.active(platform, platformUserId)) ?? (await codes.issue('bot', platform, platformUserId, null));
        // Never for a bot code (no address to count it against): the type says it may.
        if ('limited' in held) throw appError('ERR_RATE_LIMITED');
        if (held.rec.pool === 'bot') return answer(held);
        // A web code is replaced in one step, so web requests racing in cannot win the identity
        // back: the answer is always a bot code. Only a web code used or expired meanwhile (a
        // verify, not a request) sends this round back to look again.
        const replaced = await codes.replaceWithBotCode(held);
        if (replaced) return answer(replaced);
      }
    },

    /**
     * Verifies a code of either pool. Every attempt is counted before the code is looked at, per
     * client address (addressKey) and service-wide; one that finds its code is given back.
     */
    async verify(rawCode: string, ip: string, userAgent: string): Promise<LoginResult> {
      const key = addressKey(ip);
      const attempt = await attempts.spend(key);
      if (typeof attempt === 'number') throw rateLimited(attempt);
      const rec = await takeCode(rawCode.toUpperCase(), ip);
      if (!rec) throw appError('ERR_INVALID_CODE');
      await attempts.giveBack(attempt);
      return login(rec, ip, userAgent);
    },
  };
}

export type AuthService = ReturnType<typeof makeAuthService>;
