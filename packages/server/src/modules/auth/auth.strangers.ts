import { Limits } from '@parlor/protocol';
import { addressKey } from '../../platform/client-address.js';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import { randomCode } from '../../platform/secrets.js';
import type { StateStore } from '../../platform/state/index.js';
import { makeKeyLimit } from '../../platform/write-limit.js';
import type { SessionsService } from '../sessions/sessions.service.js';
import type { UsersStore } from '../users/users.store.js';
import { USERNAME_SUFFIX_ALPHABET } from './auth.login.js';

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

export interface StrangersDeps {
  db: Db;
  clock: Clock;
  state: StateStore;
  users: UsersStore;
  sessions: SessionsService;
}

/** Stranger accounts: their creation (limited per address, barred after a block) and the sweep of dead ones. */
export function makeStrangers({ db, clock, state, users, sessions }: StrangersDeps) {
  const strangersPerIp = makeKeyLimit(state, {
    name: 'stranger-ip',
    points: Limits.STRANGERS_PER_IP,
    windowMs: Limits.STRANGER_WINDOW_MS,
    message: 'Too many anonymous sessions from this address; try again later.',
  });

  return {
    /**
     * An anonymous account and session for matchmaking (DESIGN.md 6, strangers). An address a
     * stranger block barred (barStrangerAddress) gets 403 ERR_STRANGER_BLOCKED, spending nothing.
     * The address's allowance counts the strangers made: a creation refused by it, or whose
     * transaction fails (nothing made), gives its point back, as a refused write does (write-limit.ts).
     */
    async stranger(
      ip: string,
      userAgent: string,
    ): Promise<{ id: number; username: string; token: string; expiresAt: Date }> {
      if ((await state.get(strangerBarKey(ip))) !== null)
        throw appError('ERR_STRANGER_BLOCKED', 'Anonymous sessions from this address are blocked for now.');
      const key = addressKey(ip);
      // A refused creation spends nothing (makeKeyLimit), as a refused write does.
      const spent = await strangersPerIp.spend(key);
      const now = clock.now();
      const created = await db
        .transaction(async (tx) => {
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
        })
        .catch(async (err: unknown) => {
          // Rolled back, it made no stranger. A store that cannot take the point back costs the address that one.
          await strangersPerIp.giveBack(spent).catch(() => {});
          throw err;
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
  };
}
