import {
  ChatIdParams,
  DeletedResponse,
  DeleteLastBody,
  DeleteMessagesBody,
  EmptyBody,
  MessageSchema,
  MessagesQuery,
  SendMessageBody,
} from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import { type Guards, viewerOf } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import { strangerReachHook } from '../chats/chats.routes.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { DeletionChat, MessagesService } from './messages.service.js';

const tags = ['messages'];
const base = '/v1/portal/chats/:chat_id/messages';

/** What a deletion needs of the chat the route read. */
const deletionChat = (chat: Awaited<ReturnType<ChatsService['find']>>): DeletionChat => ({
  id: chat.id,
  type: chat.type,
  ownerId: chat.ownerUserId,
  archived: chat.archivedAt !== null,
});

export function registerMessagesRoutes(
  app: App,
  deps: { messages: MessagesService; chats: ChatsService; guards: Guards },
) {
  const { messages, chats, guards } = deps;
  const auth = { security: security.session };
  /**
   * The reader check of a delete by id or delete-last. It runs only for who may not moderate the
   * chat: a moderator need not read it (messages.deletion `moderates`), so those routes find the
   * chat without it.
   */
  const readerCheck = (v: ReturnType<typeof viewerOf>, chatId: number) => () => chats.assertReader(v, chatId);
  const strangerReach = strangerReachHook(chats);

  app.post(base, {
    schema: {
      tags,
      ...auth,
      description: 'Sends a ciphertext bundle `{"v":2,"epoch":E,"ct":"…"}`; message:new carries the same id.',
      params: ChatIdParams,
      body: SendMessageBody,
      response: { 200: Type.Object({ id: Type.String() }), ...errorResponses },
    },
    onRequest: [guards.anySession, strangerReach],
    config: { ownWriteLimit: true },
    handler: async (req) => messages.send(viewerOf(req), req.params.chat_id, req.body.content),
  });

  app.get(base, {
    schema: {
      tags,
      ...auth,
      description: 'Newest first; `before` is a message id (cursor).',
      params: ChatIdParams,
      querystring: MessagesQuery,
      response: { 200: Type.Object({ messages: Type.Array(MessageSchema) }), ...errorResponses },
    },
    onRequest: [guards.anySession, strangerReach],
    handler: async (req, reply) => {
      const v = viewerOf(req);
      const page = await messages.history(v, req.params.chat_id, req.query.before, req.query.limit);
      // One query reads the page and checks the right to; an empty page may be a refusal: say which.
      if (page.length === 0) await chats.assertReader(v, req.params.chat_id);
      // The rows are already the wire shape (a fixed column list), so the schema's serializer would
      // only re-check them; on ciphertext bundles (JSON inside strings) its escaping costs about
      // 3.5 times JSON.stringify. The schema still documents the response.
      reply.type('application/json; charset=utf-8').serializer(JSON.stringify);
      return { messages: page };
    },
  });

  app.post(`${base}/delete`, {
    schema: {
      tags,
      ...auth,
      params: ChatIdParams,
      body: DeleteMessagesBody,
      response: { 200: DeletedResponse, ...errorResponses },
    },
    onRequest: [guards.anySession, strangerReach],
    handler: async (req) => {
      const v = viewerOf(req);
      const chat = await chats.find(req.params.chat_id);
      return messages.remove(v, deletionChat(chat), req.body.ids, readerCheck(v, chat.id));
    },
  });

  app.post(`${base}/delete-mine`, {
    schema: {
      tags,
      ...auth,
      params: ChatIdParams,
      body: EmptyBody,
      response: { 200: DeletedResponse, ...errorResponses },
    },
    onRequest: [guards.anySession, strangerReach],
    handler: async (req) => {
      const v = viewerOf(req);
      const chat = await chats.assertReader(v, req.params.chat_id);
      return messages.removeMine(v, deletionChat(chat));
    },
  });

  app.post(`${base}/delete-last`, {
    schema: {
      tags,
      ...auth,
      params: ChatIdParams,
      body: DeleteLastBody,
      response: { 200: DeletedResponse, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => {
      const v = viewerOf(req);
      const chat = await chats.find(req.params.chat_id);
      return messages.removeLast(v, deletionChat(chat), req.body.count, readerCheck(v, chat.id));
    },
  });
}
