import type { AuditEntry } from '@parlor/protocol';
import type { AuditRow } from './audit.store.js';

/** One audit log row as GET /v1/admin/audit shows it. */
export function toAuditEntry(r: AuditRow): AuditEntry {
  return {
    id: r.id,
    actor_kind: r.actorKind as AuditEntry['actor_kind'],
    actor_id: r.actorId,
    target_user_id: r.targetUserId,
    target_bot_id: r.targetBotId,
    code: r.code,
    action: r.action,
    reason: r.reason,
    data: (r.data ?? {}) as Record<string, unknown>,
    created_at: r.createdAt.toISOString(),
  };
}
