import type { VmInputPayload } from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import { type Realtime, rooms } from '../../platform/realtime.js';
import type { VmProvider } from '../../platform/vm/provider.js';
import type { ChatsService } from '../chats/chats.service.js';
import { type Actor, canGrant, type RoomChat } from './vm.rules.js';
import type { RoomVmSettings } from './vm.settings.js';

/** Who acts on a room, as it travels to the node that runs it. */
export interface RemoteActor extends Actor {
  username: string;
}

/** What a control request answers: whether the caller got control, and who holds it. */
export interface ControlAnswer {
  granted: boolean;
  controller_user_id: number | null;
}

/** What control keeps of a room this node runs (part of vm.host.ts's hosted room). */
export interface ControlledRoom {
  chatId: number;
  settings: RoomVmSettings;
  controller: number | null;
  /** Input events sent to the browser and not yet answered (a flood is refused, not queued). */
  inputsInFlight: number;
  /**
   * The control requests announced to the chat (or being checked), by requester: when (announced:
   * when it went out), and the answer the requester got. Dropped when control changes hands (the
   * request was answered, or is asked anew of the new controller) and once
   * CONTROL_REQUEST_REPEAT_MS have passed.
   */
  requests: Map<number, { at: number; answer: Promise<ControlAnswer> }>;
}

export interface ControlDeps {
  provider: Pick<VmProvider, 'navigate' | 'input' | 'releaseInput'>;
  chats: Pick<ChatsService, 'assertMember'>;
  realtime: Pick<Realtime, 'socketsIn' | 'emitTo'>;
  roomChat: (actor: Actor, chatId: number) => Promise<RoomChat>;
  /** Whether `rule` lets the actor act on its level as stored (vm.service.ts `allowedAsStored`). */
  allowedAsStored: (actor: Actor, rule: (a: Actor) => boolean) => Promise<boolean>;
  /** The rooms running on this node (the host's map: read, never written here). */
  hosted: ReadonlyMap<number, ControlledRoom>;
  now: () => number;
}

/** A controller may have this many input events waiting for the browser; more are refused. */
const MAX_INPUTS_IN_FLIGHT = 64;

/**
 * A member's control request reaches the chat once per this long, as a raised hand does: repeats
 * (any socket of theirs, on any node: the room's node decides) answer as the first did and reach
 * nobody, so one member cannot make every socket of the chat receive a flood of requests.
 */
export const CONTROL_REQUEST_REPEAT_MS = 10_000;

/** The room this node runs for the chat, of `hosted`; 409 ERR_ROOM_NOT_RUNNING when none. */
export function runningRoom<R>(hosted: ReadonlyMap<number, R>, chatId: number): R {
  const room = hosted.get(chatId);
  if (!room) throw appError('ERR_ROOM_NOT_RUNNING');
  return room;
}

/**
 * Control of the rooms this node runs (vm.host.ts composes it): who holds it, the requests
 * announced to the chat, grants and releases, and the controller's input to the browser.
 */
/** Anonymous strangers watch a room; they neither take, get nor use its control (docs/api.md, Strangers). */
export const strangerRefused = () =>
  appError('ERR_STRANGER_NOT_ALLOWED', 'Anonymous sessions watch the room; they do not control it.');

export function makeRoomControl(deps: ControlDeps) {
  const { provider, realtime, hosted, now } = deps;

  const mustHost = (chatId: number): ControlledRoom => runningRoom(hosted, chatId);

  /**
   * Control requests being checked (the membership, the requester's sockets): a leave of the
   * requester reported meanwhile marks them, so the request looks again before it grants.
   */
  const asking = new Set<{ chatId: number; userId: number; left: boolean }>();

  /**
   * The user's sockets in the chat's socket room, on any node; without those of a node that does
   * not answer in time (`Realtime.socketsIn`): control is still decided, not failed.
   */
  const socketsInChat = async (chatId: number, userId: number) => {
    const { sockets } = await realtime.socketsIn(rooms.chat(chatId));
    return sockets.filter((s) => s.data.userId === userId);
  };

  /**
   * Runs `act` (control handed to `userId`) only if the user is a member with a socket in the
   * chat's room now; ERR_NOT_CHAT_MEMBER (`why`) otherwise. A kick or ban committed since the
   * caller's socket was checked must not hand them control; nor may a disconnect: their leave has
   * been handled already (userLeft), so control granted now would stay with nobody there. A leave
   * reported while the sockets were looked up may postdate the answer: look again. An anonymous
   * stranger (its sockets say so) is never handed control: it watches (docs/api.md, Strangers).
   */
  const whileInChat = async <T>(chatId: number, userId: number, why: string, act: () => T): Promise<T> => {
    const ask = { chatId, userId, left: false };
    asking.add(ask);
    try {
      await deps.chats.assertMember(userId, chatId);
      let present = await socketsInChat(chatId, userId);
      while (present.length > 0 && ask.left) {
        ask.left = false;
        present = await socketsInChat(chatId, userId);
      }
      if (present.length === 0) throw appError('ERR_NOT_CHAT_MEMBER', why);
      if (present.some((s) => s.data.stranger)) throw strangerRefused();
      return act();
    } finally {
      asking.delete(ask);
    }
  };

  /** How many times each room's control changed hands: a read that awaited sees whether it did meanwhile. */
  const handovers = new WeakMap<ControlledRoom, number>();
  const setController = (room: ControlledRoom, userId: number | null) => {
    handovers.set(room, (handovers.get(room) ?? 0) + 1);
    const previous = room.controller;
    room.controller = userId;
    room.requests.clear();
    // The keys and buttons the previous controller held are let go before any input of the next
    // one (the provider sends the releases ahead of later input): the browser would otherwise
    // apply them to the next one's (a plain `w` read as Ctrl+W). A browser that does not take
    // them (restarting) starts again with nothing held. With nobody in control nothing was held.
    if (previous !== null && previous !== userId) provider.releaseInput(String(room.chatId)).catch(() => {});
    realtime.emitTo(rooms.chat(room.chatId), 'vm:control', { chat_id: room.chatId, controller_user_id: userId });
  };

  return {
    /**
     * Takes control when nobody holds it, or announces the request to the chat. A repeat while the
     * user's request is pending (CONTROL_REQUEST_REPEAT_MS, control unchanged) gets the first
     * one's answer, even while that one is still being checked: no second announcement, and no
     * second read of the chat's sockets on every node.
     */
    async requestControl(chatId: number, who: RemoteActor): Promise<ControlAnswer> {
      const room = mustHost(chatId);
      if (!room.settings.allow_control_requests)
        throw appError(
          'ERR_FORBIDDEN',
          'Control requests are off in this room; the chat owner or a moderator grants control.',
        );
      const pending = room.requests.get(who.userId);
      if (pending && now() - pending.at < CONTROL_REQUEST_REPEAT_MS) return pending.answer;
      // The sender's socket was in the chat's room on its node; a kick, ban or disconnect since
      // then neither hands it control nor reaches the chat with its request.
      const answer = whileInChat(chatId, who.userId, 'Join this chat (room:join) first.', (): ControlAnswer => {
        const current = mustHost(chatId);
        if (current.controller === null) setController(current, who.userId);
        if (current.controller === who.userId) return { granted: true, controller_user_id: who.userId };
        // Pending from its announcement: control may have changed hands while it was checked (another
        // member's request took the free room), which dropped it; a repeat must not announce it again.
        current.requests.set(who.userId, { at: now(), answer });
        realtime.emitTo(rooms.chat(chatId), 'vm:control:request', {
          chat_id: chatId,
          user_id: who.userId,
          username: who.username,
        });
        return { granted: false, controller_user_id: current.controller };
      });
      const asked = { at: now(), answer };
      room.requests.set(who.userId, asked);
      // A refused request announced nothing: the next one is checked afresh.
      answer.catch(() => {
        if (room.requests.get(who.userId) === asked) room.requests.delete(who.userId);
      });
      return answer;
    },

    /** Control goes to a member in the chat's room only: one with no socket there could not use it, nor lose it by leaving. */
    async grant(chatId: number, actor: RemoteActor, userId: number): Promise<void> {
      mustHost(chatId);
      const chat = await deps.roomChat(actor, chatId);
      if (!(await deps.allowedAsStored(actor, (a) => canGrant(a, chat))))
        throw appError('ERR_FORBIDDEN', 'Only the chat owner or a moderator hands control over.');
      await whileInChat(
        chatId,
        userId,
        'This member is not in the chat (room:join): control goes to members who are.',
        () => setController(mustHost(chatId), userId),
      );
    },

    /** The controller gives control back; the chat owner or a moderator takes it from anyone. */
    async release(chatId: number, actor: RemoteActor): Promise<void> {
      const room = mustHost(chatId);
      if (room.controller === null) return;
      if (room.controller !== actor.userId) {
        const chat = await deps.roomChat(actor, chatId);
        if (!(await deps.allowedAsStored(actor, (a) => canGrant(a, chat))))
          throw appError(
            'ERR_FORBIDDEN',
            'Only the member in control, the chat owner or a moderator releases control.',
          );
      }
      setController(room, null);
    },

    async input(chatId: number, userId: number, payload: VmInputPayload): Promise<void> {
      const room = mustHost(chatId);
      if (room.controller !== userId)
        throw appError('ERR_FORBIDDEN', 'Only the member in control sends input (vm:control:request).');
      if (payload.kind === 'navigate' && room.settings.kiosk)
        throw appError('ERR_FORBIDDEN', 'This room is in kiosk mode: it does not navigate.');
      if (room.inputsInFlight >= MAX_INPUTS_IN_FLIGHT)
        throw appError('ERR_RATE_LIMITED', 'Too many input events at once; wait for their acks.', { retry_after: 1 });
      room.inputsInFlight += 1;
      try {
        if (payload.kind === 'navigate')
          await provider.navigate(String(chatId), 'url' in payload ? { url: payload.url } : { action: payload.action });
        else {
          const { chat_id: _, ...input } = payload;
          await provider.input(String(chatId), input);
        }
      } finally {
        room.inputsInFlight -= 1;
      }
    },

    /** A user's last socket left the chat somewhere: they lose control unless still in it on some node. */
    async userLeft(chatId: number, userId: number): Promise<void> {
      for (const ask of asking) if (ask.chatId === chatId && ask.userId === userId) ask.left = true;
      const room = hosted.get(chatId);
      if (room?.controller !== userId) return;
      const before = handovers.get(room);
      const present = (await socketsInChat(chatId, userId)).length > 0;
      // Control that changed hands during the read (the user, back in the chat from a socket the
      // read did not see, given it anew) postdates this leave: only the control they left with goes.
      if (handovers.get(room) === before && !present && hosted.get(chatId) === room) setController(room, null);
    },

    /**
     * The sweep's re-check of the room's controller: one with no socket in the chat on any node
     * (their node died, or the leave it sent was lost) loses control. Unlike a leave (userLeft),
     * nothing says the user went: only a read every node answered drops control, so a controller
     * on a node slow to answer keeps it.
     */
    async dropAbsentController(chatId: number): Promise<void> {
      const room = hosted.get(chatId);
      const userId = room?.controller ?? null;
      if (!room || userId === null) return;
      const before = handovers.get(room);
      const { sockets, complete } = await realtime.socketsIn(rooms.chat(chatId));
      if (!complete || sockets.some((s) => s.data.userId === userId)) return;
      // Judged again: the user may have lost control and been granted it anew during the read,
      // from a socket the read did not see; only control unchanged since the read began is dropped.
      if (handovers.get(room) === before && hosted.get(chatId) === room) setController(room, null);
    },

    /** Forgets the room's control requests announced CONTROL_REQUEST_REPEAT_MS or more before `at` (the sweep). */
    expireRequests(room: ControlledRoom, at: number): void {
      for (const [userId, r] of room.requests) if (at - r.at >= CONTROL_REQUEST_REPEAT_MS) room.requests.delete(userId);
    },
  };
}

export type RoomControl = ReturnType<typeof makeRoomControl>;
