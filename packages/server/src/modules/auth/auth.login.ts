import { Limits, type User } from '@parlor/protocol';
import { stateRefusal } from '../../platform/auth.js';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { randomCode } from '../../platform/secrets.js';
import type { NotificationsService } from '../notifications/notifications.service.js';
import type { NotificationRow } from '../notifications/notifications.store.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import { effectiveState } from '../users/users.presenter.js';
import { isUniqueViolation, type UserRow, type UsersStore } from '../users/users.store.js';
import type { TakenCode } from './auth.codes.js';

/** The characters of a generated name's random part (user_…, stranger_…). */
export const USERNAME_SUFFIX_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
/** Names drawn for a new account before a run of collisions fails the login (36^10 names: never). */
const MAX_USERNAME_DRAWS = 4;

/** The handle of login's transaction: its savepoints (`transaction`) undo one account attempt. */
type LoginTx = Parameters<Parameters<Db['transaction']>[0]>[0];

export interface LoginResult {
  user: User;
  newAccount: boolean;
  token: string;
  expiresAt: Date;
}

export interface LoginDeps {
  db: Db;
  clock: Clock;
  users: UsersStore;
  sessions: SessionsService;
  notifications: NotificationsService;
  present: (u: UserRow) => Promise<User>;
}

/** Signing in with a taken code: the account found or created, locked, checked, and a session opened. */
export function makeLogin(deps: LoginDeps) {
  const { db, clock, users, sessions, notifications } = deps;

  /**
   * A banned account logs in nowhere, and a timed-out one not before its timeout ends (spec 3: it
   * cannot access the platform until expiry): the state that applies now, as the session guard
   * reads it (effectiveState), so a lapsed timeout refuses nothing.
   */
  const assertMayLogIn = (u: UserRow | undefined) => {
    const refusal = stateRefusal(u ? effectiveState(u, clock.now()) : 0);
    if (refusal) throw appError(refusal);
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

  return { assertMayLogIn, login };
}
