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
import { type AppSocket, type Realtime, rooms } from '../../platform/realtime.js';
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
        'Already running: 200 at once, nothing else happens. Members in the chat get room:started with their credentials. ' +
        '403 ERR_CHAT_READ_ONLY: an archived direct chat. ' +
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

  /** The caller of an event, as the VM service sees it (made per event: nothing is kept per socket). */
  const callerOf = (socket: AppSocket): Caller => ({
    socketId: socket.id,
    userId: socket.data.userId,
    permissionLevel: socket.data.permissionLevel,
    username: socket.data.username,
    stranger: socket.data.stranger,
    joined: (chatId) => socket.rooms.has(rooms.chat(chatId)),
  });
  type ChatOnly = { chat_id: number };

  // A recovered connection is put back into its chat rooms as Socket.IO rebuilds the socket,
  // before its handshake middlewares run and before it is one of the namespace's sockets, so the
  // join-room above skips those rooms. Once it is connected, with its handshake's data (a socket
  // of another session has left them by then, platform/realtime.ts), its chat rooms are those the
  // recovery check kept (platform/recovery.ts): the VMs that run there push it room:started.
  realtime.io.on('connection', (socket: AppSocket) => {
    if (!socket.recovered) return;
    const chatIds = [...socket.rooms].map(chatIdOf).filter((id): id is number => id !== null);
    if (chatIds.length > 0) void vm.rejoinedChats(callerOf(socket), chatIds).catch(() => {});
  });

  realtime.on('vm:credentials', VmChatPayload, async (socket, p: ChatOnly) => ({
    credentials: await vm.credentials(callerOf(socket), p.chat_id),
  }));
  realtime.on('vm:watch', VmWatchPayload, (socket, p: { chat_id: number; token: string }) =>
    vm.watch(callerOf(socket), p.chat_id, p.token),
  );
  realtime.on('vm:unwatch', VmChatPayload, async (socket, p: ChatOnly) => {
    vm.unwatch(callerOf(socket), p.chat_id);
    return {};
  });
  realtime.on('vm:frame:ack', VmFrameAckPayload, async (socket, p: { chat_id: number; seq: number }) => {
    await vm.ack(callerOf(socket), p.chat_id, p.seq);
    return {};
  });
  realtime.on('vm:control:request', VmChatPayload, async (socket, p: ChatOnly) =>
    vm.requestControl(callerOf(socket), p.chat_id),
  );
  realtime.on('vm:control:grant', VmControlGrantPayload, async (socket, p: { chat_id: number; user_id: number }) => {
    await vm.grant(callerOf(socket), p.chat_id, p.user_id);
    return {};
  });
  realtime.on('vm:control:release', VmChatPayload, async (socket, p: ChatOnly) => {
    await vm.release(callerOf(socket), p.chat_id);
    return {};
  });
  realtime.on('vm:input', VmInputPayload, async (socket, p: VmInputPayload) => {
    await vm.input(callerOf(socket), p);
    return {};
  });
}
