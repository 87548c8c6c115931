import { RoomSettingsDefaults } from '@parlor/protocol';
import { beforeAll, expect, it } from 'vitest';
import { describeApp, type TestApp } from '../../server/test/support/app.js';
import { nextIp } from '../../server/test/support/client.js';
import { createBot, nextIdentity, operator } from '../../server/test/support/flows.js';
import { BotClient, ParlorClient } from '../src/index.js';
import { apiError, e2eSuite, loginUser, testBot } from './support.js';

let app: TestApp;
/** The suite's Official bot: it delivers the login codes (loginUser). */
let bot: BotClient;
/** A Community bot, the usual third-party reporter of guilds. */
let reporter: BotClient;
e2eSuite((started) => {
  ({ app, bot } = started);
});
beforeAll(async () => {
  reporter = await testBot(app, 'community');
});

/** Guild premium for 30 days, through the operator route (as the server's guild tests grant it). */
async function grantPremium(guildId: string): Promise<void> {
  const res = await operator(app).post(`/v1/admin/guilds/${guildId}/premium`, { days: 30 });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

describeApp('ParlorClient and BotClient: guilds', () => {
  it('a bot reports a guild; its owner lists it, reads and updates its room settings, and sets a vanity', async () => {
    const owner = await loginUser(app, bot);
    const guildId = nextIdentity();
    const reported = await reporter.upsertGuild(guildId, {
      name: 'SDK guild',
      member_count: 12,
      owner_chatplatform_id: owner.platformUserId,
    });
    expect(reported).toMatchObject({
      chatplatform_id: guildId,
      name: 'SDK guild',
      member_count: 12,
      owner_chatplatform_id: owner.platformUserId,
      has_bot: true,
      source: 'bot',
    });

    const owned = await owner.client.guilds();
    expect(owned.map((g) => g.chatplatform_id)).toEqual([guildId]);
    const guild = await owner.client.getGuild(guildId);
    expect(guild).toMatchObject({ id: reported.id, has_premium: false, vanity_invite: null, chat_id: null });
    expect(guild.room_settings).toEqual(RoomSettingsDefaults);

    const settings = await owner.client.updateRoomSettings(guildId, { browser: 'tor', kiosk: true });
    expect(settings).toEqual({ ...RoomSettingsDefaults, browser: 'tor', kiosk: true });
    expect((await owner.client.getGuild(guildId)).room_settings).toEqual(settings);

    const needsPremium = await apiError(() => owner.client.setVanity(guildId, `sdk-${guildId}`));
    expect(needsPremium).toMatchObject({ status: 403, code: 'ERR_GUILD_PREMIUM_REQUIRED', source: 'http' });
    await grantPremium(guildId);
    const withVanity = await owner.client.setVanity(guildId, `sdk-${guildId}`);
    expect(withVanity).toMatchObject({
      chatplatform_id: guildId,
      has_premium: true,
      vanity_invite: `sdk-${guildId}`,
      chat_id: expect.any(Number),
    });
  });

  it('throws ParlorApiError for refused guild calls: validation, another user, an unknown guild, another bot', async () => {
    const owner = await loginUser(app, bot);
    const guildId = nextIdentity();
    await reporter.upsertGuild(guildId, {
      name: 'Refusals',
      member_count: 1,
      owner_chatplatform_id: owner.platformUserId,
    });

    const invalid = await apiError(() => owner.client.updateRoomSettings(guildId, { start_url: 'not a url' }));
    expect(invalid).toMatchObject({ status: 400, code: 'ERR_VALIDATION' });
    expect(invalid.body.errors?.[0]?.path).toBe('body/start_url');
    expect((await owner.client.getGuild(guildId)).room_settings).toEqual(RoomSettingsDefaults);

    const stranger = await loginUser(app, bot);
    expect(await stranger.client.guilds()).toEqual([]);
    const forbidden = await apiError(() => stranger.client.updateRoomSettings(guildId, { kiosk: true }));
    expect(forbidden).toMatchObject({ status: 403, code: 'ERR_FORBIDDEN' });
    expect(await apiError(() => stranger.client.getGuild(guildId))).toMatchObject({ code: 'ERR_FORBIDDEN' });

    const unknown = await apiError(() => owner.client.getGuild(nextIdentity()));
    expect(unknown).toMatchObject({ status: 404, code: 'ERR_GUILD_NOT_FOUND' });

    const { apiKey } = await createBot(app, { name: 'Other bot' });
    const other = new BotClient({ baseUrl: app.url, apiKey, headers: { 'x-forwarded-for': nextIp() } });
    const otherBot = await apiError(() => other.upsertGuild(guildId, { name: 'Taken', member_count: 2 }));
    expect(otherBot).toMatchObject({ status: 403, code: 'ERR_GUILD_OTHER_BOT' });
  });

  it('sends the guild routes to guildApiUrl and the others to baseUrl', async () => {
    const guildHost = 'http://guilds.parlor.test';
    const sent: string[] = [];
    /** Records each URL and serves the guild host from the test app, as a proxy for GUILD_API_URL would. */
    const fetchVia: typeof fetch = (input, init) => {
      const url = String(input);
      sent.push(url);
      return fetch(url.startsWith(guildHost) ? app.url + url.slice(guildHost.length) : url, init);
    };
    const owner = await loginUser(app, bot);
    const { apiKey } = await createBot(app);
    const viaBot = new BotClient({
      baseUrl: app.url,
      apiKey,
      guildApiUrl: `${guildHost}/`,
      headers: { 'x-forwarded-for': nextIp() },
      fetch: fetchVia,
    });
    const client = new ParlorClient({
      baseUrl: app.url,
      guildApiUrl: `${guildHost}/`,
      session: owner.client.session,
      headers: { 'x-forwarded-for': nextIp() },
      fetch: fetchVia,
    });
    expect(client.guildApiUrl).toBe(guildHost);
    expect(owner.client.guildApiUrl).toBe(app.url);

    const guildId = nextIdentity();
    await viaBot.upsertGuild(guildId, {
      name: 'Elsewhere',
      member_count: 3,
      owner_chatplatform_id: owner.platformUserId,
    });
    expect((await client.guilds()).map((g) => g.chatplatform_id)).toEqual([guildId]);
    expect((await client.getGuild(guildId)).chatplatform_id).toBe(guildId);
    expect((await client.updateRoomSettings(guildId, { proxy: 'eu' })).proxy).toBe('eu');
    expect(sent).toEqual([
      `${guildHost}/v1/bot/guilds/${guildId}`,
      `${app.url}/v1/users/me/guilds`,
      `${guildHost}/v1/guilds/${guildId}`,
      `${guildHost}/v1/guilds/${guildId}/room-settings`,
    ]);
  });
});
