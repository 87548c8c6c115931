import { type AdminChatCreateBody, AuditCodes, type Chat } from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import type { Actor } from '../audit/audit.store.js';
import type { Tx } from '../users/users.store.js';
import { type ActorLevel, canManageOfficial } from './admin.rules.js';
import type { AdminDeps } from './admin.service.js';

/**
 * How the chat rules see an admin caller. The operator stands above every level, so for them it
 * is an Owner; id 0 is no user's (ids start at 1), so the operator never counts as a chat's owner.
 */
const chatViewer = (actor: Actor, level: ActorLevel) => ({
  userId: actor.kind === 'user' ? actor.id : 0,
  permissionLevel: level === 'operator' ? 3 : level,
  operator: actor.kind !== 'user',
});

/** The admin chat routes: official chats created, chats updated and deleted, each audited in the change's transaction. */
export function makeAdminChats(deps: Pick<AdminDeps, 'audit' | 'chats'>) {
  const { audit } = deps;

  /** Audits a chat action of the admin routes inside the chat change's own transaction. */
  const chatAudit =
    (actor: Actor, code: number, action: string, data: Record<string, unknown> = {}) =>
    (tx: Tx, chat: { id: number; name: string; type: string; ownerUserId: number | null }) =>
      audit.record(
        {
          actor,
          code,
          action,
          targetUserId: chat.ownerUserId,
          data: { chat_id: chat.id, name: chat.name, type: chat.type, ...data },
        },
        tx,
      );

  return {
    /** POST /v1/admin/chats/create and `parlor chats create-official`: Owners and the operator. */
    async createOfficialChat(actor: Actor, level: ActorLevel, body: AdminChatCreateBody): Promise<Chat> {
      if (!canManageOfficial(level))
        throw appError('ERR_FORBIDDEN', 'Only Owners and the operator create official chats.');
      return deps.chats.createOfficial(chatViewer(actor, level), body.name, (tx, chatId) =>
        chatAudit(
          actor,
          AuditCodes.CHAT_CREATE_OFFICIAL,
          'create-official',
        )(tx, {
          id: chatId,
          name: body.name.trim(),
          type: 'official',
          ownerUserId: null,
        }),
      );
    },

    /** POST /v1/admin/chats/{id}/update: Admins and above, as the chat settings route; official chats: Owners. */
    async updateChat(
      actor: Actor,
      level: ActorLevel,
      chatId: number,
      body: { name?: string; type?: 'public' | 'private' },
    ) {
      return deps.chats.updateConfig(chatViewer(actor, level), chatId, body, (tx, before) =>
        chatAudit(actor, AuditCodes.CHAT_ADMIN_UPDATE, 'update', { changes: body })(tx, before),
      );
    },

    /** POST /v1/admin/chats/{id}/delete: Admins and above; official chats: Owners and the operator. */
    async deleteChat(actor: Actor, level: ActorLevel, chatId: number): Promise<void> {
      await deps.chats.remove(
        chatViewer(actor, level),
        chatId,
        chatAudit(actor, AuditCodes.CHAT_ADMIN_DELETE, 'delete'),
      );
    },
  };
}
