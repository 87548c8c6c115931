import {
  ActivitySchema,
  ChatConfigBody,
  ChatEnvelope,
  ChatIdParams,
  ChatListResponse,
  CreateChatBody,
  CreateInviteBody,
  EmptyBody,
  InviteParams,
  InviteSchema,
  OkSchema,
  PageQuery,
  RoomJoinPayload,
  RoomLeavePayload,
} from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { type Guards, viewerOf } from '../../platform/auth.js';
import { type AppSocket, emitSnapshot, type Realtime, rooms } from '../../platform/realtime.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import type { ChatsService } from './chats.service.js';

const tags = ['chats'];
const base = '/v1/portal/chats';

/**
 * The onRequest hook of a `:chat_id` route a stranger may use, after `guards.anySession`: a
 * stranger naming a chat outside its reach (docs/api.md, Strangers) is told 401 here, whether the
 * chat exists or not, before the body is read or validated and before the write limit's
 * preHandler or a send's own limits spend anything (chats.service `assertStrangerReach`). A
 * registered caller passes at once, without a promise: the message send is a hot path.
 */
export function strangerReachHook(chats: Pick<ChatsService, 'assertStrangerReach'>) {
  return (req: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void => {
    const viewer = viewerOf(req);
    if (!viewer.stranger) {
      done();
      return;
    }
    chats.assertStrangerReach(viewer, (req.params as { chat_id?: unknown }).chat_id).then(() => done(), done);
  };
}

export function registerChatsRoutes(app: App, { chats, guards }: { chats: ChatsService; guards: Guards }) {
  const auth = { security: security.session };
  const strangerReach = strangerReachHook(chats);

  app.post(`${base}/create`, {
    schema: { tags, ...auth, body: CreateChatBody, response: { 200: ChatEnvelope, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => ({ chat: await chats.create(viewerOf(req), req.body) }),
  });

  app.get(base, {
    schema: {
      tags,
      ...auth,
      description: 'Chats you are a member of, archived direct chats included.',
      response: { 200: ChatListResponse, ...errorResponses },
    },
    onRequest: guards.anySession,
    handler: async (req) => ({ chats: await chats.list(viewerOf(req).userId) }),
  });

  app.get(`${base}/:chat_id`, {
    schema: { tags, ...auth, params: ChatIdParams, response: { 200: ChatEnvelope, ...errorResponses } },
    onRequest: [guards.anySession, strangerReach],
    handler: async (req) => ({ chat: await chats.get(viewerOf(req), req.params.chat_id) }),
  });

  app.post(`${base}/:chat_id/config/update`, {
    schema: {
      tags,
      ...auth,
      params: ChatIdParams,
      body: ChatConfigBody,
      response: { 200: ChatEnvelope, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => ({ chat: await chats.updateConfig(viewerOf(req), req.params.chat_id, req.body) }),
  });

  app.post(`${base}/:chat_id/delete`, {
    schema: { tags, ...auth, params: ChatIdParams, body: EmptyBody, response: { 200: OkSchema, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => {
      await chats.remove(viewerOf(req), req.params.chat_id);
      return { ok: true };
    },
  });

  app.post(`${base}/:chat_id/invites/create`, {
    schema: {
      tags,
      ...auth,
      description: 'At most 1,000 live invites per chat: past it, 409 ERR_INVITE_LIMIT.',
      params: ChatIdParams,
      body: CreateInviteBody,
      response: { 200: Type.Object({ invite: InviteSchema }), ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => ({ invite: await chats.createInvite(viewerOf(req), req.params.chat_id, req.body ?? {}) }),
  });

  app.get(`${base}/:chat_id/invites`, {
    schema: {
      tags,
      ...auth,
      params: ChatIdParams,
      response: { 200: Type.Object({ invites: Type.Array(InviteSchema) }), ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => ({ invites: await chats.invites(viewerOf(req), req.params.chat_id) }),
  });

  app.post(`${base}/:chat_id/invites/:code/delete`, {
    schema: { tags, ...auth, params: InviteParams, body: EmptyBody, response: { 200: OkSchema, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => {
      await chats.deleteInvite(viewerOf(req), req.params.chat_id, req.params.code);
      return { ok: true };
    },
  });

  app.get(`${base}/:chat_id/activity`, {
    schema: {
      tags,
      ...auth,
      description:
        'Membership history: join (with method and invite code), leave, kick, ban. The chat owner; Moderators and above for public and official chats, Admins and above for private and direct ones.',
      params: ChatIdParams,
      querystring: PageQuery,
      response: { 200: Type.Object({ activity: Type.Array(ActivitySchema) }), ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => ({
      activity: await chats.activity(viewerOf(req), req.params.chat_id, req.query.offset, req.query.limit),
    }),
  });
}

/**
 * Takes a socket out of the room its failed join entered and said it online in: the session goes
 * offline there unless another of its sockets is still in the room (as on a disconnect). A socket
 * that disconnected meanwhile was said offline as it went.
 */
async function leaveFailedJoin(
  chats: Pick<ChatsService, 'sessionStillIn' | 'announcePresence'>,
  socket: AppSocket,
  room: string,
): Promise<void> {
  const chatId = rooms.chatIdOf(room);
  if (!socket.connected || chatId === null) return;
  await socket.leave(room);
  const still = await chats.sessionStillIn(socket.data.sessionId, [chatId]).catch(() => new Set<number>());
  if (!still.has(chatId)) chats.announcePresence(chatId, socket.data, false);
}

/** Socket handlers: room:join, room:leave, the chat list on (re)connect, presence on disconnect. */
export function registerChatSockets(realtime: Realtime, chats: ChatsService, log: App['log']) {
  realtime.on('room:join', RoomJoinPayload, async (socket, payload: Parameters<ChatsService['join']>[1]) => {
    // The join puts the socket into the chat's room while it holds the membership (see join), and
    // says the session online there before that hold ends: a kick, ban, leave or deletion commits
    // after it and sends its offline later, on any node, however late this node's stream reader is
    // (the delta's XADD is on this node's Redis connection before the commit is sent). Entering a
    // room this socket is already in changes nobody's presence: no delta.
    const entered: { room: string | null } = { room: null };
    const enter = async (chatId: number, fresh: boolean) => {
      const room = rooms.chat(chatId);
      // A socket that disconnected while its join ran enters nothing (a closed socket's join is a
      // no-op): it is in no room to be announced in, nor taken out of later.
      if (!socket.connected || (socket.rooms.has(room) && !fresh)) return;
      if (fresh) {
        // A new membership enters once this node has applied the room changes sent before it (a
        // kick's leave of `user:<id>` sent by another node, which this node's stream reader may
        // not have read yet: applied after the entry, it would take the new member's socket out).
        // At once when the reader is not behind, and in embedded mode (Realtime.catchUpRooms).
        await realtime.catchUpRooms();
        if (!socket.connected) return;
        // Through the adapter, as a leave takes sockets out (`leaveChat`): in the cluster both go
        // through this node's Redis connection in order, so a leave of the ended membership sent
        // from here before is applied first and cannot evict this one.
        await socket.nsp.adapter.addSockets({ rooms: new Set([socket.id]), except: new Set(), flags: {} }, [room]);
        // Gone meanwhile: its disconnect found it in no room, and said nothing to follow an online.
        if (!socket.connected) return;
      } else await socket.join(room);
      entered.room = room;
      chats.announcePresence(chatId, socket.data, true);
    };
    let joined: Awaited<ReturnType<ChatsService['join']>>;
    let ended: Error | null;
    try {
      joined = await chats.join(socket.data, payload, enter);
      // A leave, kick, ban or deletion that committed after the join's hold ended (and said the
      // session offline, after its online) fails the join. Read from the database, not from the
      // socket's rooms, which a node reading the stream late has not updated yet. A socket that
      // disconnected meanwhile was said offline as it went; its ack reaches nobody.
      ended = socket.connected ? await chats.membershipEnded(joined.chat.id, socket.data.userId) : null;
    } catch (err) {
      // A join that fails after entering (its commit, a read after it) leaves the room it entered.
      if (entered.room) await leaveFailedJoin(chats, socket, entered.room);
      throw err;
    }
    if (ended) {
      // Out of the room now (the removal's sockets-leave may not have reached this node); the
      // removal said the session offline.
      await socket.leave(rooms.chat(joined.chat.id));
      throw ended;
    }
    // The whole list goes to the joiner only; the others had the delta. The join has committed: a
    // node that does not answer gives this node's sessions, never a failed ack.
    const members = await chats.presence(joined.chat.id);
    emitSnapshot(socket, 'room:members', { chat_id: joined.chat.id, members });
    return { ...joined, members };
  });

  realtime.on('room:leave', RoomLeavePayload, async (socket, payload: { chat_id: number }) => {
    await chats.leave(socket.data.userId, payload.chat_id, socket.data.stranger);
    return {};
  });

  realtime.io.on('connection', (socket: AppSocket) => {
    // Every (re)connection gets its chat:list. One whose list cannot be read is closed, as a
    // transport that dropped (recoverable): the client comes back, and the list is read again.
    chats
      .list(socket.data.userId)
      .then((list) => emitSnapshot(socket, 'chat:list', { chats: list, session_id: socket.data.sessionId }))
      .catch((err: unknown) => {
        log.warn({ err, session_id: socket.data.sessionId }, 'chat list on connect failed');
        socket.conn.close();
      });
    // A recovered connection is back in the chat rooms it may still be in (the others were taken
    // from it before it was restored, platform/recovery.ts). A kick, ban or leave that committed
    // after that check's read did not reach it (it was no socket of the namespace yet): now that it
    // is one, its memberships are read again and held (FOR SHARE) while it leaves the rooms it may
    // no longer be in (`room:left`, reason `removed`) and the chats of the others hear it is
    // present again, so a removal committing meanwhile says it offline after that, however late
    // this node reads the stream. A failed read closes its connection: the client comes back
    // through the recovery check, or afresh.
    const restored = [...socket.rooms].map(rooms.chatIdOf).filter((id): id is number => id !== null);
    if (socket.recovered && restored.length > 0) {
      const { userId } = socket.data;
      chats
        .underMemberships(restored, [userId], (held) => {
          if (socket.disconnected) return;
          for (const chatId of restored) {
            const room = rooms.chat(chatId);
            if (!socket.rooms.has(room)) continue;
            if (held(chatId, userId)) {
              chats.announcePresence(chatId, socket.data, true);
              continue;
            }
            void socket.leave(room);
            socket.emit('room:left', { chat_id: chatId, reason: 'removed' });
          }
        })
        .catch((err: unknown) => {
          log.warn({ err, session_id: socket.data.sessionId }, 'recovered socket room check failed');
          socket.conn.close();
        });
    }

    // A session is present in a chat while any of its sockets is in the room, on any node (one
    // entry per session, as `room:members` counts): it goes offline there only with its last one.
    // Checked once this socket has left its rooms (afterDisconnect; a node shutting down waits for
    // it, so the chats hear of the sockets it drops).
    socket.on('disconnecting', () => {
      const chatIds = [...socket.rooms].map(rooms.chatIdOf).filter((x): x is number => x !== null);
      if (chatIds.length === 0) return;
      realtime.afterDisconnect(async () => {
        const still = await chats
          .sessionStillIn(socket.data.sessionId, chatIds)
          // The other sockets cannot be read at all: say offline, as a session announced online
          // whose last socket went must not stay online in the others' lists.
          .catch(() => new Set<number>());
        for (const id of chatIds) if (!still.has(id)) chats.announcePresence(id, socket.data, false);
      });
    });
  });
}
