import { INT32_MAX, KEY_SHARE_BODY_MAX_BYTES, Limits } from '@parlor/protocol';
import { generateKeyPair, publicKeyToBase64 } from '@parlor/sdk';
import { and, count, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { schema } from '../src/platform/db/index.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { bulkMembers } from './support/bulk.js';
import { join, keyEpoch, keyedChat, type Member, member, sessionIdOf, shareKey } from './support/chat-flows.js';
import { login } from './support/flows.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
beforeAll(async () => {
  app = await startApp();
});
afterAll(async () => {
  closeAllSockets();
  await app?.close();
});

const MAX = Limits.KEY_SHARE_ENVELOPES_MAX;
/** A stand-in envelope of the real size (104 bytes, 140 characters); the server never opens one. */
const wrapped = (n: number) => Buffer.alloc(104, n % 256).toString('base64');
const share = (m: Member, chatId: number, body: unknown) =>
  m.client.post(`/v1/portal/chats/${chatId}/keys/share`, body);
const envelopesFor = (sessionIds: number[]) =>
  sessionIds.map((session_id) => ({ session_id, wrapped: wrapped(session_id) }));
const answer = (res: { status: number; body: any }) => [res.status, res.body?.code ?? res.body];

async function storedAt(chatId: number, epoch: number): Promise<number> {
  const [row] = await app.database.db
    .select({ n: count() })
    .from(schema.keyEnvelopes)
    .where(and(eq(schema.keyEnvelopes.chatId, chatId), eq(schema.keyEnvelopes.epoch, epoch)));
  return Number(row?.n ?? 0);
}

describeApp('POST /v1/portal/chats/{chat_id}/keys/share: integers the integer columns hold', () => {
  it(`takes an epoch up to ${INT32_MAX} (403 ERR_EPOCH_MISMATCH as any other); ${INT32_MAX + 1} is 400 ERR_VALIDATION`, async () => {
    const { owner, chatId } = await keyedChat(app);
    const at = (epoch: number) => share(owner, chatId, { epoch, envelopes: envelopesFor([owner.sessionId]) });
    expect(answer(await at(INT32_MAX))).toEqual([403, 'ERR_EPOCH_MISMATCH']);
    expect(answer(await at(INT32_MAX + 1))).toEqual([400, 'ERR_VALIDATION']);
    expect(answer(await at(3_000_000_000))).toEqual([400, 'ERR_VALIDATION']);
  });

  it(`takes a session id up to ${INT32_MAX} (409 ERR_KEY_RING_CHANGED: no such session); ${INT32_MAX + 1} is 400`, async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const to = (sessionId: number) => share(owner, chatId, { epoch, envelopes: envelopesFor([sessionId]) });
    expect(answer(await to(INT32_MAX))).toEqual([409, 'ERR_KEY_RING_CHANGED']);
    expect(answer(await to(INT32_MAX + 1))).toEqual([400, 'ERR_VALIDATION']);
  });

  it('answers 400 ERR_VALIDATION naming body/envelopes to two envelopes for one session, storing nothing', async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const before = await storedAt(chatId, epoch);
    const res = await share(owner, chatId, { epoch, envelopes: envelopesFor([owner.sessionId, owner.sessionId]) });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      code: 'ERR_VALIDATION',
      errors: [{ path: 'body/envelopes', message: expect.any(String) }],
    });
    expect(await storedAt(chatId, epoch)).toBe(before);
  });

  it('answers two envelopes for one session 400 ERR_VALIDATION before anything else is looked at', async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const keyless = await login(app, { platformUserId: owner.platformUserId });
    const outsider = await member(app);
    const twice = envelopesFor([owner.sessionId, owner.sessionId]);
    // Each of these is refused otherwise with one envelope per session: a later epoch (403
    // ERR_EPOCH_MISMATCH), a caller without a key (409 ERR_NO_SESSION_KEY), a non-member (403
    // ERR_NOT_CHAT_MEMBER), no such chat (404 ERR_CHAT_NOT_FOUND).
    const cases: [{ client: Member['client'] }, number, number][] = [
      [owner, chatId, epoch + 1],
      [keyless, chatId, epoch],
      [outsider, chatId, epoch],
      [owner, INT32_MAX, epoch],
    ];
    for (const [who, id, at] of cases) {
      const res = await who.client.post(`/v1/portal/chats/${id}/keys/share`, { epoch: at, envelopes: twice });
      expect([res.status, res.body.code, res.body.errors?.[0]?.path]).toEqual([
        400,
        'ERR_VALIDATION',
        'body/envelopes',
      ]);
    }
    expect(await storedAt(chatId, epoch)).toBe(1);
  });

  it('GET …/keys takes no query: an epoch there is refused 400 ERR_VALIDATION (unknown parameter), never out of range', async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const res = await owner.client.get(`/v1/portal/chats/${chatId}/keys?epoch=3000000000`);
    expect(res.status).toBe(400);
    expect(res.body.errors).toEqual([{ path: 'querystring/epoch', message: 'is not a known field' }]);
    expect((await owner.client.get(`/v1/portal/chats/${chatId}/keys`)).body.epoch).toBe(epoch);
  });
});

describeApp('POST /v1/portal/chats/{chat_id}/keys/share: body size', () => {
  it(`takes the largest body its schema admits (${KEY_SHARE_BODY_MAX_BYTES} bytes); one byte more is 413`, async () => {
    const { owner, chatId } = await keyedChat(app);
    const largest = JSON.stringify({
      epoch: INT32_MAX,
      // One envelope per session: ids of as many digits as the largest.
      envelopes: Array.from({ length: MAX }, (_, i) => ({
        session_id: INT32_MAX - i,
        wrapped: 'A'.repeat(Limits.ENVELOPE_MAX_CHARS),
      })),
    });
    expect(largest.length).toBe(KEY_SHARE_BODY_MAX_BYTES);
    expect(largest.length).toBeGreaterThan(Limits.BODY_LIMIT_BYTES);
    const path = `/v1/portal/chats/${chatId}/keys/share`;
    // Through the size limit and the schema to the rules: the epoch is not the chat's.
    expect(answer(await owner.client.post(path, undefined, { raw: largest }))).toEqual([403, 'ERR_EPOCH_MISMATCH']);
    expect(answer(await owner.client.post(path, undefined, { raw: `${largest} ` }))).toEqual([
      413,
      'ERR_PAYLOAD_TOO_LARGE',
    ]);
    // Every other route keeps the general limit.
    const big = JSON.stringify({ content: 'x'.repeat(Limits.BODY_LIMIT_BYTES) });
    const message = await owner.client.post(`/v1/portal/chats/${chatId}/messages`, undefined, { raw: big });
    expect(answer(message)).toEqual([413, 'ERR_PAYLOAD_TOO_LARGE']);
  });
});

describeApp('keying a key ring larger than one request', () => {
  it(`a ring of ${MAX} sessions is keyed by one share of all of them, never fewer`, async () => {
    const owner = await member(app, { level: 2 });
    const chatId = (await owner.client.post('/v1/portal/chats/create', { name: 'Exact', type: 'public' })).body.chat.id;
    expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
    const others = await bulkMembers(app, chatId, { users: MAX - 1, perUser: 1 });
    const ring = [owner.sessionId, ...others.map((s) => s.sessionId)];
    expect(
      Object.values((await owner.client.get(`/v1/portal/chats/${chatId}/keys`)).body.key_ring).flatMap((s) =>
        Object.keys(s as object),
      ),
    ).toHaveLength(MAX);
    const short = share(owner, chatId, { epoch: 1, envelopes: envelopesFor(ring.slice(0, MAX - 1)) });
    expect(answer(await short)).toEqual([409, 'ERR_KEY_RING_CHANGED']);
    expect((await share(owner, chatId, { epoch: 1, envelopes: envelopesFor(ring) })).body).toEqual({
      epoch: 1,
      stored: MAX,
    });
  });

  it(`a ring of more: the first ${MAX}, the caller's among them, key it; holders top up the rest`, async () => {
    const owner = await member(app, { level: 2 });
    const chatId = (await owner.client.post('/v1/portal/chats/create', { name: 'Large', type: 'public' })).body.chat.id;
    expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    // Users with several sessions, as the ring counts sessions: MAX + 2 with the owner and the guest.
    const others = await bulkMembers(app, chatId, { users: MAX / 5, perUser: 5 });
    const bulk = others.map((s) => s.sessionId);
    const ring = [owner.sessionId, guest.sessionId, ...bulk];
    const listed = (await owner.client.get(`/v1/portal/chats/${chatId}/keys`)).body.key_ring;
    expect(Object.values(listed).flatMap((sessions) => Object.keys(sessions as object))).toHaveLength(MAX + 2);

    // More than one request carries: refused by the schema.
    expect(answer(await share(owner, chatId, { epoch: 1, envelopes: envelopesFor(ring.slice(0, MAX + 1)) }))).toEqual([
      400,
      'ERR_VALIDATION',
    ]);
    // A full request without the caller's own session, or one short of full: not a keying share.
    const withoutSelf = envelopesFor([guest.sessionId, ...bulk].slice(0, MAX));
    expect(answer(await share(owner, chatId, { epoch: 1, envelopes: withoutSelf }))).toEqual([
      409,
      'ERR_KEY_RING_CHANGED',
    ]);
    const shortOfFull = envelopesFor([owner.sessionId, ...bulk].slice(0, MAX - 1));
    expect(answer(await share(owner, chatId, { epoch: 1, envelopes: shortOfFull }))).toEqual([
      409,
      'ERR_KEY_RING_CHANGED',
    ]);
    expect(await storedAt(chatId, 1)).toBe(0);

    // A full request with the caller's session keys the epoch.
    const first = envelopesFor([owner.sessionId, ...bulk].slice(0, MAX));
    expect((await share(owner, chatId, { epoch: 1, envelopes: first })).body).toEqual({ epoch: 1, stored: MAX });
    // The guest, left out of it, cannot key the epoch over it.
    const grab = await share(guest, chatId, { epoch: 1, envelopes: envelopesFor([guest.sessionId]) });
    expect(answer(grab)).toEqual([409, 'ERR_EPOCH_ALREADY_KEYED']);
    // The keyer, a holder now, tops up the rest; the guest gets its envelope.
    const rest = envelopesFor([guest.sessionId, ...bulk.slice(MAX - 1)]);
    expect(rest).toHaveLength(2);
    expect((await share(owner, chatId, { epoch: 1, envelopes: rest })).body).toEqual({ epoch: 1, stored: 2 });
    expect(await storedAt(chatId, 1)).toBe(MAX + 2);
    expect(await guest.socket.next('room:key', (e) => e.chat_id === chatId)).toMatchObject({
      epoch: 1,
      envelope: wrapped(guest.sessionId),
    });
    expect((await guest.client.get(`/v1/portal/chats/${chatId}/keys`)).body.envelope).toBe(wrapped(guest.sessionId));
  });
});

const freshKey = () => publicKeyToBase64(generateKeyPair().publicKey);
const register = (m: { client: Member['client'] }, public_key: string) =>
  m.client.post('/v1/portal/keys', { public_key });
/** The sessions whose key row holds this public key. */
async function holdersOf(publicKey: string): Promise<number[]> {
  const rows = await app.database.db
    .select({ id: schema.sessionKeys.sessionId })
    .from(schema.sessionKeys)
    .where(eq(schema.sessionKeys.publicKey, publicKey));
  return rows.map((r) => r.id);
}
const epochOf = async (m: Member, chatId: number): Promise<number> =>
  (await m.client.get(`/v1/portal/chats/${chatId}`)).body.chat.epoch;

describeApp('POST /v1/portal/keys: one session per public key', () => {
  it("answers the caller's session id, with unchanged for its own identical key", async () => {
    const m = await member(app);
    const again = await register(m, publicKeyToBase64(m.keys.publicKey));
    expect([again.status, again.body]).toEqual([200, { status: 'unchanged', session_id: m.sessionId }]);
    const fresh = await login(app);
    const res = await register(fresh, freshKey());
    expect(res.body).toEqual({ status: 'registered', session_id: await sessionIdOf(app, fresh.client) });
  });

  it("refuses another session's key with 409 ERR_PUBLIC_KEY_IN_USE (any user's, its own user's too) and changes nothing", async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const victim = await member(app);
    const attacker = await member(app);
    for (const m of [victim, attacker]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    const victimKey = publicKeyToBase64(victim.keys.publicKey);
    const attackerKey = publicKeyToBase64(attacker.keys.publicKey);
    // The key is public (key rings, portal:key_added): another user's session, a session of its own
    // user, and a session with no key yet all try to register it.
    const ownUser = await login(app, { platformUserId: victim.platformUserId });
    const keyless = await login(app);
    for (const who of [attacker, ownUser, keyless]) {
      const res = await register(who, victimKey);
      expect([res.status, res.body.code]).toEqual([409, 'ERR_PUBLIC_KEY_IN_USE']);
    }
    expect(await holdersOf(victimKey)).toEqual([victim.sessionId]);
    expect(await holdersOf(attackerKey)).toEqual([attacker.sessionId]);
    const state = await owner.client.get(`/v1/portal/chats/${chatId}/keys`);
    expect(state.body.epoch).toBe(epoch);
    const listed = Object.values(state.body.key_ring as Record<string, Record<string, string>>).flatMap((sessions) =>
      Object.entries(sessions).filter(([, key]) => key === victimKey),
    );
    expect(listed).toEqual([[String(victim.sessionId), victimKey]]);
  });

  it('refuses a key not written as X25519 writes it (400 ERR_VALIDATION): another session cannot register a key under another text', async () => {
    const { owner, chatId } = await keyedChat(app);
    const victim = await member(app);
    const attacker = await member(app);
    for (const m of [victim, attacker]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    const victimKey = publicKeyToBase64(victim.keys.publicKey);
    // RFC 7748 section 5 ignores the top bit of the last byte: this is the victim's key.
    const raw = Buffer.from(victimKey, 'base64');
    raw[31] = (raw[31] ?? 0) | 0x80;
    const alias = raw.toString('base64');
    // u = 2^255 - 10 is u = 9 reduced modulo 2^255 - 19: a usable key, but no X25519 output.
    const unreduced = Buffer.concat([Buffer.from([0xf6]), Buffer.alloc(30, 0xff), Buffer.from([0x7f])]).toString(
      'base64',
    );
    const cases: [Member, string][] = [
      [attacker, alias],
      [victim, alias],
      [attacker, unreduced],
    ];
    for (const [who, key] of cases) {
      const res = await register(who, key);
      expect([res.status, res.body.code, res.body.errors?.[0]?.path]).toEqual([
        400,
        'ERR_VALIDATION',
        'body/public_key',
      ]);
    }
    expect(await holdersOf(alias)).toEqual([]);
    expect(await holdersOf(unreduced)).toEqual([]);
    expect(await holdersOf(victimKey)).toEqual([victim.sessionId]);
    const ring = (await owner.client.get(`/v1/portal/chats/${chatId}/keys`)).body.key_ring;
    expect(ring[String(attacker.user.id)]).toEqual({
      [String(attacker.sessionId)]: publicKeyToBase64(attacker.keys.publicKey),
    });
    expect(ring[String(victim.user.id)]).toEqual({ [String(victim.sessionId)]: victimKey });
  });

  it('of two sessions registering one key at once, one gets it and the other 409', async () => {
    const [one, two] = [await login(app), await login(app)];
    const key = freshKey();
    const answers = await Promise.all([register(one, key), register(two, key)]);
    expect(answers.map((r) => [r.status, r.body.status ?? r.body.code]).sort()).toEqual([
      [200, 'registered'],
      [409, 'ERR_PUBLIC_KEY_IN_USE'],
    ]);
    expect(await holdersOf(key)).toHaveLength(1);
  });
});

/** A matched direct chat of two fresh members, both in its room, keyed by `a`; `b` holds the key. */
async function directChat(): Promise<{ a: Member; b: Member; chatId: number; epoch: number }> {
  const [a, b] = [await member(app), await member(app)];
  const made = await app.services.chats.createDirect([a.user.id, b.user.id], ['keys']);
  if ('refused' in made) throw new Error(`direct chat refused: ${JSON.stringify(made.refused)}`);
  const chatId = made.chat.id;
  for (const m of [a, b]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
  const { epoch } = await keyEpoch(a, chatId);
  return { a, b, chatId, epoch };
}

describeApp('keys in an archived direct chat (read-only)', () => {
  it('a share there is 403 ERR_CHAT_READ_ONLY and stores nothing', async () => {
    const { a, b, chatId, epoch } = await directChat();
    expect((await a.client.post('/v1/portal/match/leave', {})).status).toBe(200);
    expect((await b.client.get(`/v1/portal/chats/${chatId}`)).body.chat.archived).toBe(true);
    // A new session of b's is in the ring; b holds the key and tops it up.
    const device = await member(app, { platformUserId: b.platformUserId });
    const before = await storedAt(chatId, epoch);
    const res = await share(b, chatId, { epoch, envelopes: envelopesFor([device.sessionId]) });
    expect(answer(res)).toEqual([403, 'ERR_CHAT_READ_ONLY']);
    expect(await storedAt(chatId, epoch)).toBe(before);
    expect((await device.client.get(`/v1/portal/chats/${chatId}/keys`)).body).toMatchObject({ epoch, envelope: null });
  });

  it("a key replaced or removed raises the epoch of the user's active chats, not of an archived one", async () => {
    const { a, b, chatId: direct, epoch } = await directChat();
    const pub = await keyedChat(app);
    expect((await join(a, { chat_id: pub.chatId })).ok).toBe(true);
    expect((await b.client.post('/v1/portal/match/leave', {})).status).toBe(200);

    expect((await register(a, freshKey())).body.status).toBe('registered'); // replaced
    expect(await epochOf(a, pub.chatId)).toBe(pub.epoch + 1);
    expect(await epochOf(a, direct)).toBe(epoch);

    const device = await member(app, { platformUserId: a.platformUserId });
    const destroyed = await a.client.post(`/v1/users/me/sessions/${device.client.cookie?.slice(-6)}/destroy`, {});
    expect(destroyed.status).toBe(200); // its key removed
    expect(await epochOf(a, pub.chatId)).toBe(pub.epoch + 2);
    expect(await epochOf(a, direct)).toBe(epoch);
    // b still reads the archived chat at the epoch whose key it holds.
    expect((await b.client.get(`/v1/portal/chats/${direct}/keys`)).body).toMatchObject({
      epoch,
      envelope: expect.any(String),
    });
  });
});

describeApp('envelopes of past epochs', () => {
  it("keying an epoch deletes the chat's envelopes of earlier epochs (nothing reads them); until then they stay", async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    await shareKey(owner, { chatId, chatKey, epoch }, [guest]);
    expect(await storedAt(chatId, epoch)).toBe(2);
    expect(await guest.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    expect(await epochOf(owner, chatId)).toBe(epoch + 1);
    expect(await storedAt(chatId, epoch)).toBe(2);

    await keyEpoch(owner, chatId);
    expect(await storedAt(chatId, epoch)).toBe(0);
    expect(await storedAt(chatId, epoch + 1)).toBe(1);
  });
});

describeApp('refused key writes spend nothing (docs/api.md, Write limit)', () => {
  it(`a key and a share refused 400 ERR_VALIDATION by their checks give their write back: all ${Limits.WRITES_PER_USER} are left`, async () => {
    const who = await login(app);
    // A low-order point passes the schema; so does a share naming one session twice (to no chat:
    // the body is refused before the chat is looked for).
    const lowOrder = Buffer.alloc(32).toString('base64');
    const twice = { epoch: 1, envelopes: envelopesFor([1, 1]) };
    for (let i = 0; i < Limits.WRITES_PER_USER; i += 1) {
      const res =
        i % 2
          ? await register(who, lowOrder)
          : await who.client.post(`/v1/portal/chats/${INT32_MAX}/keys/share`, twice);
      expect([res.status, res.body.code], `refusal ${i + 1}`).toEqual([400, 'ERR_VALIDATION']);
    }
    for (let i = 1; i < Limits.WRITES_PER_USER; i += 1) {
      expect((await who.client.post('/v1/notifications/read-all', {})).status, `write ${i}`).toBe(200);
    }
    // The last write of the window is still there, and then none is.
    expect((await register(who, freshKey())).body.status).toBe('registered');
    expect(answer(await register(who, freshKey()))).toEqual([429, 'ERR_RATE_LIMITED']);
  });
});

/** The session ids a chat's key ring lists, as `m` reads it, in order. */
async function ringSessions(m: Member, chatId: number): Promise<number[]> {
  const ring = (await m.client.get(`/v1/portal/chats/${chatId}/keys`)).body.key_ring as Record<
    string,
    Record<string, string>
  >;
  return Object.values(ring)
    .flatMap((sessions) => Object.keys(sessions).map(Number))
    .sort((x, y) => x - y);
}

describeApp('key rings, envelopes and their events', () => {
  it("lists members' live keyed sessions only: not those of left, kicked or banned members, nor an expired one", async () => {
    const { owner, chatId } = await keyedChat(app);
    const [left, kicked, banned, kept] = [await member(app), await member(app), await member(app), await member(app)];
    for (const m of [left, kicked, banned, kept]) expect((await join(m, { chat_id: chatId })).ok).toBe(true);
    // A second keyed session of `kept`, without a socket, whose expiry passes before any sweep.
    const late = await login(app, { platformUserId: kept.platformUserId });
    expect((await register(late, freshKey())).status).toBe(200);
    const lateId = await sessionIdOf(app, late.client);
    expect(await ringSessions(owner, chatId)).toContain(lateId);
    expect(await left.socket.emitWithAck('room:leave', { chat_id: chatId })).toEqual({ ok: true });
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/kick`, { user_id: kicked.user.id })).status).toBe(200);
    expect((await owner.client.post(`/v1/portal/chats/${chatId}/ban`, { user_id: banned.user.id })).status).toBe(200);
    await app.database.db.execute(
      sql.raw(`update sessions set expires_at = now() - interval '1 second' where id = ${lateId}`),
    );
    expect(await ringSessions(owner, chatId)).toEqual([owner.sessionId, kept.sessionId].sort((x, y) => x - y));
    // A former member reads no ring any more.
    expect(answer(await left.client.get(`/v1/portal/chats/${chatId}/keys`))).toEqual([403, 'ERR_NOT_CHAT_MEMBER']);
  });

  it(`takes envelopes of up to ${Limits.ENVELOPE_MAX_CHARS} characters; one more is 400 ERR_VALIDATION`, async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    const to = (text: string) =>
      share(owner, chatId, { epoch, envelopes: [{ session_id: guest.sessionId, wrapped: text }] });
    expect(answer(await to('A'.repeat(Limits.ENVELOPE_MAX_CHARS + 1)))).toEqual([400, 'ERR_VALIDATION']);
    expect((await to('A'.repeat(Limits.ENVELOPE_MAX_CHARS))).body).toEqual({ epoch, stored: 1 });
  });

  it('sends room:key to the recipient session only, not to other sessions of its user', async () => {
    const { owner, chatId, chatKey, epoch } = await keyedChat(app);
    const guest = await member(app);
    const device = await member(app, { platformUserId: guest.platformUserId });
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    await shareKey(owner, { chatId, chatKey, epoch }, [guest]);
    expect(await guest.socket.next('room:key', (e) => e.chat_id === chatId)).toMatchObject({
      epoch,
      sender_session_id: owner.sessionId,
    });
    // A barrier: a key shared afterwards to the device's own session, by the same path (room:key to
    // a session's room). Once it has arrived, a room:key for the guest's session would have too.
    expect((await join(device, { chat_id: chatId })).ok).toBe(true);
    await shareKey(owner, { chatId, chatKey, epoch }, [device]);
    const { envelope } = (await device.client.get(`/v1/portal/chats/${chatId}/keys`)).body;
    expect(envelope).toEqual(expect.any(String));
    await device.socket.next('room:key', (e) => e.chat_id === chatId && e.envelope === envelope);
    expect(device.socket.received.filter((r) => r.event === 'room:key').map((r) => r.payload)).toEqual([
      { chat_id: chatId, epoch, envelope, sender_session_id: owner.sessionId },
    ]);
  });

  it('announces a first key without a new epoch, and the identical key again not at all', async () => {
    const { owner, chatId, epoch } = await keyedChat(app);
    const guest = await member(app);
    expect((await join(guest, { chat_id: chatId })).ok).toBe(true);
    const device = await login(app, { platformUserId: guest.platformUserId });
    const key = freshKey();
    expect((await register(device, key)).body.status).toBe('registered');
    const deviceId = await sessionIdOf(app, device.client);
    await owner.socket.next('portal:key_added', (e) => e.session_id === deviceId);
    expect((await register(device, key)).body.status).toBe('unchanged');
    // A barrier: a first key of a third session of the user, announced afterwards by the same path
    // (to the chat's room). Once the owner has it, anything the unchanged key set off has come too.
    const third = await login(app, { platformUserId: guest.platformUserId });
    expect((await register(third, freshKey())).body.status).toBe('registered');
    const thirdId = await sessionIdOf(app, third.client);
    await owner.socket.next('portal:key_added', (e) => e.session_id === thirdId);
    const heard = owner.socket.received.filter(
      (r) => (r.event === 'portal:key_added' && r.payload.session_id === deviceId) || r.event === 'room:rekey',
    );
    expect(heard.map((r) => r.event)).toEqual(['portal:key_added']);
    expect(await epochOf(owner, chatId)).toBe(epoch);
  });
});
