import type { VmCredentials } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { ChatsService } from '../chats/chats.service.js';
import type { Audiences } from './vm.audience.js';
import { decodeFrame } from './vm.cluster.js';
import type { RoomHost } from './vm.host.js';
import type { Caller } from './vm.service.js';
import type { ViewerTokens } from './vm.tokens.js';

/** What the viewing of rooms needs of the VM service: its stores and the helpers it shares. */
export interface ViewingDeps {
  chats: Pick<ChatsService, 'assertMember' | 'roomsStillAllowed'>;
  realtime: Pick<Realtime, 'emitTo'>;
  clock: Clock;
  tokens: ViewerTokens;
  audiences: Audiences;
  host: Pick<RoomHost, 'lastFrame'>;
  /** This node's id in the room map. */
  self: string;
  /** Where the chat's room runs; ERR_ROOM_NOT_RUNNING when nowhere, still starting, or stopping. */
  runningAt(chatId: number): Promise<string>;
  /** A request to the node that runs the chat's room. */
  onOwner(chatId: number, op: string, args: object): Promise<unknown>;
  credentialsFor(chatId: number, userId: number): VmCredentials;
  /** ERR_NOT_CHAT_MEMBER unless the caller's socket is in the chat's socket room. */
  mustBeIn(caller: Caller, chatId: number): void;
}

/**
 * Who watches a room VM from this node: viewer credentials, watching and acks, and the sockets
 * that enter or leave a chat's room while its VM runs. Part of the VM service (vm.service.ts).
 */
export function makeVmViewing(deps: ViewingDeps) {
  const { chats, realtime, clock, tokens, audiences, host, self, runningAt, onOwner, credentialsFor, mustBeIn } = deps;
  return {
    /** Fresh viewer credentials for a member while the VM runs (vm:credentials). */
    async credentials(caller: Caller, chatId: number): Promise<VmCredentials> {
      if (caller.stranger) {
        // A stranger is told the same for every chat outside its own direct chats, whether the id
        // names a chat or not (docs/api.md, Strangers): it learns no chat ids.
        if (!caller.joined(chatId)) throw appError('ERR_STRANGER_NOT_ALLOWED');
      }
      await chats.assertMember(caller.userId, chatId);
      await runningAt(chatId);
      return credentialsFor(chatId, caller.userId);
    },

    /**
     * A socket that entered a chat's socket room while its VM runs gets credentials at once; one
     * that enters while it starts gets them with everyone else's room:started.
     */
    async joinedChat(socketId: string, userId: number, chatId: number): Promise<void> {
      if (!(await runningAt(chatId).catch(() => null))) return;
      realtime.emitTo(socketId, 'room:started', { chat_id: chatId, credentials: credentialsFor(chatId, userId) });
    },

    /**
     * A recovered connection is back in these chats' rooms: Socket.IO put it back as it rebuilt
     * the socket, before its handshake, so no join of it was seen (vm.routes.ts). Each whose VM
     * runs pushes it room:started, as entering the room would. Its rooms are those the recovery
     * check kept (platform/recovery.ts); a kick, ban or leave that committed after that check had
     * no socket to take out yet (the chats module catches it once it is connected), so the rooms
     * of the running VMs are read again, and only those it may still be in, and is in, get it.
     */
    async rejoinedChats(caller: Pick<Caller, 'socketId' | 'userId' | 'joined'>, chatIds: number[]): Promise<void> {
      const running = await Promise.all(
        chatIds.map((id) =>
          runningAt(id).then(
            () => id,
            () => null,
          ),
        ),
      );
      const live = running.filter((id): id is number => id !== null).map(rooms.chat);
      if (live.length === 0) return;
      for (const room of await chats.roomsStillAllowed(caller.userId, live)) {
        const chatId = rooms.chatIdOf(room);
        if (chatId !== null && caller.joined(chatId))
          realtime.emitTo(caller.socketId, 'room:started', {
            chat_id: chatId,
            credentials: credentialsFor(chatId, caller.userId),
          });
      }
    },

    /** A socket left a chat's room (leave, kick, ban, disconnect): its stream ends at once. */
    leftChat(socketId: string, userId: number, chatId: number, userStillIn: boolean): void {
      const a = audiences.get(chatId);
      if (a?.viewers.remove(socketId)) audiences.reportQuietly(a);
      // The controller's last socket in the chat: the owner drops control unless they are in on another node.
      if (!userStillIn) onOwner(chatId, 'userLeft', { userId }).catch(() => {});
    },

    async watch(caller: Caller, chatId: number, token: string) {
      mustBeIn(caller, chatId);
      const claims = tokens.verify(token, clock.now());
      if (!claims || claims.chatId !== chatId || claims.userId !== caller.userId)
        throw appError('ERR_VM_TOKEN_INVALID');
      await chats.assertMember(caller.userId, chatId);
      const node = await runningAt(chatId);
      let a = await audiences.open(chatId, node);
      for (let attempt = 1; ; attempt++) {
        // The socket may have left the chat's room (disconnect, leave, kick) while the checks above
        // ran: its leave has been handled already (leftChat), so a viewer added now would never go.
        if (!caller.joined(chatId)) {
          if (a.viewers.size === 0 && audiences.get(chatId) === a) audiences.reportQuietly(a);
          throw appError('ERR_NOT_CHAT_MEMBER', 'Join this chat (room:join) first.');
        }
        // Nor would one added to an audience ended since it was opened (another watcher found it
        // empty): only the map's audience is reached by leaves, kicks, acks and the owner's count.
        if (audiences.get(chatId) === a) break;
        if (attempt === 3) throw appError('ERR_ROOM_NOT_RUNNING');
        a = await audiences.open(chatId, node);
      }
      a.viewers.add(caller.socketId, caller.userId);
      try {
        const answer = await audiences.report(a, { frame: true });
        const last = node === self ? host.lastFrame(chatId) : answer.last ? decodeFrame(answer.last) : null;
        if (last) a.viewers.offer(caller.socketId, last);
        return { width: answer.width, height: answer.height, controller_user_id: answer.controller_user_id };
      } catch (err) {
        if (a.viewers.remove(caller.socketId)) audiences.reportQuietly(a);
        throw err;
      }
    },

    unwatch(caller: Caller, chatId: number): void {
      const a = audiences.get(chatId);
      if (a?.viewers.remove(caller.socketId)) audiences.reportQuietly(a);
    },

    async ack(caller: Caller, chatId: number, seq: number): Promise<void> {
      if (audiences.get(chatId)?.viewers.ack(caller.socketId, seq)) return;
      // Not a viewer: a socket outside the chat learns nothing of it, neither whether its room
      // runs nor whether the id names a chat (docs/api.md, Strangers), as vm:watch answers it.
      mustBeIn(caller, chatId);
      await runningAt(chatId);
      throw appError('ERR_FORBIDDEN', 'Watch this room first (vm:watch).');
    },
  };
}
