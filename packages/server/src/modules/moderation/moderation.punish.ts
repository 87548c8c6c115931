import { UserState } from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import { lockActorAndTarget } from '../admin/admin.locks.js';
import { type ActorLevel, canActOn } from '../admin/admin.rules.js';
import type { Actor } from '../audit/audit.store.js';
import type { AutomatedKind } from '../notifications/notifications.service.js';
import type { Tx, UserRow } from '../users/users.store.js';
import type { PlatformModerationDeps } from './moderation.platform.js';

/**
 * A punishment given through a chat's route (a warning, a timeout): the chat it is tied to, and
 * what the route does in the punishment's transaction.
 */
export interface InChat {
  chatId: number;
  /**
   * Runs first: takes the chat row's lock and decides the route's rules on the row read under it,
   * before the users rows' locks (the order chats, users, sessions: docs/api.md Moderation).
   */
  hold: (tx: Tx) => Promise<void>;
  /**
   * The route's rules in place of the admin level rule (spec 2.11): whom the caller reaches, on the
   * target's users row and the caller's level (the session's for the early refusal, then the one
   * read under the caller's row lock, with the chat as `hold` read it). Throws to refuse.
   */
  decide: (target: UserRow, callerLevel: number) => void;
  /** Runs last (a warning's system message in the chat). */
  write?: (tx: Tx) => Promise<void>;
}

/** When a punishment of `seconds` ends (none: it does not). */
export const until = (now: Date, seconds: number | undefined) =>
  seconds ? new Date(now.getTime() + seconds * 1000) : null;
/**
 * A punishment's duration as its notification says it: days, hours and minutes (rounded up to the
 * minute), `2 days 3 hours`, `1 minute`; `permanently` without one (43200 minutes read poorly).
 */
export function humanDuration(seconds: number | undefined): string {
  if (!seconds) return 'permanently';
  const minutes = Math.ceil(seconds / 60);
  const parts: [number, string][] = [
    [Math.floor(minutes / 1440), 'day'],
    [Math.floor((minutes % 1440) / 60), 'hour'],
    [minutes % 60, 'minute'],
  ];
  return parts
    .filter(([n]) => n > 0)
    .map(([n, unit]) => `${n} ${unit}${n === 1 ? '' : 's'}`)
    .join(' ');
}

/** The user state a punishment of this type puts its user in. */
const STATE_OF: Record<string, number> = { PLATFORM_BAN: UserState.BANNED, PLATFORM_TIMEOUT: UserState.TIMEOUT };

/**
 * How long, in seconds, what the punishment's notification announces applies (undefined: for
 * good): a longer ban or timeout of the same kind already in force outlasts a shorter one and is
 * the one the user lives under, so the notification names its end, not the shorter record's. A
 * timeout of a banned user names its own duration (it applies if the ban ends first).
 */
function appliesFor(
  type: string,
  now: Date,
  seconds: number | undefined,
  settled: { state: number; stateExpiresAt: Date | null } | null,
): number | undefined {
  if (!settled || settled.state !== STATE_OF[type]) return seconds;
  if (settled.stateExpiresAt === null) return undefined;
  return Math.max(seconds ?? 0, (settled.stateExpiresAt.getTime() - now.getTime()) / 1000);
}

/**
 * Who a platform punishment reaches, decided early and again under the users rows' locks, and
 * the punishment itself (record, state, audit entry, notification) inside the caller's transaction.
 */
export function makePunisher({
  clock,
  store,
  users,
  audit,
  notify,
}: Pick<PlatformModerationDeps, 'clock' | 'store' | 'users' | 'audit' | 'notify'>) {
  /**
   * Whom the caller reaches at `level`: the level rule of spec 2.11 (canActOn: an Admin acts only
   * on users below its level, and a caller below Admin on nobody), or, given through a chat's
   * route (always a user's session), that route's rules (InChat.decide).
   */
  const assertReach = (actor: Actor, level: ActorLevel, target: UserRow, chat?: InChat) => {
    if (actor.kind === 'user' && actor.id === target.id) throw appError('ERR_FORBIDDEN', 'You cannot act on yourself.');
    if (chat && level !== 'operator') chat.decide(target, level);
    else if (!canActOn(level, target.permissionLevel)) throw appError('ERR_FORBIDDEN');
  };

  /**
   * Refuses early, before any transaction, on the level the caller's session read; the decision
   * that counts is lockParties'.
   */
  const assertPlatformTarget = async (actor: Actor, level: ActorLevel, targetId: number, chat?: InChat) => {
    assertReach(actor, level, await users.mustGet(targetId), chat);
  };

  /**
   * Takes the target's row lock for the rest of the transaction, before its records are read or
   * written, and a user caller's with it (lockActorAndTarget: id order, one statement):
   * punishments of one user on any node then run one after the other, each seeing the records of
   * those before it. The level rule is decided again on the rows read under the locks, with the
   * caller's level as read there, not the one its session read when the request began: a
   * promotion of the target committed meanwhile counts, and so does a demotion of the caller (an
   * Admin demoted to User while its ban runs bans nobody: 403). The operator has no row: only the
   * target's is locked, and its level stands.
   */
  const lockParties = async (tx: Tx, actor: Actor, level: ActorLevel, targetId: number, chat?: InChat) => {
    const locked = await lockActorAndTarget(tx, actor, level, targetId, clock);
    // A target deleted meanwhile: 404, never a foreign-key error.
    if (!locked.target) throw appError('ERR_USER_NOT_FOUND');
    assertReach(actor, locked.level, locked.target, chat);
    return locked.target;
  };
  /**
   * One platform punishment inside a transaction: the record of spec 2.6, the user's state (for
   * bans and timeouts: the one all their active records give, ModerationStore.platformState, so a
   * timeout never lowers a ban and a shorter punishment never shortens a longer one), the audit
   * entry and the automated notification, all under the target's and the caller's row locks (a
   * warning too, so a deletion racing it answers 404), decided there (lockParties). Publish `note`
   * after commit; an anonymous stranger gets none (null: it never reads notifications).
   */
  const punish = async (
    tx: Tx,
    p: {
      actor: Actor;
      level: ActorLevel;
      targetId: number;
      chat?: InChat;
      chatId: number | null;
      actionType: 'PLATFORM_BAN' | 'PLATFORM_TIMEOUT' | 'PLATFORM_WARNING';
      code: number;
      action: string;
      body: { duration?: number; reason?: string };
      notice: AutomatedKind;
      settlesState: boolean;
    },
  ) => {
    const now = clock.now();
    const expiresAt = until(now, p.body.duration);
    const target = await lockParties(tx, p.actor, p.level, p.targetId, p.chat);
    const record = await store.record(
      {
        userId: p.targetId,
        chatId: p.chatId,
        actionType: p.actionType,
        reason: p.body.reason ?? null,
        actorUserId: 'id' in p.actor ? p.actor.id : null,
        expiresAt,
        createdAt: now,
      },
      tx,
    );
    const settled = p.settlesState ? await store.settleState(p.targetId, now, tx) : null;
    await audit.record(
      {
        actor: p.actor,
        code: p.code,
        action: p.action,
        targetUserId: p.targetId,
        reason: p.body.reason,
        data: { duration: p.body.duration ?? null, chat_id: p.chatId },
      },
      tx,
    );
    const vars = {
      duration: humanDuration(appliesFor(p.actionType, now, p.body.duration, settled)),
      reason: p.body.reason ?? '',
    };
    const note = target.isStranger ? null : await notify(p.targetId, p.notice, vars, tx);
    return { record, note, stranger: target.isStranger };
  };

  return { assertReach, assertPlatformTarget, lockParties, punish };
}
