import { Redis } from 'ioredis';
import { type Clock, systemClock } from '../clock.js';
import { type ConnectionLog, watchConnection } from './connection-log.js';
import { RedisLimiter } from './limiter.js';
import { ADD_EXPIRING, DEL_IF, REPLACE_IF, SET_IF_ABSENT_COUNTED, TAKE_EXPIRING } from './redis.lua.js';
import type { CountedIn, CountedSet, Limiter, StateStore, Unsubscribe } from './types.js';

/**
 * How long a command on a connection that serves requests may go unanswered before it fails
 * (ioredis's `commandTimeout`, "Command timed out"), answered as 503 ERR_SERVICE_UNAVAILABLE
 * (platform/errors.ts): a Redis that stalls with its connections open (a long script, a busy fork,
 * a network path that drops packets) must not hold requests forever. Redis answers this app's
 * commands in well under a millisecond, its scripts included; the health probe gives up after 2.5 s.
 * The match queue's scripts are exempt (matchQueueConnection): a timeout does not stop a script.
 */
export const REDIS_COMMAND_TIMEOUT_MS = 3_000;

/** Members per script call: the script unpacks two arguments per member onto Lua's stack (8000 at most). */
const EXPIRING_CHUNK = 1000;

/** One `subscribe` call: its handler and its delivery listener. */
interface Subscription {
  handler: (message: string) => void;
  onDelivery?: (live: boolean) => void;
}

/** Redis coordination for the cluster mode; every key and channel carries the configured prefix. */
export class RedisState implements StateStore {
  readonly kind = 'redis' as const;
  readonly client: Redis;
  /** The connection in subscriber mode (Redis allows no other commands on it); made on first use. */
  private subscriber: Redis | null = null;
  /** The match queue's connection, without a command timeout (matchQueueConnection); made on first use. */
  private untimed: Redis | null = null;
  /** Prefixed channel name → this node's subscriptions to it. */
  private readonly subscriptions = new Map<string, Set<Subscription>>();
  /** Whether the subscriber connection is up with every channel subscribed. */
  private delivering = false;
  private closing = false;

  constructor(
    url: string,
    private readonly prefix: string,
    private readonly clock: Clock = systemClock,
    /** Where outages and returns of its connections are logged (once each, connection-log.ts). */
    private readonly log?: ConnectionLog,
  ) {
    // The subscriber (duplicated from it) has the same timeout: it sends only SUBSCRIBE and
    // UNSUBSCRIBE, which Redis answers at once; what it receives is no command's answer.
    this.client = new Redis(url, {
      lazyConnect: true,
      maxRetriesPerRequest: 3,
      enableOfflineQueue: true,
      commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
    });
    watchConnection(this.client, 'commands', log);
  }

  async connect(): Promise<void> {
    await this.client.connect();
  }

  /**
   * A connection of its own for the Socket.IO streams adapter, which blocks `blockMs` in each
   * `XREAD`. Its commands (XADD, PUBLISH, the recovery sessions' SET/GETDEL and XRANGE, the node
   * count) have REDIS_COMMAND_TIMEOUT_MS like every request's; the connections the adapter makes
   * from it (`duplicate`: the stream reader and its pub/sub subscriber) have `blockMs` more, so a
   * read is never cut while it blocks, and one that a stalled Redis never answers is read again.
   * The adapter sends some commands without awaiting them (a session's SET, PUBLISH, SUBSCRIBE):
   * their failures are dropped here (the adapter gives up on them: a session not kept connects
   * afresh) instead of rejecting unhandled, which would end the process.
   */
  socketAdapterConnection(blockMs: number): Redis {
    const quiet = (client: Redis): Redis => {
      const send = client.sendCommand.bind(client);
      client.sendCommand = (command, stream) => {
        command.promise.catch(() => {});
        return send(command, stream);
      };
      return client;
    };
    const client = quiet(this.client.duplicate());
    const duplicate = client.duplicate.bind(client);
    client.duplicate = (override) =>
      quiet(duplicate({ commandTimeout: blockMs + REDIS_COMMAND_TIMEOUT_MS, ...override }));
    return client;
  }

  /**
   * A connection of its own without REDIS_COMMAND_TIMEOUT_MS, for scripts whose outcome must be
   * acted on: the match queue's (RedisMatchQueue). A timeout only stops the wait, not the script,
   * which a slow Redis still runs later: a PLACE cut at 3 s would take the waiting user it paired
   * out of the queue with nobody left to make the chat or tell them. Its commands wait for their
   * answer as long as the connection is up; a lost connection still fails them (after
   * `maxRetriesPerRequest` reconnections). Closed with the state.
   */
  matchQueueConnection(): Redis {
    if (this.untimed) return this.untimed;
    const client = this.client.duplicate({ commandTimeout: undefined });
    watchConnection(client, 'match queue', this.log);
    this.untimed = client;
    return client;
  }

  private k(key: string) {
    return this.prefix + key;
  }

  async get(key: string) {
    return this.client.get(this.k(key));
  }
  async set(key: string, value: string, ttlMs: number) {
    await this.client.set(this.k(key), value, 'PX', Math.max(1, Math.ceil(ttlMs)));
  }
  async setIfAbsent(key: string, value: string, ttlMs: number) {
    return (await this.client.set(this.k(key), value, 'PX', Math.max(1, Math.ceil(ttlMs)), 'NX')) === 'OK';
  }
  async take(key: string) {
    return this.client.getdel(this.k(key));
  }
  async del(...keys: string[]) {
    if (keys.length > 0) await this.client.del(...keys.map((k) => this.k(k)));
  }
  async delIf(key: string, expected: string) {
    return (await this.client.eval(DEL_IF, 1, this.k(key), expected)) === 1;
  }
  async replaceIf(key: string, expected: string, value: string, ttlMs: number) {
    const ttl = String(Math.max(1, Math.ceil(ttlMs)));
    return (await this.client.eval(REPLACE_IF, 1, this.k(key), expected, value, ttl)) === 1;
  }
  async addExpiring(setKey: string, members: string[], expiresAtMs: number) {
    let answer: [number, string] = [0, String(expiresAtMs)];
    let i = 0;
    do {
      const chunk = members.slice(i, i + EXPIRING_CHUNK);
      answer = (await this.client.eval(
        ADD_EXPIRING,
        1,
        this.k(setKey),
        String(this.clock.now().getTime()),
        String(expiresAtMs),
        ...chunk,
      )) as [number, string];
      i += EXPIRING_CHUNK;
    } while (i < members.length);
    return { count: Number(answer[0]), earliest: Number(answer[1]) };
  }
  async setIfAbsentCounted(key: string, value: string, ttlMs: number, count: CountedIn): Promise<CountedSet> {
    const answer = (await this.client.eval(
      SET_IF_ABSENT_COUNTED,
      2,
      this.k(key),
      this.k(count.setKey),
      value,
      String(Math.max(1, Math.ceil(ttlMs))),
      String(this.clock.now().getTime()),
      String(count.expiresAtMs),
      count.member,
      String(count.max),
    )) as [number, string?];
    if (answer[0] === 1) return 'set';
    if (answer[0] === 0) return 'present';
    return { full: Number(answer[1]) };
  }
  async removeExpiring(setKey: string, member: string) {
    await this.client.zrem(this.k(setKey), member);
  }
  async takeExpiring(setKey: string) {
    const now = String(this.clock.now().getTime());
    return (await this.client.eval(TAKE_EXPIRING, 1, this.k(setKey), now)) as string[];
  }
  async countExpiring(setKey: string) {
    return this.client.zcount(this.k(setKey), `(${this.clock.now().getTime()}`, '+inf');
  }
  async hasExpiring(setKey: string, member: string) {
    const score = await this.client.zscore(this.k(setKey), member);
    return score !== null && Number(score) > this.clock.now().getTime();
  }
  limiter(name: string, points: number, durationMs: number): Limiter {
    const keys = { counts: this.k(`rl:${name}:`), windows: this.k(`rlw:${name}:`) };
    return new RedisLimiter(this.client, keys, points, durationMs);
  }
  async publish(channel: string, message: string) {
    await this.client.publish(this.k(channel), message);
  }
  async subscribe(
    channel: string,
    handler: (message: string) => void,
    onDelivery?: (live: boolean) => void,
  ): Promise<Unsubscribe> {
    const name = this.k(channel);
    const subscription: Subscription = { handler, onDelivery };
    let subs = this.subscriptions.get(name);
    if (!subs) {
      subs = new Set();
      this.subscriptions.set(name, subs);
    }
    subs.add(subscription);
    try {
      // Every call waits for a SUBSCRIBE of its own (a no-op in Redis when the channel is already
      // subscribed): replies come in order, so the channel is live for this caller once it answers.
      await this.subscriberConnection().subscribe(name);
    } catch (err) {
      this.forget(name, subscription);
      throw err;
    }
    let done = false;
    return async () => {
      if (done) return;
      done = true;
      if (this.forget(name, subscription) && this.subscriber && !this.closing)
        await this.subscriber.unsubscribe(name).catch(() => {});
    };
  }

  /** Drops one subscription; true when it was the channel's last on this node. */
  private forget(name: string, subscription: Subscription): boolean {
    const subs = this.subscriptions.get(name);
    subs?.delete(subscription);
    if (subs?.size !== 0) return false;
    this.subscriptions.delete(name);
    return true;
  }

  private subscriberConnection(): Redis {
    if (this.subscriber) return this.subscriber;
    // Re-subscribing after a reconnection is done here, so delivery is announced only once the
    // channels are really subscribed again (ioredis's own resubscription gives no such signal).
    const sub = this.client.duplicate({ autoResubscribe: false });
    watchConnection(sub, 'subscriber', this.log);
    sub.on('message', (name: string, message: string) => {
      const subs = this.subscriptions.get(name);
      if (!subs) return;
      for (const s of [...subs]) {
        try {
          s.handler(message);
        } catch {
          // The contract: handlers must not throw, and one that does never stops the others.
        }
      }
    });
    let connectedBefore = false;
    sub.on('ready', () => {
      if (!connectedBefore) {
        connectedBefore = true;
        this.delivering = true;
        return;
      }
      const names = [...this.subscriptions.keys()];
      (names.length > 0 ? sub.subscribe(...names) : Promise.resolve()).then(
        () => this.announceDelivery(true),
        // Not subscribed again: reconnect and try once more, still announcing nothing.
        () => sub.disconnect(true),
      );
    });
    sub.on('close', () => {
      if (!this.closing) this.announceDelivery(false);
    });
    this.subscriber = sub;
    return sub;
  }

  private announceDelivery(live: boolean) {
    if (this.delivering === live) return;
    this.delivering = live;
    for (const subs of this.subscriptions.values()) {
      for (const s of [...subs]) {
        try {
          s.onDelivery?.(live);
        } catch {
          // As for handlers: a listener that throws never stops the others.
        }
      }
    }
  }

  async close() {
    this.closing = true;
    const sub = this.subscriber;
    this.subscriber = null;
    this.subscriptions.clear();
    for (const c of [sub, this.untimed]) {
      if (!c) continue;
      if (c.status === 'ready') await c.quit().catch(() => c.disconnect());
      else c.disconnect();
    }
    this.untimed = null;
    await this.client.quit().catch(() => this.client.disconnect());
  }
}
