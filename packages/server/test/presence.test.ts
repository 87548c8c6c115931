import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { join, keyedChat, member } from './support/chat-flows.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);

describeApp('presence in a chat', () => {
  it('gives a joiner the whole list, one entry per connected session, in its ack and room:members', async () => {
    const { owner, chatId } = await keyedChat(app);
    const g1 = await member(app);
    const g2 = await member(app, { platformUserId: g1.platformUserId });
    await join(g1, { chat_id: chatId });
    const ack = await join(g2, { chat_id: chatId });
    const expected = sorted([owner.sessionId, g1.sessionId, g2.sessionId]);
    expect(sorted(ack.members.map((m: any) => m.session_id))).toEqual(expected);
    const list = await g2.socket.next('room:members', (e) => e.chat_id === chatId);
    expect(sorted(list.members.map((m: any) => m.session_id))).toEqual(expected);
    expect(list.members).toContainEqual({ user_id: g1.user.id, session_id: g2.sessionId, username: g1.user.username });
  });

  it('tells the others of a join and a disconnect by portal:presence only, never the whole list', async () => {
    const { owner, chatId } = await keyedChat(app);
    const guest = await member(app);
    await join(guest, { chat_id: chatId });
    await owner.socket.next(
      'portal:presence',
      (e) => e.chat_id === chatId && e.session_id === guest.sessionId && e.online === true,
    );
    expect((await owner.socket.next('portal:presence', (e) => e.session_id === guest.sessionId)).user_id).toBe(
      guest.user.id,
    );
    guest.socket.close();
    await owner.socket.next('portal:presence', (e) => e.session_id === guest.sessionId && e.online === false);
    // Both changes have reached the owner; a member list sent with either would have come first.
    // (The owner's only list is its own, from when it joined: itself alone.)
    const lists = owner.socket.received.filter((r) => r.event === 'room:members' && r.payload.chat_id === chatId);
    expect(lists.map((r) => r.payload.members.map((m: any) => m.session_id))).toEqual([[owner.sessionId]]);
  });

  it('says a member who leaves is no longer present, for each of its sessions in the room', async () => {
    const { owner, chatId } = await keyedChat(app);
    const g1 = await member(app);
    const g2 = await member(app, { platformUserId: g1.platformUserId });
    await join(g1, { chat_id: chatId });
    await join(g2, { chat_id: chatId });
    expect(await g1.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    for (const sessionId of [g1.sessionId, g2.sessionId]) {
      expect(
        await owner.socket.next('portal:presence', (e) => e.session_id === sessionId && e.online === false),
      ).toEqual({ chat_id: chatId, user_id: g1.user.id, session_id: sessionId, online: false });
    }
  });

  it('says nothing when a socket enters a room it is already in', async () => {
    const { owner, chatId } = await keyedChat(app);
    const g1 = await member(app);
    const g2 = await member(app);
    await join(g1, { chat_id: chatId });
    await owner.socket.next('portal:presence', (e) => e.session_id === g1.sessionId && e.online === true);
    for (let i = 0; i < 3; i += 1) expect((await join(g1, { chat_id: chatId })).ok).toBe(true);
    // g2's join comes after the repeats; once its delta is here, any delta of theirs would be too.
    await join(g2, { chat_id: chatId });
    await owner.socket.next('portal:presence', (e) => e.session_id === g2.sessionId && e.online === true);
    const deltas = owner.socket.received.filter(
      (r) => r.event === 'portal:presence' && r.payload.chat_id === chatId && r.payload.session_id !== owner.sessionId,
    );
    expect(deltas.map((r) => r.payload.session_id)).toEqual([g1.sessionId, g2.sessionId]);
  });
});
