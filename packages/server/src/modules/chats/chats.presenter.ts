import type { Activity, Chat, Invite } from '@parlor/protocol';
import type { ActivityRow, ChatWithCount, InviteRow } from './chats.store.js';

const iso = (d: Date | null) => (d ? d.toISOString() : null);

export function toChat(c: ChatWithCount): Chat {
  return {
    id: c.id,
    type: c.type as Chat['type'],
    name: c.name,
    owner_id: c.ownerUserId,
    epoch: c.epoch,
    member_count: c.memberCount,
    archived: c.archivedAt !== null,
    expires_at: iso(c.expiresAt),
    created_at: c.createdAt.toISOString(),
    updated_at: c.updatedAt.toISOString(),
  };
}

export function toInvite(i: InviteRow): Invite {
  return {
    code: i.code,
    chat_id: i.chatId,
    created_by: i.createdBy,
    max_uses: i.maxUses,
    uses: i.uses,
    expires_at: iso(i.expiresAt),
    created_at: i.createdAt.toISOString(),
  };
}

export function toActivity(a: ActivityRow): Activity {
  return {
    id: a.id,
    user_id: a.userId,
    action: a.action,
    method: a.method,
    invite_code: a.inviteCode,
    actor_user_id: a.actorUserId,
    created_at: a.createdAt.toISOString(),
  };
}
