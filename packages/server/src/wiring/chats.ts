import { archivedAtOf } from '../modules/chats/chats.rules.js';
import { type ChatsService, makeChatsService } from '../modules/chats/chats.service.js';
import { makeChatsStore } from '../modules/chats/chats.store.js';
import { makeGuildsService } from '../modules/guilds/guilds.service.js';
import { makeGuildsStore } from '../modules/guilds/guilds.store.js';
import { makeKeysService } from '../modules/keys/keys.service.js';
import { makeKeysStore } from '../modules/keys/keys.store.js';
import { makeBlocksService } from '../modules/matchmaking/blocks.service.js';
import { makeBlocksStore } from '../modules/matchmaking/blocks.store.js';
import { makeMatchmakingService } from '../modules/matchmaking/matchmaking.service.js';
import { makeMatchmakingStore } from '../modules/matchmaking/matchmaking.store.js';
import { makeMessagesService } from '../modules/messages/messages.service.js';
import { makeMessagesStore } from '../modules/messages/messages.store.js';
import type { HeldPresence } from '../platform/node-presence.js';
import type { Realtime } from '../platform/realtime.js';
import { RedisState } from '../platform/state/index.js';
import type { MatchQueue } from '../platform/state/match-queue.js';
import { MemoryMatchQueue } from '../platform/state/match-queue.memory.js';
import { RedisMatchQueue } from '../platform/state/match-queue.redis.js';
import { makeEnterLimit, type UserLimit } from '../platform/write-limit.js';
import type { Accounts } from './accounts.js';
import type { WiringContext } from './services.js';

/** Chats and what lives in them: the chats store, keys, messages, guilds (their chats), the chats service. */
export function wireChats(ctx: WiringContext, accounts: Accounts, realtime: Realtime, writes: UserLimit) {
  const { clock, db, state } = ctx;
  const { audit, usersStore } = accounts;
  const chatsStore = makeChatsStore(db);
  const keys = makeKeysService({
    db,
    store: makeKeysStore(db),
    clock,
    realtime,
    membership: {
      chatIdsOf: (userId, tx) => chatsStore.chatIdsOf(userId, tx),
      lockChat: async (chatId, tx) => {
        const chat = await chatsStore.lockById(chatId, tx);
        return chat ? { epoch: chat.epoch, archived: archivedAtOf(chat, clock.now()) !== null } : null;
      },
    },
  });
  const messages = makeMessagesService({
    store: makeMessagesStore(db),
    clock,
    state,
    realtime,
    access: {
      chat: async (chatId) => {
        const chat = await chatsStore.byId(chatId);
        return chat ? { epoch: chat.epoch, archived: archivedAtOf(chat, clock.now()) !== null } : null;
      },
      isMember: (chatId, userId) => chatsStore.isMember(chatId, userId),
      hasKey: (chatId, epoch, sessionId) => keys.hasKey(chatId, epoch, sessionId),
    },
  });
  // Guilds: each guild's public chat (no owner, so it takes nobody's slot) is made through the chats store.
  const guilds = makeGuildsService({
    db,
    store: makeGuildsStore(db),
    clock,
    audit,
    users: usersStore,
    chats: {
      create: async (name, at, tx) =>
        (await chatsStore.insert({ type: 'public', name, ownerUserId: null, createdAt: at, updatedAt: at }, tx)).id,
      isLive: async (chatId, tx) => (await chatsStore.byId(chatId, tx)) !== undefined,
    },
  });
  const chats = makeChatsService({
    db,
    store: chatsStore,
    clock,
    keys,
    messages,
    realtime,
    vanityChat: guilds.vanityChat,
    writes,
    enters: makeEnterLimit(state),
    log: ctx.app.log,
  });
  // Cluster mode: the sessions of a node killed outright go offline in their chats (and come back
  // online if that node was only stalled): platform/node-presence.ts.
  realtime.onNodePresence((held, online) => {
    if (online)
      void sayBackOnline(realtime, chats, held).catch((err: unknown) =>
        ctx.app.log.warn({ err }, 'presence back online failed'),
      );
    else for (const h of held) chats.announcePresence(h.chatId, h, false);
  });
  return { chatsStore, keys, messages, guilds, chats };
}

/**
 * A node swept as dead that came back says online again what it holds. Its set comes from its own
 * room events, which lag behind its stream reader after a stall (a kick made meanwhile on another
 * node, its sockets-leave not applied yet): so the reader catches up first (2 s at most), then,
 * holding the memberships (FOR SHARE), only the presences still held here by a member are said
 * online, before any removal of them commits (whose offline so comes after).
 */
async function sayBackOnline(realtime: Realtime, chats: ChatsService, held: HeldPresence[]): Promise<void> {
  await realtime.catchUpRooms();
  const chatIds = [...new Set(held.map((h) => h.chatId))];
  const userIds = [...new Set(held.map((h) => h.userId))];
  await chats.underMemberships(chatIds, userIds, (member) => {
    for (const h of held)
      if (member(h.chatId, h.userId) && realtime.nodePresence?.holds(h)) chats.announcePresence(h.chatId, h, true);
  });
}

/** Pairing over the match queue (atomic in Redis in cluster mode), and the blocks it respects. */
export function wireMatchmaking(ctx: WiringContext, accounts: Accounts, realtime: Realtime, chats: ChatsService) {
  const { config, clock, db, state } = ctx;
  const { audit, usersStore, users } = accounts;
  const queue: MatchQueue =
    state instanceof RedisState
      ? new RedisMatchQueue(state.matchQueueConnection(), config.redisPrefix, state.client)
      : new MemoryMatchQueue();
  const blocksStore = makeBlocksStore(db);
  const matchmaking = makeMatchmakingService({
    clock,
    state,
    queue,
    chats,
    store: makeMatchmakingStore(db),
    realtime,
    log: ctx.app.log,
  });
  const blocks = makeBlocksService({
    db,
    store: blocksStore,
    usersStore,
    users,
    queue,
    audit,
    clock,
    realtime,
    log: ctx.app.log,
  });
  return { matchmaking, blocks };
}
