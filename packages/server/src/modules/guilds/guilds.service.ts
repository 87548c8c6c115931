import {
  AuditCodes,
  type BotGuild,
  type Guild,
  type GuildUpsertBody,
  type RoomSettings,
  type RoomSettingsBody,
  RoomSettingsDefaults,
  type VanityGuild,
} from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { appError } from '../../platform/errors.js';
import type { AuditStore } from '../audit/audit.store.js';
import { storedCallerLevel } from '../users/users.caller.js';
import { isUniqueViolation, type Tx, type UsersStore } from '../users/users.store.js';
import { makeGuildAdmin } from './guilds.admin.js';
import { toBotGuild, toGuild, toRoomSettings, toVanityGuild } from './guilds.presenter.js';
import { canManageGuild, guildChatName, guildHasPremium, isStartUrl } from './guilds.rules.js';
import type { GuildInsert, GuildRow, GuildsStore } from './guilds.store.js';

// The admin guild routes' rules live in guilds.admin.ts; importers take AdminCaller from here.
export type { AdminCaller } from './guilds.admin.js';

/** A signed-in caller of the guild endpoints. */
export interface GuildViewer {
  userId: number;
  permissionLevel: number;
}

/** The chat side of a guild: its one public chat, created inside the vanity transaction. */
export interface GuildChats {
  /** Creates the guild's public chat (no owner) and returns its id. */
  create(name: string, at: Date, tx: Tx): Promise<number>;
  /** False when the chat was deleted since. */
  isLive(chatId: number, tx: Tx): Promise<boolean>;
}

export interface GuildsDeps {
  db: Db;
  store: GuildsStore;
  clock: Clock;
  audit: AuditStore;
  users: Pick<UsersStore, 'byId'>;
  chats: GuildChats;
}

/** Guilds (spec 2.3, 2.4, 4.3, 4.4): the bot upsert, owner self-service, admin premium and sponsors. */
export function makeGuildsService(deps: GuildsDeps) {
  const { db, store, clock, audit, chats } = deps;

  const mustGet = async (chatplatformId: string, tx?: Tx): Promise<GuildRow> => {
    const g = await store.byChatplatformId(chatplatformId, tx);
    if (!g) throw appError('ERR_GUILD_NOT_FOUND');
    return g;
  };

  /** Owner (a linked identity is the guild's owner id), sponsor, or Admin and above; else 403. */
  const mustMayManage = async (viewer: GuildViewer, g: GuildRow, tx?: Tx): Promise<void> => {
    const allowed = canManageGuild({
      permissionLevel: viewer.permissionLevel,
      isOwner: g.ownerChatplatformId !== null && (await store.hasIdentity(viewer.userId, g.ownerChatplatformId, tx)),
      isSponsor: await store.isSponsor(g.id, viewer.userId, tx),
    });
    if (!allowed) throw appError('ERR_FORBIDDEN');
  };

  /** The guild, when the viewer may manage it (a read: GET). */
  const mustManage = async (viewer: GuildViewer, chatplatformId: string): Promise<GuildRow> => {
    const g = await mustGet(chatplatformId);
    await mustMayManage(viewer, g);
    return g;
  };

  /**
   * The guild's row, locked until `tx` ends, when the viewer may manage it (the PUTs). Decided on
   * the locked row, in the write's transaction: a sponsor removal (adminChange) and the bot upsert
   * that moves the owner id both write this row, so either committed before the lock and is seen
   * here (403, nothing written), or waits for the write. A check before the transaction would let
   * a caller who just lost the guild write it anyway. The Admin right is decided on the caller's
   * level as stored (storedCallerLevel, its row held FOR SHARE after the guild's: guild rows before
   * users rows), never the session's view of it, which a demotion committed on another node has
   * not reached yet; a caller Banned or timed out meanwhile answers as its session would.
   */
  const lockManaged = async (viewer: GuildViewer, chatplatformId: string, tx: Tx): Promise<GuildRow> => {
    const g = await store.lockByChatplatformId(chatplatformId, tx);
    if (!g) throw appError('ERR_GUILD_NOT_FOUND');
    const permissionLevel = await storedCallerLevel(tx, viewer.userId, clock);
    await mustMayManage({ ...viewer, permissionLevel }, g, tx);
    return g;
  };

  const full = async (g: GuildRow): Promise<Guild> =>
    toGuild(g, (await store.sponsorsOf([g.id])).get(g.id) ?? [], clock.now());

  const updated = async (id: number, values: Partial<GuildInsert>, tx: Tx): Promise<GuildRow> => {
    const row = await store.update(id, values, tx);
    if (!row) throw appError('ERR_GUILD_NOT_FOUND');
    return row;
  };

  return {
    ...makeGuildAdmin({ ...deps, full, updated }),

    /**
     * The bot upsert: creates the guild (room settings at their defaults) or updates it. Optional
     * fields left out keep their value; the record is marked as having the bot, source 'bot'. Only
     * the bot that reported the guild first (GuildsStore.upsert), or an Official bot, reports it
     * again: another bot's key cannot move the guild's owner (403 ERR_GUILD_OTHER_BOT).
     */
    async upsert(botId: number, chatplatformId: string, body: GuildUpsertBody): Promise<BotGuild> {
      const now = clock.now();
      const changes: Partial<GuildInsert> & Pick<GuildInsert, 'name' | 'source' | 'updatedAt'> = {
        name: body.name,
        memberCount: body.member_count,
        hasBot: true,
        source: 'bot',
        updatedAt: now,
      };
      if (body.owner_chatplatform_id !== undefined) changes.ownerChatplatformId = body.owner_chatplatform_id;
      if (body.avatar_url !== undefined) changes.avatarUrl = body.avatar_url;
      if (body.prefix !== undefined) changes.prefix = body.prefix;
      const row = await store.upsert(
        {
          insert: {
            chatplatformId,
            roomBrowser: RoomSettingsDefaults.browser,
            roomProxy: RoomSettingsDefaults.proxy,
            roomStartUrl: RoomSettingsDefaults.start_url,
            roomKiosk: RoomSettingsDefaults.kiosk,
            roomAllowControlRequests: RoomSettingsDefaults.allow_control_requests,
            createdAt: now,
            ...changes,
          },
          update: changes,
        },
        botId,
      );
      if (!row) throw appError('ERR_GUILD_OTHER_BOT');
      return toBotGuild(row);
    },

    /** GET /v1/users/me/guilds: the guilds the caller's identity on the guilds' platform owns. */
    async ownedBy(userId: number): Promise<Guild[]> {
      const rows = await store.ownedBy(userId);
      const sponsors = await store.sponsorsOf(rows.map((g) => g.id));
      const now = clock.now();
      return rows.map((g) => toGuild(g, sponsors.get(g.id) ?? [], now));
    },

    async get(viewer: GuildViewer, chatplatformId: string): Promise<Guild> {
      return full(await mustManage(viewer, chatplatformId));
    },

    /**
     * Sets the vanity invite: active premium required, unique across guilds. The guild's public chat
     * is created with the first vanity (or again if it was deleted), in the same transaction.
     */
    async setVanity(viewer: GuildViewer, chatplatformId: string, vanity: string): Promise<VanityGuild> {
      const now = clock.now();
      try {
        const row = await db.transaction(async (tx) => {
          const g = await lockManaged(viewer, chatplatformId, tx);
          if (!guildHasPremium(g, now)) throw appError('ERR_GUILD_PREMIUM_REQUIRED');
          if ((await store.vanityHolder(vanity, g.id, tx)) !== null) throw appError('ERR_VANITY_TAKEN');
          const live = g.chatId !== null && (await chats.isLive(g.chatId, tx));
          if (live && g.vanityInvite === vanity) return g;
          const chatId = live && g.chatId !== null ? g.chatId : await chats.create(guildChatName(g.name), now, tx);
          const next = await updated(g.id, { vanityInvite: vanity, chatId, updatedAt: now }, tx);
          await audit.record(
            {
              actor: { kind: 'user', id: viewer.userId },
              code: AuditCodes.GUILD_VANITY_SET,
              action: 'set',
              data: { guild_id: g.chatplatformId, vanity_invite: vanity, previous: g.vanityInvite, chat_id: chatId },
            },
            tx,
          );
          return next;
        });
        return toVanityGuild(row, now);
      } catch (e) {
        // Two guilds claiming one free vanity at once: the unique index decides.
        if (isUniqueViolation(e)) throw appError('ERR_VANITY_TAKEN');
        throw e;
      }
    },

    /** Partial update of the room settings; the answer is all of them. */
    async updateRoomSettings(
      viewer: GuildViewer,
      chatplatformId: string,
      body: RoomSettingsBody,
    ): Promise<RoomSettings> {
      const values: Partial<GuildInsert> = { updatedAt: clock.now() };
      if (body.browser !== undefined) values.roomBrowser = body.browser;
      if (body.proxy !== undefined) values.roomProxy = body.proxy;
      if (body.start_url !== undefined) values.roomStartUrl = body.start_url;
      if (body.kiosk !== undefined) values.roomKiosk = body.kiosk;
      if (body.allow_control_requests !== undefined) values.roomAllowControlRequests = body.allow_control_requests;
      const row = await db.transaction(async (tx) => {
        const g = await lockManaged(viewer, chatplatformId, tx);
        // After the guild checks, as before: a caller who may not manage the guild learns no more.
        if (body.start_url !== undefined && !isStartUrl(body.start_url))
          throw appError('ERR_VALIDATION', undefined, {
            errors: [{ path: 'body/start_url', message: 'must be an http or https URL' }],
          });
        const next = await updated(g.id, values, tx);
        await audit.record(
          {
            actor: { kind: 'user', id: viewer.userId },
            code: AuditCodes.GUILD_ROOM_SETTINGS_UPDATE,
            action: 'update',
            data: { guild_id: g.chatplatformId, ...body },
          },
          tx,
        );
        return next;
      });
      return toRoomSettings(row);
    },

    /** The room settings that apply to a chat: its guild's, or null for a chat that is no guild's. */
    async roomSettingsOfChat(chatId: number): Promise<RoomSettings | null> {
      const g = await store.byChatId(chatId);
      return g ? toRoomSettings(g) : null;
    },

    /** Whether the user owns the guild whose public chat this is (that chat's room is theirs to run). */
    async ownsChatGuild(chatId: number, userId: number): Promise<boolean> {
      const g = await store.byChatId(chatId);
      return g?.ownerChatplatformId != null && (await store.hasIdentity(userId, g.ownerChatplatformId));
    },

    /** room:join {vanity}: the guild chat behind a vanity, while the guild's premium is active. */
    async vanityChat(vanity: string): Promise<number | null> {
      return store.chatOfVanity(vanity, clock.now());
    },
  };
}

export type GuildsService = ReturnType<typeof makeGuildsService>;
