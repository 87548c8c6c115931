import { Limits, Platforms, type User } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { retryAfterSeconds } from '../../platform/http.js';
import { randomCode } from '../../platform/secrets.js';
import type { StateStore } from '../../platform/state/index.js';
import type { NotificationsService } from '../notifications/notifications.service.js';
import type { NotificationRow } from '../notifications/notifications.store.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import { effectiveState } from '../users/users.presenter.js';
import { isUniqueViolation, type Tx, type UserRow, type UsersStore } from '../users/users.store.js';
import { CODE_SHAPE, type CodePool, type CodeRecord, type CodeStore } from './auth.codes.js';

const USERNAME_SUFFIX_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** How often every node sweeps dead stranger accounts (app.ts). */
export const STRANGER_SWEEP_INTERVAL_MS = 10 * 60 * 1000;
/**
 * A stranger is deleted only once its last session has been over this long, so a request that
 * was in flight when it logged out (or expired) never races the deletion.
 */
export const STRANGER_GRACE_MS = 60 * 60 * 1000;
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

export function makeAuthService(deps: AuthDeps) {
  const { db, clock, state, codes, users, sessions, notifications } = deps;
  const failuresPerIp = state.limiter('verify-fail-ip', Limits.VERIFY_FAILURES_PER_IP, Limits.VERIFY_FAILURE_WINDOW_MS);
  const failuresGlobal = state.limiter(
    'verify-fail-all',
    Limits.VERIFY_FAILURES_GLOBAL,
    Limits.VERIFY_FAILURE_WINDOW_MS,
  );

  const strangersPerIp = state.limiter('stranger-ip', Limits.STRANGERS_PER_IP, Limits.STRANGER_WINDOW_MS);

  const assertNotBanned = (u: UserRow | undefined) => {
    if (u && effectiveState(u, clock.now()) === 2) throw appError('ERR_BANNED');
  };

  /**
   * Refuses an address that used up its failed attempts. When the service-wide failure budget is
   * spent too, addresses that failed at least once in the window are refused as well, while clean
   * addresses still verify (so an attacker cannot lock everyone out). docs/security.md has the sums.
   */
  const assertAttemptsLeft = async (ip: string) => {
    const own = await failuresPerIp.peek(ip);
    if (!own.allowed)
      throw appError('ERR_RATE_LIMITED', undefined, { retry_after: retryAfterSeconds(own.retryAfterMs) });
    if (own.remaining === Limits.VERIFY_FAILURES_PER_IP) return;
    const all = await failuresGlobal.peek('all');
    if (!all.allowed)
      throw appError('ERR_RATE_LIMITED', undefined, { retry_after: retryAfterSeconds(all.retryAfterMs) });
  };

  const failed = async (ip: string): Promise<never> => {
    await failuresPerIp.consume(ip);
    await failuresGlobal.consume('all');
    throw appError('ERR_INVALID_CODE');
  };

  /** Creates the account of spec 4.1 rule 1: a random `user_…` name and the platform identity. */
  const createAccount = async (rec: CodeRecord, tx: Tx): Promise<UserRow> => {
    const now = clock.now();
    for (let attempt = 0; ; attempt++) {
      const username = `user_${randomCode(USERNAME_SUFFIX_ALPHABET, 10)}`;
      try {
        const user = await users.insertUser({ username, lastActivityAt: now, createdAt: now, updatedAt: now }, tx);
        await users.insertPlatform(
          {
            userId: user.id,
            platform: rec.platform,
            platformUserId: rec.platformUserId,
            platformUsername: rec.profile?.username ?? rec.platformUserId,
            platformAvatarUrl: rec.profile?.avatarUrl ?? '',
            linkedAt: now,
            lastAuthenticatedAt: now,
          },
          tx,
        );
        return user;
      } catch (e) {
        if (!isUniqueViolation(e) || attempt >= 3) throw e;
      }
    }
  };

  /** Finds or creates the account, opens a session and writes the notifications, in one transaction. */
  const login = async (rec: CodeRecord, ip: string, userAgent: string): Promise<LoginResult> => {
    const now = clock.now();
    const result = await db.transaction(async (tx) => {
      let user = await users.byIdentity(rec.platform, rec.platformUserId, tx);
      const newAccount = !user;
      if (!user) {
        if (rec.pool === 'bot') throw appError('ERR_PLATFORM_IDENTITY_NOT_FOUND');
        user = await createAccount(rec, tx);
      }
      const locked = await users.byIdForUpdate(user.id, tx);
      if (!locked) throw appError('ERR_USER_NOT_FOUND');
      assertNotBanned(locked);
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
      } else if (!(await sessions.store.hasSessionFromIp(locked.id, ip, created.session.id, tx))) {
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
     * Web-initiated code (spec 5): bound to the requesting IP; a repeated request from the same IP
     * returns the same code; a request from another IP replaces it (one active code per identity).
     */
    async request(platform: string, platformUserId: string, ip: string): Promise<{ expires_at: string }> {
      assertPlatform(platform);
      assertNotBanned(await users.byIdentity(platform, platformUserId));
      const existing = await codes.activeFor('web', platform, platformUserId);
      if (existing && existing.rec.ip === ip) return { expires_at: new Date(existing.rec.expiresAt).toISOString() };
      if (existing) await codes.revoke(existing.code, existing.rec);
      const issued = await codes.issue('web', platform, platformUserId, ip);
      if ('limited' in issued) {
        throw appError(
          'ERR_RATE_LIMITED',
          'Too many pending login codes from this address; use one or wait for one to expire.',
          {
            retry_after: retryAfterSeconds(issued.limited),
          },
        );
      }
      return { expires_at: new Date(issued.rec.expiresAt).toISOString() };
    },

    /** A bot fetches the pending web code to deliver it, supplying the platform profile. */
    async botLoginCode(input: {
      platform: string;
      platform_user_id: string;
      platform_username: string;
      platform_avatar_url: string;
    }): Promise<{ code: string | null; expires_at: string | null }> {
      assertPlatform(input.platform);
      const active = await codes.activeFor('web', input.platform, input.platform_user_id);
      if (!active) return { code: null, expires_at: null };
      active.rec.profile = { username: input.platform_username, avatarUrl: input.platform_avatar_url };
      await codes.save(active.code, active.rec);
      return { code: active.code, expires_at: new Date(active.rec.expiresAt).toISOString() };
    },

    /** Bot-initiated quick login: existing accounts only, and the website every 6th time. */
    async botSendCode(platform: string, platformUserId: string): Promise<{ code: string; expires_at: string }> {
      assertPlatform(platform);
      const user = await users.byIdentity(platform, platformUserId);
      if (!user) throw appError('ERR_PLATFORM_IDENTITY_NOT_FOUND');
      assertNotBanned(user);
      if (user.botLoginsSinceWeb >= Limits.BOT_LOGIN_WEB_REQUIRED_EVERY) throw appError('ERR_WEB_LOGIN_REQUIRED');
      const issued =
        (await codes.activeFor('bot', platform, platformUserId)) ??
        (await codes.issue('bot', platform, platformUserId, null));
      if ('limited' in issued) throw appError('ERR_RATE_LIMITED');
      return { code: issued.code, expires_at: new Date(issued.rec.expiresAt).toISOString() };
    },

    /** An anonymous account and session for matchmaking (DESIGN.md 6, strangers). */
    async stranger(
      ip: string,
      userAgent: string,
    ): Promise<{ id: number; username: string; token: string; expiresAt: Date }> {
      const allowance = await strangersPerIp.consume(ip);
      if (!allowance.allowed)
        throw appError('ERR_RATE_LIMITED', 'Too many anonymous sessions from this address; try again later.', {
          retry_after: retryAfterSeconds(allowance.retryAfterMs),
        });
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

    /** Verifies a code of either pool; failures are counted per IP and service-wide. */
    async verify(rawCode: string, ip: string, userAgent: string): Promise<LoginResult> {
      await assertAttemptsLeft(ip);
      const code = rawCode.toUpperCase();
      if (!CODE_SHAPE.test(code)) return failed(ip);
      let pool: CodePool | null = null;
      for (const p of ['web', 'bot'] as const) {
        const rec = await codes.read(p, code);
        if (rec && (rec.ip === null || rec.ip === ip)) pool = p;
      }
      if (!pool) return failed(ip);
      const rec = await codes.take(pool, code);
      if (!rec) return failed(ip);
      return login(rec, ip, userAgent);
    },
  };
}

export type AuthService = ReturnType<typeof makeAuthService>;
