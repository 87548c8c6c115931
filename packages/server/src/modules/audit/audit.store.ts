import { and, desc, eq, gte, lt, notExists, type SQL } from 'drizzle-orm';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { auditLog, users } from '../../platform/db/schema.js';
import type { Tx } from '../users/users.store.js';

/** Who did it: a signed-in user, the operator (CLI), the system (sweeps) or a bot. */
export type Actor =
  | { kind: 'user'; id: number }
  | { kind: 'operator' }
  | { kind: 'system' }
  | { kind: 'bot'; id: number };

export interface AuditEntry {
  actor: Actor;
  code: number;
  action: string;
  targetUserId?: number | null;
  targetBotId?: number | null;
  reason?: string | null;
  data?: Record<string, unknown>;
}

/** Every admin and operator action is written here, in the same transaction as the action. */
export function makeAuditStore(db: Db, clock: Clock) {
  return {
    async record(e: AuditEntry, tx: Tx = db): Promise<void> {
      await tx.insert(auditLog).values({
        actorKind: e.actor.kind,
        actorId: 'id' in e.actor ? e.actor.id : null,
        targetUserId: e.targetUserId ?? null,
        targetBotId: e.targetBotId ?? null,
        code: e.code,
        action: e.action,
        reason: e.reason ?? null,
        data: e.data ?? {},
        createdAt: clock.now(),
      });
    },
    async recent(limit: number) {
      return db.select().from(auditLog).orderBy(desc(auditLog.id)).limit(limit);
    },
    /** A page of the log, newest first, narrowed by the filter. */
    async page(filter: AuditFilter, limit: number): Promise<AuditRow[]> {
      const where: SQL[] = [];
      if (filter.before !== undefined) where.push(lt(auditLog.id, filter.before));
      if (filter.code !== undefined) where.push(eq(auditLog.code, filter.code));
      if (filter.targetUserId !== undefined) where.push(eq(auditLog.targetUserId, filter.targetUserId));
      // Left out in the query itself, so a page is `limit` entries the caller may read whenever
      // more remain, and the cursor after it skips none.
      if (filter.targetsBelow !== undefined)
        where.push(
          notExists(
            db
              .select({ id: users.id })
              .from(users)
              .where(and(eq(users.id, auditLog.targetUserId), gte(users.permissionLevel, filter.targetsBelow))),
          ),
        );
      return db
        .select()
        .from(auditLog)
        .where(and(...where))
        .orderBy(desc(auditLog.id))
        .limit(limit);
    },
  };
}

export type AuditStore = ReturnType<typeof makeAuditStore>;
export type AuditRow = typeof auditLog.$inferSelect;

export interface AuditFilter {
  /** Only entries with a smaller id (the page cursor). */
  before?: number;
  code?: number;
  targetUserId?: number;
  /**
   * Leaves out the entries about a user who exists with this permission level or above, as read
   * now (an Admin's view); entries about deleted users and those with no target user stay.
   */
  targetsBelow?: number;
}
