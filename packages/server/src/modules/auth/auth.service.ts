import { BotType, Limits, Platforms, type User } from '@parlor/protocol';
import { type Principal, stateRefusal } from '../../platform/auth.js';
import { addressKey } from '../../platform/client-address.js';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { rateLimited } from '../../platform/http.js';
import { randomCode } from '../../platform/secrets.js';
import type { StateStore } from '../../platform/state/index.js';
import type { NotificationsService } from '../notifications/notifications.service.js';
import type { NotificationRow } from '../notifications/notifications.store.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import { effectiveState } from '../users/users.presenter.js';
import { isUniqueViolation, type UserRow, type UsersStore } from '../users/users.store.js';
import { makeVerifyAttempts } from './auth.attempts.js';
import { CODE_SHAPE, type CodeStore, type TakenCode } from './auth.codes.js';

const USERNAME_SUFFIX_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
/** Names drawn for a new account before a run of collisions fails the login (36^10 names: never). */
const MAX_USERNAME_DRAWS = 4;

/** The handle of login's transaction: its savepoints (`transaction`) undo one account attempt. */
type LoginTx = Parameters<Parameters<Db['transaction']>[0]>[0];

/** How often every node sweeps dead stranger accounts (app.ts). */
export const STRANGER_SWEEP_INTERVAL_MS = 10 * 60 * 1000;
/**
 * A stranger is deleted only once its last session has been over this long, so a request that
 * was in flight when it logged out (or expired) never races the deletion.
 */
export const STRANGER_GRACE_MS = 60 * 60 * 1000;
/**
 * How long the address that made a stranger a moderator blocked makes no new stranger (spec
 * v1.12: the block is of the stranger session, and a new stranger would be a new session). 24 h:
 * as long as a direct chat lasts, and short, since an address may be shared (a NAT, a carrier's).
 */
export const STRANGER_ADDRESS_BAR_MS = 24 * 3600_000;
/** The state key of an address barred from making strangers (addressKey: an IPv6 client by its /64). */
const strangerBarKey = (ip: string) => `stranger-barred:${addressKey(ip)}`;
/** Accounts per statement; a sweep runs batches until one comes back short (at most 20). */
const STRANGER_SWEEP_BATCH = 500;
const STRANGER_SWEEP_MAX_BATCHES = 20;

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

export interface LoginResult {
  user: User;
  newAccount: boolean;
  token: string;
  expiresAt: Date;
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
  const { db, clock, state, codes, users, sessions, notifications } = deps;
  const attempts = makeVerifyAttempts(state);
  const strangersPerIp = state.limiter('stranger-ip', Limits.STRANGERS_PER_IP, Limits.STRANGER_WINDOW_MS);

  /**
   * A banned account logs in nowhere, and a timed-out one not before its timeout ends (spec 3: it
   * cannot access the platform until expiry): the state that applies now, as the session guard
   * reads it (effectiveState), so a lapsed timeout refuses nothing.
   */
  const assertMayLogIn = (u: UserRow | undefined) => {
    const refusal = stateRefusal(u ? effectiveState(u, clock.now()) : 0);
    if (refusal) throw appError(refusal);
  };

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

  /**
   * Creates the account of spec 4.1 rule 1: a random `user_…` name and the platform identity. Each
   * attempt runs in a savepoint, so a unique violation undoes only that attempt and the login's
   * transaction goes on: a name taken already is drawn again; an identity another verify linked
   * meanwhile (its transaction committed while this insert waited on it) is that account, and
   * this login signs into it (`created` false).
   */
  const createAccount = async (rec: TakenCode, tx: LoginTx): Promise<{ user: UserRow; created: boolean }> => {
    const now = clock.now();
    for (let attempt = 0; ; attempt++) {
      const username = `user_${randomCode(USERNAME_SUFFIX_ALPHABET, 10)}`;
      try {
        const user = await tx.transaction(async (sp) => {
          const row = await users.insertUser({ username, lastActivityAt: now, createdAt: now, updatedAt: now }, sp);
          await users.insertPlatform(
            {
              userId: row.id,
              platform: rec.platform,
              platformUserId: rec.platformUserId,
              platformUsername: rec.profile?.username ?? rec.platformUserId,
              platformAvatarUrl: rec.profile?.avatarUrl ?? '',
              linkedAt: now,
              lastAuthenticatedAt: now,
            },
            sp,
          );
          return row;
        });
        return { user, created: true };
      } catch (e) {
        if (!isUniqueViolation(e)) throw e;
        const linked = await users.byIdentity(rec.platform, rec.platformUserId, tx);
        if (linked) return { user: linked, created: false };
        if (attempt >= MAX_USERNAME_DRAWS - 1) throw e;
      }
    }
  };

  /**
   * Finds or creates the code's account inside the login's transaction and locks its row. The
   * identity is read without a lock: an account deletion that commits while this waits for the
   * row leaves the locked read empty, and the identity is then looked up again, as a login that
   * came after the deletion would (a bot code: 404 ERR_PLATFORM_IDENTITY_NOT_FOUND; a web code:
   * the account is made anew, or is the one another verify made meanwhile). Each further round
   * needs another deletion of the identity's account to commit in between.
   */
  const lockAccount = async (rec: TakenCode, tx: LoginTx): Promise<{ locked: UserRow; newAccount: boolean }> => {
    for (;;) {
      const found = await users.byIdentity(rec.platform, rec.platformUserId, tx);
      if (!found && rec.pool === 'bot') throw appError('ERR_PLATFORM_IDENTITY_NOT_FOUND');
      const { user, created } = found ? { user: found, created: false } : await createAccount(rec, tx);
      // Lock order (docs/api.md Moderation): a login that will evict a keyed session takes the
      // user's chats before the user's row, as a ban does (a new account has no session to evict).
      if (!created) await sessions.lockForLogin(user.id, tx);
      const locked = await users.byIdForUpdate(user.id, tx);
      if (locked) return { locked, newAccount: created };
    }
  };

  /** Finds or creates the account, opens a session and writes the notifications, in one transaction. */
  const login = async (rec: TakenCode, ip: string, userAgent: string): Promise<LoginResult> => {
    const now = clock.now();
    const result = await db.transaction(async (tx) => {
      // Everything below is decided on the locked row: a ban, a timeout or another login may have
      // been written since the code was made or the identity was read.
      const { locked, newAccount } = await lockAccount(rec, tx);
      assertMayLogIn(locked);
      // bot/send-code checked the count unlocked: a send-code that overlapped the 5th bot login in
      // a row made a code this refuses. The code is used up; nothing is written.
      if (rec.pool === 'bot' && locked.botLoginsSinceWeb >= Limits.BOT_LOGIN_WEB_REQUIRED_EVERY)
        throw appError('ERR_WEB_LOGIN_REQUIRED');
      await users.touchPlatform(rec.platform, rec.platformUserId, now, rec.profile, tx);
      const updated = await users.update(
        locked.id,
        {
          lastActivityAt: now,
          botLoginsSinceWeb: rec.pool === 'bot' ? locked.botLoginsSinceWeb + 1 : 0,
        },
        tx,
      );
      const created = await sessions.create(
        { userId: locked.id, permissionLevel: locked.permissionLevel, ip, userAgent },
        tx,
      );
      let note: NotificationRow | null = null;
      if (newAccount) {
        note = await notifications.automated(locked.id, 'welcome', { username: locked.username }, tx);
      } else if (!(await sessions.store.hasSessionFromIp(locked.id, ip, created.session.id, now, tx))) {
        note = await notifications.automated(locked.id, 'new_ip_login', { ip }, tx);
      }
      return { user: updated ?? locked, newAccount, created, note };
    });
    if (result.note) notifications.publish(result.note);
    return {
      user: await deps.present(result.user),
      newAccount: result.newAccount,
      token: result.created.token,
      expiresAt: result.created.session.expiresAt,
    };
  };

  return {
    /** Spec 4.1 lookup: the linked platforms of a username, so the site can offer them. */
    async lookup(username: string) {
      const user = await users.byUsername(username);
      if (!user) throw appError('ERR_USER_NOT_FOUND');
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
      // Should web requests race in and win the identity back twice, their code is handed out: it
      // still works where it was requested.
      for (let round = 1; ; round++) {
        const held =
          (await codes.active(platform, platformUserId)) ?? (await codes.issue('bot', platform, platformUserId, null));
        // Never for a bot code (no address to count it against): the type says it may.
        if ('limited' in held) throw appError('ERR_RATE_LIMITED');
        if (held.rec.pool === 'bot' || round === 3)
          return { code: held.code, expires_at: new Date(held.rec.expiresAt).toISOString() };
        await codes.revoke(held.code, held.rec);
      }
    },

    /**
     * An anonymous account and session for matchmaking (DESIGN.md 6, strangers). An address a
     * stranger block barred (barStrangerAddress) gets 403 ERR_STRANGER_BLOCKED, spending nothing.
     */
    async stranger(
      ip: string,
      userAgent: string,
    ): Promise<{ id: number; username: string; token: string; expiresAt: Date }> {
      if ((await state.get(strangerBarKey(ip))) !== null)
        throw appError('ERR_STRANGER_BLOCKED', 'Anonymous sessions from this address are blocked for now.');
      const allowance = await strangersPerIp.consume(addressKey(ip));
      if (!allowance.allowed)
        throw rateLimited(allowance.retryAfterMs, 'Too many anonymous sessions from this address; try again later.');
      const now = clock.now();
      const created = await db.transaction(async (tx) => {
        const user = await users.insertUser(
          {
            username: `stranger_${randomCode(USERNAME_SUFFIX_ALPHABET, 12)}`,
            isStranger: true,
            lastActivityAt: now,
            createdAt: now,
            updatedAt: now,
          },
          tx,
        );
        return { user, session: await sessions.create({ userId: user.id, permissionLevel: 0, ip, userAgent }, tx) };
      });
      return {
        id: created.user.id,
        username: created.user.username,
        token: created.session.token,
        expiresAt: created.session.session.expiresAt,
      };
    },

    /**
     * Bars the address (addressKey) that made a stranger a moderator blocked from making new
     * strangers for STRANGER_ADDRESS_BAR_MS, in the coordination store, so on every node. Users
     * sharing the address are barred from anonymous sessions meanwhile; sign-ins are not.
     */
    async barStrangerAddress(ip: string): Promise<void> {
      await state.set(strangerBarKey(ip), '1', STRANGER_ADDRESS_BAR_MS);
    },

    /**
     * Deletes dead stranger accounts: such an account can never sign in again once its sessions
     * are over (it has no platform identity). Kept while any session is live or ended less than
     * STRANGER_GRACE_MS ago, and while it is a member of a chat not yet removed (an archived direct
     * chat still shows it to the peer). Safe on every node at once. Answers the deleted ids.
     */
    async sweepStrangers(batch = STRANGER_SWEEP_BATCH): Promise<number[]> {
      const cutoff = new Date(clock.now().getTime() - STRANGER_GRACE_MS);
      const removed: number[] = [];
      for (let i = 0; i < STRANGER_SWEEP_MAX_BATCHES; i++) {
        const ids = await users.removeDeadStrangers(cutoff, batch);
        removed.push(...ids);
        if (ids.length < batch) break;
      }
      return removed;
    },

    /**
     * Verifies a code of either pool. Every attempt is counted before the code is looked at, per
     * client address (addressKey) and service-wide; one that finds its code is given back.
     */
    async verify(rawCode: string, ip: string, userAgent: string): Promise<LoginResult> {
      const key = addressKey(ip);
      const refused = await attempts.spend(key);
      if (refused !== null) throw rateLimited(refused);
      const rec = await takeCode(rawCode.toUpperCase(), ip);
      if (!rec) throw appError('ERR_INVALID_CODE');
      await attempts.giveBack(key);
      return login(rec, ip, userAgent);
    },
  };
}

export type AuthService = ReturnType<typeof makeAuthService>;
