import {
  AuditCodes,
  DefaultAvatarKeys,
  type SubscriptionStatus,
  SubscriptionTier,
  type UpdateMeBody,
  USERNAME_PATTERN,
  type User,
} from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { afterCommit } from '../../platform/db/after-commit.js';
import { appError } from '../../platform/errors.js';
import { effectiveSubscription, toUser } from './users.presenter.js';
import {
  isUniqueViolation,
  type LinkedPlatformRow,
  lockLiveSessions,
  type Tx,
  type UserRow,
  type UsersStore,
} from './users.store.js';

const usernameRe = new RegExp(USERNAME_PATTERN);
export const USERNAME_RULE = 'must be 3-32 characters: letters, digits, dots, underscores or hyphens';
export const AVATAR_SOURCE_RULE =
  'must be a linked platform, a default avatar key (platform_a_0 to platform_a_5), or empty';

const TIER_NAMES = ['basic', 'trial', 'premium', 'lifetime'] as const;

export function isValidUsername(name: string): boolean {
  return usernameRe.test(name);
}

/** What the caller's own account needs (users.service.ts composes it). */
export interface OwnAccountDeps {
  store: UsersStore;
  clock: Clock;
  publicUrl: string;
  /** Tells the rename listeners of a rename once its transaction has committed. */
  renamed: (userId: number) => void;
}

/**
 * The caller's own account: its row, its update (POST /v1/users/me/update) and its subscription
 * status. A caller whose account was deleted while its request ran answers 401, not 404.
 */
export function makeOwnAccount({ store, clock, publicUrl, renamed }: OwnAccountDeps) {
  /**
   * The caller's own row: one whose account was deleted while its request ran (its session guard
   * passed) answers 401 ERR_UNAUTHENTICATED, its session having ended with it (users.caller.ts).
   */
  const ownRow = async (id: number): Promise<UserRow> => {
    const u = await store.byId(id);
    if (!u) throw appError('ERR_UNAUTHENTICATED');
    return u;
  };

  /** Why a user with these linked platforms cannot use an avatar source, or null (spec 2.1 avatar_source). */
  const avatarSourceRule = (platforms: LinkedPlatformRow[], source: string): string | null =>
    source === '' || DefaultAvatarKeys.includes(source) || platforms.some((p) => p.platform === source)
      ? null
      : AVATAR_SOURCE_RULE;

  /**
   * POST /v1/users/me/update in one transaction that holds the caller's row from the start (a
   * deletion committed before it answers 401; one waiting for the row comes after its commit),
   * then the caller's session row (the lock order: the user's row, then session rows): a session
   * that ended while the update waited for the user's row (destroyed by another of the user's
   * sessions, logged out, expired) answers 401 and nothing is written. Answers the user as it
   * wrote it, read inside it. `nameTaken`: a first run lost its name to the unique index
   * (updateMe); the name is refused and the rest applies.
   */
  const updateOwn = (userId: number, sessionId: number, body: UpdateMeBody, nameTaken: boolean) =>
    store.transaction(async (tx) => {
      const locked = await store.byIdForUpdate(userId, tx);
      if (!locked) throw appError('ERR_UNAUTHENTICATED');
      if ((await lockLiveSessions([sessionId], clock, tx)).length === 0) throw appError('ERR_UNAUTHENTICATED');
      const errors: Record<string, string> = {};
      const { username, avatar_source: avatarSource } = body;
      if (username !== undefined && (nameTaken || !isValidUsername(username)))
        errors.username = nameTaken ? 'is taken' : USERNAME_RULE;
      else if (username !== undefined && username !== locked.username) {
        // The name it has changes nothing; a change of case is a rename.
        const holder = await store.byUsername(username, tx);
        if (holder && holder.id !== userId) errors.username = 'is taken';
        else {
          await store.update(userId, { username, updatedAt: clock.now() }, tx);
          await afterCommit(tx, async () => renamed(userId));
        }
      }
      const platforms = await store.platformsOf(userId, tx);
      if (avatarSource !== undefined) {
        const problem = avatarSourceRule(platforms, avatarSource);
        if (problem) errors.avatar_source = problem;
        else await store.update(userId, { avatarSource, updatedAt: clock.now() }, tx);
      }
      // Read here, the row still held (so it is there: `?? locked` only types it).
      const written = (await store.byId(userId, tx)) ?? locked;
      return { user: toUser(written, platforms, publicUrl, clock.now()), errors };
    });

  /** The subscription status of `u` (spec 4.8), its trial read from the audit log in `tx`. */
  const subscriptionOf = async (u: UserRow, tx?: Tx): Promise<SubscriptionStatus> => {
    const s = effectiveSubscription(u, clock.now());
    return {
      tier: s.tier,
      tier_name: TIER_NAMES[s.tier] ?? 'basic',
      has_premium: s.tier !== SubscriptionTier.BASIC,
      expires_at: s.expiresAt ? s.expiresAt.toISOString() : null,
      granted_by: s.grantedBy,
      trial_used: await store.hasAudit(u.id, AuditCodes.SUBSCRIPTION_GRANT, 'trial', tx),
    };
  };

  return {
    ownRow,
    avatarSourceRule,
    subscriptionOf,

    /**
     * Spec 4.2 rule 1: fields succeed or fail independently; `errors` names the failures. The
     * answer is what the update's transaction wrote (updateOwn): a deletion committed right after
     * it cannot turn the committed change into an error (docs/api.md Users). `sessionId`: the
     * caller's session, which must still be live when the update holds the user's row.
     */
    async updateMe(
      userId: number,
      sessionId: number,
      body: UpdateMeBody,
    ): Promise<{ user: User; errors: Record<string, string> | null }> {
      const { user, errors } = await updateOwn(userId, sessionId, body, false).catch((e: unknown) => {
        // Two renames racing for one name: the unique index refuses one, and its transaction rolls back.
        if (isUniqueViolation(e)) return updateOwn(userId, sessionId, body, true);
        throw e;
      });
      return { user, errors: Object.keys(errors).length > 0 ? errors : null };
    },

    /** GET /v1/users/me/subscription: its caller's account gone, 401 (ownRow). */
    async subscription(userId: number): Promise<SubscriptionStatus> {
      return subscriptionOf(await ownRow(userId));
    },
  };
}

export type OwnAccount = ReturnType<typeof makeOwnAccount>;
