import type { ServerToClientEvents } from '@parlor/protocol';
import { expect, it } from 'vitest';
import { describeApp, type TestApp } from '../../server/test/support/app.js';
import { operator } from '../../server/test/support/flows.js';
import {
  type BadServerEventDetails,
  type BotClient,
  connect,
  joinRoom,
  onChecked,
  type ParlorSocket,
} from '../src/index.js';
import { e2eSuite, loginUser, testBot, userClient } from './support.js';

let app: TestApp;
let bot: BotClient;
e2eSuite((started) => {
  ({ app, bot } = started);
});

let tagCounter = 0;
const tag = () => `sdk${Date.now() % 100_000}x${++tagCounter}`;

/**
 * The next payload of `event` on `socket`, through {@link onChecked}: a payload the SDK's schema
 * refuses fails the test, so the server's real payloads are checked against `ServerEventSchemas`.
 */
function next<E extends keyof ServerToClientEvents>(
  socket: ParlorSocket,
  event: E,
  timeoutMs = 10_000,
): Promise<Parameters<ServerToClientEvents[E]>[0]> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`no ${event} within ${timeoutMs} ms`));
    }, timeoutMs);
    const settle = (fn: () => void) => {
      clearTimeout(timer);
      off();
      fn();
    };
    const listener = ((payload: Parameters<ServerToClientEvents[E]>[0]) =>
      settle(() => resolve(payload))) as ServerToClientEvents[E];
    const bad = (details: BadServerEventDetails) =>
      settle(() => reject(new Error(`${event} refused by its schema: ${JSON.stringify(details)}`)));
    const off = onChecked(socket, event, listener, bad, reject);
  });
}

const sockets: ParlorSocket[] = [];
async function socketOf(client: Parameters<typeof connect>[0]): Promise<ParlorSocket> {
  const socket = await connect(client, { reconnection: false });
  sockets.push(socket);
  return socket;
}
const closeSockets = () => {
  for (const s of sockets.splice(0)) s.disconnect();
};

describeApp('ParlorClient: strangers, matchmaking and blocks', () => {
  it('a stranger matches with a user: both read the match, the stranger leaves it, the user blocks it', async () => {
    try {
      const stranger = userClient(app);
      const { user: strangerUser } = await stranger.stranger();
      expect(strangerUser.stranger).toBe(true);
      expect(stranger.session).not.toBeNull();
      const { client: ann } = await loginUser(app, bot);
      const [strangerSocket, annSocket] = [await socketOf(stranger), await socketOf(ann)];

      const t = tag();
      expect(await stranger.match([t])).toMatchObject({ state: 'searching', interests: [t] });
      expect(await stranger.matchStatus()).toMatchObject({ state: 'searching' });
      const found = [next(strangerSocket, 'match:found'), next(annSocket, 'match:found')];
      expect((await ann.match([t])).state).toBe('searching');
      const [toStranger, toAnn] = await Promise.all(found);
      expect(toAnn?.peer).toMatchObject({ id: strangerUser.id, stranger: true });
      expect(toStranger?.chat_id).toBe(toAnn?.chat_id);

      const [annStatus, strangerStatus] = await Promise.all([ann.matchStatus(), stranger.matchStatus()]);
      expect(annStatus).toMatchObject({ state: 'matched', chat_id: toAnn?.chat_id });
      expect(strangerStatus).toMatchObject({ state: 'matched', chat_id: toAnn?.chat_id });
      expect((await ann.matchStatistics()).online).toBeGreaterThanOrEqual(2);

      expect(await stranger.leaveMatch()).toEqual({ ok: true, chat_id: toAnn?.chat_id });
      expect(await ann.block(strangerUser.id)).toEqual({ ok: true });
      expect((await ann.blocks()).blocks.map((b) => b.user_id)).toEqual([strangerUser.id]);
      expect(await ann.unblock(strangerUser.id)).toEqual({ ok: true });
      expect((await ann.blocks()).blocks).toEqual([]);

      // A search ended by its searcher.
      expect((await ann.match([tag()])).state).toBe('searching');
      expect((await ann.dequeue()).state).toBe('idle');
    } finally {
      closeSockets();
    }
  });
});

describeApp('ParlorClient: notifications', () => {
  it('lists, counts and marks read the notifications an admin sent, and notification:new announces them', async () => {
    try {
      const { client: ann, user } = await loginUser(app, bot);
      const socket = await socketOf(ann);
      const send = async (title: string) =>
        expect(
          (
            await operator(app).post('/v1/admin/notifications', {
              title,
              body: '**Hi**',
              type: 'info',
              user_id: user.id,
            })
          ).status,
        ).toBe(200);

      // A new account has a welcome notification: read it first.
      await ann.readAllNotifications();
      const announced = next(socket, 'notification:new');
      await send('First');
      expect(await announced).toMatchObject({ title: 'First', read_at: null });
      await send('Second');
      const page = await ann.notifications({ limit: 1 });
      expect(page.notifications.map((n) => n.title)).toEqual(['Second']);
      expect(
        (await ann.notifications({ before: page.next_before ?? 0, limit: 1 })).notifications.map((n) => n.title),
      ).toEqual(['First']);
      expect(await ann.unreadNotifications()).toEqual({ unread: 2 });

      const read = await ann.readNotification(page.notifications[0]?.id ?? 0);
      expect(read.read_at).not.toBeNull();
      expect(await ann.readAllNotifications()).toEqual({ marked: 1 });
      expect(await ann.unreadNotifications()).toEqual({ unread: 0 });
    } finally {
      closeSockets();
    }
  });
});

describeApp('ParlorClient: chat moderation', () => {
  it('the owner mutes and unmutes (user:unmuted), warns, kicks, bans and unbans a member; a moderator hard-mutes', async () => {
    try {
      const owner = await loginUser(app, bot, { level: 2 });
      const member = await loginUser(app, bot);
      const moderator = await loginUser(app, bot, { level: 1 });
      const { chat } = await owner.client.createChat({ name: 'Moderated', type: 'public' });
      const [ownerSocket, memberSocket] = [await socketOf(owner.client), await socketOf(member.client)];
      await joinRoom(ownerSocket, { chat_id: chat.id });
      await joinRoom(memberSocket, { chat_id: chat.id });
      const target = { user_id: member.user.id };

      expect(await owner.client.mute(chat.id, { ...target, duration: 600, reason: 'calm down' })).toEqual({ ok: true });
      const unmuted = next(ownerSocket, 'user:unmuted');
      expect(await owner.client.unmute(chat.id, target)).toEqual({ ok: true });
      expect(await unmuted).toEqual({ chat_id: chat.id, user_id: member.user.id });
      expect(await owner.client.warn(chat.id, { ...target, reason: 'be kind' })).toEqual({ ok: true });
      expect(await owner.client.kick(chat.id, target)).toEqual({ ok: true });
      await joinRoom(memberSocket, { chat_id: chat.id });
      expect(await owner.client.ban(chat.id, target)).toEqual({ ok: true });
      expect(await owner.client.unban(chat.id, target)).toEqual({ ok: true });

      expect(await moderator.client.hardMute({ ...target, duration: 600 })).toEqual({ ok: true });
      expect(await moderator.client.hardUnmute(target)).toEqual({ ok: true });
      expect((await member.client.punishments()).length).toBeGreaterThanOrEqual(3);
    } finally {
      closeSockets();
    }
  });
});

describeApp('the server’s chat events against ServerEventSchemas', () => {
  it('room:members, portal:presence and chat:updated pass onChecked', async () => {
    try {
      const owner = await loginUser(app, bot, { level: 2 });
      const member = await loginUser(app, bot);
      const { chat } = await owner.client.createChat({ name: 'Watched', type: 'public' });
      const [ownerSocket, memberSocket] = [await socketOf(owner.client), await socketOf(member.client)];

      const members = next(ownerSocket, 'room:members');
      await joinRoom(ownerSocket, { chat_id: chat.id });
      expect(await members).toMatchObject({ chat_id: chat.id, members: [{ user_id: owner.user.id }] });
      const presence = next(ownerSocket, 'portal:presence');
      await joinRoom(memberSocket, { chat_id: chat.id });
      expect(await presence).toMatchObject({ chat_id: chat.id, user_id: member.user.id, online: true });
      const updated = next(ownerSocket, 'chat:updated');
      await owner.client.updateChatConfig(chat.id, { name: 'Renamed' });
      expect((await updated).chat).toMatchObject({ id: chat.id, name: 'Renamed' });
    } finally {
      closeSockets();
    }
  });
});

describeApp('ParlorClient: users, bots and statistics', () => {
  it('finds users and bots, reads their profiles, and reads the public statistics', async () => {
    const { client: ann, user } = await loginUser(app, bot);
    const { users } = await ann.searchUsers({ q: user.username });
    expect(users.map((u) => u.id)).toContain(user.id);
    expect(await ann.user(user.id)).toMatchObject({ id: user.id, username: user.username });

    const listed = await testBot(app, 'community');
    const profile = await listed.me();
    expect((await ann.bots({ limit: 100 })).bots.map((b) => b.id)).toContain(profile.id);
    expect((await ann.searchBots({ q: profile.name })).bots.map((b) => b.id)).toContain(profile.id);
    expect(await ann.bot(profile.id)).toMatchObject({ id: profile.id, name: profile.name });

    expect((await ann.userStatistics()).total).toBeGreaterThanOrEqual(1);
    expect((await ann.botStatistics()).total).toBeGreaterThanOrEqual(1);
    expect(await ann.chatStatistics()).toHaveProperty('active_browsers');
    expect((await ann.appStatistics()).users).toBeGreaterThanOrEqual(1);
    expect((await ann.health()).status).toBe('ok');
  });
});
