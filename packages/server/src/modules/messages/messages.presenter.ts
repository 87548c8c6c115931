import type { Message } from '@parlor/protocol';
import type { MessageRow } from './messages.store.js';

export const messageId = (m: Pick<MessageRow, 'ms' | 'seq'>) => `${m.ms}-${m.seq}`;

export function toMessage(m: MessageRow): Message {
  return {
    id: messageId(m),
    chat_id: m.chatId,
    type: m.type as Message['type'],
    sender_id: m.senderId,
    content: m.content,
    system: (m.system as Record<string, unknown> | null) ?? null,
    created_at: m.createdAt.toISOString(),
  };
}
