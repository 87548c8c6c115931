import { Limits } from '@parlor/protocol';
import { generateKeyPair, publicKeyToBase64 } from '@parlor/sdk';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { STRANGER_GRACE_MS } from '../src/modules/auth/auth.service.js';
import { FakeClock } from '../src/platform/clock.js';
import { RETENTION_MS } from '../src/wiring/retention.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { join, member, sessionIdOf } from './support/chat-flows.js';
import { Client, nextIp } from './support/client.js';
import { countRows } from './support/faults.js';
import { createBot, login, setLevel } from './support/flows.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
const clock = new FakeClock(Date.now());

beforeAll(async () => {
  app = await startApp({ clock });
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

const run = (opts?: { batch?: number; maxBatches?: number }) => app.services.retention.run(opts);
const count = (from: string) => countRows(app, `select count(*) as n from ${from}`);

describeApp('data retention', () => {
  it('deletes a session 30 days after it ended, not before; live sessions stay', async () => {
    const ended = await login(app);
    const endedId = await sessionIdOf(app, ended.client);
    expect((await ended.client.post('/v1/authentication/logout', {})).status).toBe(200);
    clock.advance(RETENTION_MS.sessions - 1);
    const live = await login(app);
    const liveId = await sessionIdOf(app, live.client);
    await run();
    expect(await count(`sessions where id = ${endedId}`)).toBe(1);
    clock.advance(1);
    expect((await run()).sessions).toBe(1);
    expect(await count(`sessions where id = ${endedId}`)).toBe(0);
    expect(await count(`sessions where id = ${liveId}`)).toBe(1);
    expect((await live.client.get('/v1/users/me/sessions')).body.sessions).toHaveLength(1);
  });

  it('keeps a session that expired unended until the expiry sweep has ended it (its key out), then deletes it 30 days after its expiry', async () => {
    const user = await login(app);
    const id = await sessionIdOf(app, user.client);
    const key = publicKeyToBase64(generateKeyPair().publicKey);
    expect((await user.client.post('/v1/portal/keys', { public_key: key })).status).toBe(200);
    // A user session lives 30 days; it is over then. No socket and no request: nothing ended it.
    clock.advance(Limits.SESSION_TTL_USER_MS + RETENTION_MS.sessions);
    await run();
    // Left to the expiry sweep, which ends it as a logout does: a deletion here would take its key
    // by cascade, with no portal:key_removed and no new epoch for its chats.
    expect(await count(`sessions where id = ${id} and ended_at is null`)).toBe(1);
    expect(await count(`session_keys where session_id = ${id}`)).toBe(1);
    expect(await app.services.sessions.sweepExpired()).toBeGreaterThanOrEqual(1);
    expect(await count(`sessions where id = ${id} and end_reason = 'expired'`)).toBe(1);
    expect(await count(`session_keys where session_id = ${id}`)).toBe(0);
    // Over at its expiry, 30 days ago and more: the next run deletes it.
    await run();
    expect(await count(`sessions where id = ${id}`)).toBe(0);
  });

  it('keeps a stranger whose session expired unended until the expiry sweep has ended it, then sweeps it', async () => {
    const stranger = new Client(app.url, nextIp(), app.publicApiKey);
    const made = await stranger.post('/v1/portal/stranger', {});
    expect(made.status).toBe(200);
    const userId: number = made.body.user.id;
    const id = await sessionIdOf(app, stranger);
    clock.advance(Limits.SESSION_TTL_USER_MS + STRANGER_GRACE_MS + 1);
    expect(await app.services.auth.sweepStrangers()).not.toContain(userId);
    expect(await count(`sessions where id = ${id} and ended_at is null`)).toBe(1);
    expect(await app.services.sessions.sweepExpired()).toBeGreaterThanOrEqual(1);
    expect(await count(`sessions where id = ${id} and end_reason = 'expired'`)).toBe(1);
    expect(await app.services.auth.sweepStrangers()).toContain(userId);
    expect(await count(`users where id = ${userId}`)).toBe(0);
  });

  it('deletes each due row once when two sweeps run at the same instant (two nodes)', async () => {
    for (let i = 0; i < 5; i++) {
      const { client } = await login(app);
      expect((await client.post('/v1/authentication/logout', {})).status).toBe(200);
    }
    clock.advance(RETENTION_MS.sessions);
    const cutoff = new Date(clock.now().getTime() - RETENTION_MS.sessions).toISOString();
    // Ended sessions only: one that expired unended waits for the expiry sweep (above).
    const over = `sessions where ended_at is not null and least(ended_at, expires_at) <= '${cutoff}'`;
    const due = await count(over);
    expect(due).toBeGreaterThanOrEqual(5);
    // Batches of one, so that the two sweeps take turns over the same rows.
    const [a, b] = await Promise.all([run({ batch: 1 }), run({ batch: 1 })]);
    expect((a?.sessions ?? 0) + (b?.sessions ?? 0)).toBe(due);
    expect(await count(over)).toBe(0);
  });

  it('deletes notifications 90 days after their creation, read or not; newer ones stay', async () => {
    const old = await login(app);
    const oldUnread = `notifications where user_id = ${old.user.id} and read_at is null`;
    const written = await count(oldUnread);
    expect(written).toBeGreaterThan(0);
    clock.advance(RETENTION_MS.notifications - 1);
    const recent = await login(app);
    await run();
    expect(await count(oldUnread)).toBe(written);
    clock.advance(1);
    expect((await run()).notifications).toBe(written);
    expect(await count(`notifications where user_id = ${old.user.id}`)).toBe(0);
    expect(await count(`notifications where user_id = ${recent.user.id}`)).toBeGreaterThan(0);
    expect((await recent.client.get('/v1/notifications')).body.notifications.length).toBeGreaterThan(0);
  });

  it('deletes bot command reports 30 days after they were received, whatever their executed_at', async () => {
    await run();
    const bot = await createBot(app);
    const commands = [1, 2, 3].map((i) => ({ command: `c${i}`, executed_at: '9999-01-01T00:00:00Z' }));
    expect((await bot.client.post('/v1/bot/batch', { commands })).body).toEqual({ recorded: 3 });
    clock.advance(RETENTION_MS.botCommands - 1);
    expect((await run()).bot_commands).toBe(0);
    clock.advance(1);
    // Batches of 1, at most 2 a tick: the tick stops with a backlog, the next one takes the rest.
    expect((await run({ batch: 1, maxBatches: 2 })).bot_commands).toBe(2);
    expect((await run({ batch: 1, maxBatches: 2 })).bot_commands).toBe(1);
    expect(await count(`bot_commands where bot_id = ${bot.id}`)).toBe(0);
  });

  it('deletes membership history 90 days after the entry; the chat stays', async () => {
    const owner = await login(app);
    await setLevel(app, owner.user.id, 2);
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'kept', type: 'public' });
    expect(created.status).toBe(200);
    const chatId: number = created.body.chat.id;
    expect(await count(`chat_activity where chat_id = ${chatId}`)).toBe(1);
    clock.advance(RETENTION_MS.chatActivity - 1);
    await run();
    expect(await count(`chat_activity where chat_id = ${chatId}`)).toBe(1);
    clock.advance(1);
    await run();
    expect(await count(`chat_activity where chat_id = ${chatId}`)).toBe(0);
    expect(await count(`chats where id = ${chatId} and deleted_at is null`)).toBe(1);
  });

  it('deletes revoked, used-up and expired invites 30 days after they died; live invites stay', async () => {
    const owner = await member(app, { level: 2 });
    const created = await owner.client.post('/v1/portal/chats/create', { name: 'invites', type: 'public' });
    expect(created.status).toBe(200);
    const chatId: number = created.body.chat.id;
    const invite = async (body: object): Promise<string> => {
      const res = await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, body);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.invite.code;
    };
    const live = await invite({});
    const liveUsed = await invite({ max_uses: 2 });
    const usedUp = await invite({ max_uses: 1 });
    const revoked = await invite({});
    const expiring = await invite({ expires_in_seconds: 60 });
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/invites/${revoked}/delete`, {})).status).toBe(200);
    for (const code of [liveUsed, usedUp]) expect((await join(await member(app), { invite: code })).ok).toBe(true);
    /** The chat's invites still stored, in the order above. */
    const remaining = async () => {
      const kept: string[] = [];
      for (const code of [live, liveUsed, usedUp, revoked, expiring])
        if ((await count(`chat_invites where code = '${code}'`)) === 1) kept.push(code);
      expect(await count(`chat_invites where chat_id = ${chatId}`)).toBe(kept.length);
      return kept;
    };
    // Revoked and used up count from now (revocation, creation), the expired one from its expiry.
    clock.advance(RETENTION_MS.deadInvites - 1);
    await run();
    expect(await remaining()).toEqual([live, liveUsed, usedUp, revoked, expiring]);
    clock.advance(1);
    expect((await run()).chat_invites).toBe(2);
    expect(await remaining()).toEqual([live, liveUsed, expiring]);
    clock.advance(60_000 - 1);
    await run();
    expect(await remaining()).toEqual([live, liveUsed, expiring]);
    clock.advance(1);
    expect((await run()).chat_invites).toBe(1);
    // A year on, the live ones are still there, and still accepted.
    clock.advance(365 * 24 * 3600_000);
    expect((await run()).chat_invites).toBe(0);
    expect(await remaining()).toEqual([live, liveUsed]);
    expect((await join(await member(app), { invite: liveUsed })).ok).toBe(true);
  });

  it('keeps the audit log (the one-time Trial check reads it)', async () => {
    const before = await count('audit_log');
    expect(before).toBeGreaterThan(0);
    clock.advance(10 * 365 * 24 * 3600_000);
    await run();
    expect(await count('audit_log')).toBe(before);
  });
});
