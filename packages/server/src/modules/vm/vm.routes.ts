import {
  ChatIdParams,
  EmptyBody,
  OkSchema,
  VmChatPayload,
  VmControlGrantPayload,
  VmFrameAckPayload,
  VmInputPayload,
  VmWatchPayload,
} from '@parlor/protocol';
import { type Guards, viewerOf } from '../../platform/auth.js';
import { type AppSocket, onEvent, type Realtime, rooms } from '../../platform/realtime.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import type { Caller, VmService } from './vm.service.js';

const tags = ['room vm'];
const base = '/v1/portal/chats';

export function registerVmRoutes(app: App, { vm, guards }: { vm: VmService; guards: Guards }) {
  app.post(`${base}/:chat_id/start`, {
    schema: {
      tags,
      security: security.session,
      description:
        'Starts the chat’s room VM (the chat owner or a platform Owner; either member of a direct chat). ' +
        'Already running: 200 at once. Members in the chat get room:started with their credentials. ' +
        '503 ERR_ROOM_START_FAILED: no capacity, no browser, or settings this node cannot serve.',
      params: ChatIdParams,
      body: EmptyBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => {
      await vm.start(viewerOf(req), req.params.chat_id);
      return { ok: true };
    },
  });

  app.post(`${base}/:chat_id/stop`, {
    schema: {
      tags,
      security: security.session,
      description:
        'Stops the chat’s room VM (the chat owner or Admin and above). Viewers get room:stopped. Stopped already: 200.',
      params: ChatIdParams,
      body: EmptyBody,
      response: { 200: OkSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => {
      await vm.stop(viewerOf(req), req.params.chat_id);
      return { ok: true };
    },
  });
}

const chatIdOf = (room: string): number | null => {
  const id = /^chat:(\d+)$/.exec(room)?.[1];
  return id ? Number(id) : null;
};

/**
 * Socket side of the room VM: the client events of DESIGN.md 6 (plus vm:credentials and
 * vm:unwatch), and the chat-room membership of sockets, watched on this node's adapter: entering a
 * chat's room while its VM runs pushes room:started; leaving it (leave, kick, ban, disconnect)
 * ends the stream at once and drops control.
 */
export function registerVmSockets(realtime: Realtime, vm: VmService) {
  const nsp = realtime.io.of('/');
  nsp.adapter.on('join-room', (room: string, socketId: string) => {
    const chatId = chatIdOf(room);
    const socket = chatId === null ? undefined : nsp.sockets.get(socketId);
    if (chatId !== null && socket) void vm.joinedChat(socketId, socket.data.userId, chatId).catch(() => {});
  });
  // The adapter of this node: it reports the sockets connected here (every node runs the same).
  nsp.adapter.on('leave-room', (room: string, socketId: string) => {
    const chatId = chatIdOf(room);
    const socket = chatId === null ? undefined : nsp.sockets.get(socketId);
    if (chatId === null || !socket) return;
    const userId = socket.data.userId;
    const others = nsp.adapter.rooms.get(room) ?? new Set<string>();
    const stillIn = [...others].some((id) => id !== socketId && nsp.sockets.get(id)?.data.userId === userId);
    vm.leftChat(socketId, userId, chatId, stillIn);
  });

  realtime.io.on('connection', (socket: AppSocket) => {
    const caller: Caller = {
      socketId: socket.id,
      userId: socket.data.userId,
      permissionLevel: socket.data.permissionLevel,
      username: socket.data.username,
      joined: (chatId) => socket.rooms.has(rooms.chat(chatId)),
    };
    type ChatOnly = { chat_id: number };

    onEvent(socket, 'vm:credentials', VmChatPayload, async (p: ChatOnly) => ({
      credentials: await vm.credentials(caller, p.chat_id),
    }));
    onEvent(socket, 'vm:watch', VmWatchPayload, (p: { chat_id: number; token: string }) =>
      vm.watch(caller, p.chat_id, p.token),
    );
    onEvent(socket, 'vm:unwatch', VmChatPayload, async (p: ChatOnly) => {
      vm.unwatch(caller, p.chat_id);
      return {};
    });
    onEvent(socket, 'vm:frame:ack', VmFrameAckPayload, async (p: { chat_id: number; seq: number }) => {
      await vm.ack(caller, p.chat_id, p.seq);
      return {};
    });
    onEvent(socket, 'vm:control:request', VmChatPayload, async (p: ChatOnly) => vm.requestControl(caller, p.chat_id));
    onEvent(socket, 'vm:control:grant', VmControlGrantPayload, async (p: { chat_id: number; user_id: number }) => {
      await vm.grant(caller, p.chat_id, p.user_id);
      return {};
    });
    onEvent(socket, 'vm:control:release', VmChatPayload, async (p: ChatOnly) => {
      await vm.release(caller, p.chat_id);
      return {};
    });
    onEvent(socket, 'vm:input', VmInputPayload, async (p: VmInputPayload) => {
      await vm.input(caller, p);
      return {};
    });
  });
}
