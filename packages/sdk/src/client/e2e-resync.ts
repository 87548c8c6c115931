import type { ParlorClient } from './api.js';
import type { ChatKeying } from './e2e-keying.js';
import { type E2EChatSessionEvents, E2ESessionError } from './e2e-types.js';
import { isApiError } from './errors.js';
import { JoinAnswerSchema, shapeProblem } from './server-events.js';
import { joinRoom, type ParlorSocket, type RoomJoined } from './socket.js';

/** How long a resync waits for the server's `chat:list` before asking `GET /v1/portal/chats`. */
const CHAT_LIST_WAIT_MS = 5000;

/** `room:join` refusals that mean the user is no longer in the chat. */
const REMOVED_CODES = [
  'ERR_NOT_CHAT_MEMBER',
  'ERR_CANNOT_BROWSE_PRIVATE',
  'ERR_CHAT_BANNED',
  'ERR_CHAT_NOT_FOUND',
] as const;

export interface SessionResyncOptions {
  client: ParlorClient;
  socket: ParlorSocket;
  keying: ChatKeying;
  /** The session's joined chats (read, never changed here). */
  joined: ReadonlySet<number>;
  isClosed: () => boolean;
  /** Obtains the key after a resync's `room:join` and shares it (E2EChatSession's keyAndShare). */
  keyAndShare: (chatId: number, joined: RoomJoined) => Promise<void>;
  /** The user is no longer in a joined chat: forget it and report it as `left {reason: 'removed'}`. */
  removed: (chatId: number) => void;
  onReconnected: E2EChatSessionEvents['reconnected'];
  onError: (error: E2ESessionError) => void;
}

/**
 * What an E2EChatSession does on the reconnections of its socket: after one the server could not
 * recover, it enters again the chats the user is still a member of (`chat:list`), one resync at a
 * time, each stopping at its next step once its connection is gone.
 */
export class SessionResync {
  readonly #o: SessionResyncOptions;
  /** Bumped at every connect and disconnect: a resync of an older connection stops at its next step. */
  #connection = 0;
  /** Takes the next `chat:list` (set while a resync waits for it); null: it came unusable. */
  #chatList: ((chatIds: number[] | null) => void) | null = null;
  /** The resync after the last reconnection that was not recovered (they run one after another). */
  #resync: Promise<void> = Promise.resolve();
  /**
   * True from a reconnection that was not recovered until its resync has gone through every chat.
   * A drop can end a resync midway, and a recovered connection after it only gets back the rooms
   * the socket had: the resync then goes on for the chats it had not entered again.
   */
  #resyncOpen = false;
  /** Joined chats whose room the socket entered since the last reconnection that was not recovered. */
  readonly #entered = new Set<number>();
  readonly #wakers = new Set<() => void>();

  constructor(opts: SessionResyncOptions) {
    this.#o = opts;
  }

  /** The socket entered the chat's room (a join). */
  entered(chatId: number): void {
    this.#entered.add(chatId);
  }

  forget(chatId: number): void {
    this.#entered.delete(chatId);
  }

  /** The resync under way (resolved when none runs); it never rejects. */
  settled(): Promise<void> {
    return this.#resync;
  }

  /**
   * Hands over the `chat:list` of this connection to the resync waiting for it (`null`: it came
   * malformed, and cannot say which chats to enter again: the resync reads them from
   * `GET /v1/portal/chats` at once instead of waiting out CHAT_LIST_WAIT_MS).
   */
  chatList(chatIds: number[] | null): void {
    const waiting = this.#chatList;
    this.#chatList = null;
    waiting?.(chatIds);
  }

  /** The socket (re)connected. The socket is connected when the session starts, so this is a reconnection. */
  connected(): void {
    const connection = ++this.#connection;
    const recovered = this.#o.socket.recovered;
    if (recovered && !this.#resyncOpen) {
      this.#o.onReconnected({ recovered: true, chats: [...this.#o.joined] });
      return;
    }
    if (!recovered) {
      this.#resyncOpen = true;
      this.#entered.clear();
    }
    // Listen for this connection's chat:list at once; one resync runs at a time, and a newer
    // connection makes the older one stop at its next step.
    const members = this.#memberChats(connection);
    this.#resync = this.#resync
      .then(() => this.#rejoin(connection, members, recovered))
      .catch((error: unknown) => {
        if (!this.#o.isClosed()) {
          this.#o.onError(new E2ESessionError('BACKGROUND_FAILURE', 'The resync failed.', { cause: error }));
        }
      });
  }

  /** The socket disconnected: the resync of that connection stops. */
  disconnected(): void {
    this.#connection++;
    this.wake();
  }

  /** Ends the pauses of a resync (a disconnect or close makes it stop). */
  wake(): void {
    for (const wake of [...this.#wakers]) wake();
  }

  /** True once the connection a resync works for is gone (or the session closed). */
  #stale(connection: number): boolean {
    return this.#o.isClosed() || connection !== this.#connection || !this.#o.socket.connected;
  }

  /**
   * The chats this user is a member of now: the `chat:list` the server sends on every connection,
   * or `GET /v1/portal/chats` when none came in time. Null when the connection went away meanwhile.
   */
  async #memberChats(connection: number): Promise<Set<number> | null> {
    const pushed = await new Promise<number[] | null>((resolve) => {
      const done = (ids: number[] | null) => {
        clearTimeout(timer);
        this.#wakers.delete(wake);
        if (this.#chatList === done) this.#chatList = null;
        resolve(ids);
      };
      const wake = () => done(null);
      const timer = setTimeout(wake, CHAT_LIST_WAIT_MS);
      this.#chatList = done;
      this.#wakers.add(wake);
    });
    if (this.#stale(connection)) return null;
    return new Set(pushed ?? (await this.#o.client.listChats()).chats.map((chat) => chat.id));
  }

  /**
   * After a reconnection the server could not recover: enters again only the chats this user is
   * still a member of (a `room:join` would make it a member of a public chat it left elsewhere or
   * was kicked from), and reports the others as `left {reason: 'removed'}`. After a recovered one
   * that followed a resync cut short, it enters the chats that resync had not (`recovered`).
   */
  async #rejoin(connection: number, memberChats: Promise<Set<number> | null>, recovered: boolean): Promise<void> {
    let members: Set<number> | null;
    try {
      members = await memberChats;
    } catch (error) {
      if (!this.#stale(connection)) {
        this.#o.onError(new E2ESessionError('BACKGROUND_FAILURE', 'Could not read the chat list.', { cause: error }));
      }
      return;
    }
    if (members === null) return;
    for (const chatId of [...this.#o.joined]) {
      if (this.#stale(connection)) return;
      // Entered since the last reconnection that was not recovered: the recovery restored its room.
      if (this.#entered.has(chatId)) continue;
      if (!members.has(chatId)) {
        this.#o.removed(chatId);
        continue;
      }
      try {
        const entered = await this.#enter(connection, chatId);
        if (entered === null || this.#stale(connection)) return;
        const joined = checkJoined(entered);
        this.#o.keying.checkOwnKey(joined.key_ring);
        this.#entered.add(chatId);
        this.#o.keying.keys.raiseEpoch(chatId, joined.epoch);
        // Sessions announced (portal:key_added) while this one was away get the key now; a room:key
        // lost with the socket is made up for by reading the server's envelope.
        this.#o.keying.background(chatId, this.#o.keyAndShare(chatId, joined));
      } catch (error) {
        if (this.#stale(connection)) return;
        // Removed between the list and the join.
        if (isApiError(error, ...REMOVED_CODES)) this.#o.removed(chatId);
        else if (error instanceof E2ESessionError) this.#o.onError(error);
        else {
          this.#o.onError(
            new E2ESessionError('BACKGROUND_FAILURE', `Could not rejoin chat ${chatId}.`, { chatId, cause: error }),
          );
        }
      }
    }
    if (this.#stale(connection)) return;
    this.#resyncOpen = false;
    this.#o.onReconnected({ recovered, chats: [...this.#o.joined].filter((id) => this.#entered.has(id)) });
  }

  /**
   * `room:join` for a resync. A refusal with ERR_RATE_LIMITED (the user's room entries per minute,
   * shared by its sessions) is retried after its `retry_after`; null when the connection went away.
   */
  async #enter(connection: number, chatId: number): Promise<RoomJoined | null> {
    for (;;) {
      try {
        // Enters only while still a member: a membership ended since the list is not made anew.
        return await joinRoom(this.#o.socket, { chat_id: chatId, rejoin: true });
      } catch (error) {
        const retryAfter = isApiError(error, 'ERR_RATE_LIMITED') ? error.retryAfter : undefined;
        if (retryAfter === undefined || this.#stale(connection)) throw error;
        await this.#pause(retryAfter * 1000);
        if (this.#stale(connection)) return null;
      }
    }
  }

  /** Waits `ms`, or less when a disconnect or close wakes it. */
  #pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#wakers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wakers.add(done);
    });
  }
}

/**
 * A `room:join` acknowledgement, checked where the session relies on it (chat id, epoch, key ring).
 * @throws E2ESessionError BAD_SERVER_ANSWER when it does not have that shape.
 */
export function checkJoined(joined: RoomJoined): RoomJoined {
  const problem = shapeProblem(JoinAnswerSchema, joined);
  if (problem) {
    throw new E2ESessionError('BAD_SERVER_ANSWER', 'The room:join acknowledgement is malformed.', {
      details: { answer: 'room:join', path: problem.path, problem: problem.message },
    });
  }
  return joined;
}
