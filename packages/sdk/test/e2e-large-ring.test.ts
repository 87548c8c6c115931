import { Limits } from '@parlor/protocol';
import { and, count, eq } from 'drizzle-orm';
import { expect, it } from 'vitest';
import { schema } from '../../server/src/platform/db/index.js';
import { describeApp, type TestApp } from '../../server/test/support/app.js';
import { bulkMembers } from '../../server/test/support/bulk.js';
import type { BotClient, E2ESessionError } from '../src/index.js';
import { collector, e2eSuite, loginUser, openSession } from './support.js';

let app: TestApp;
let bot: BotClient;
e2eSuite((started) => {
  ({ app, bot } = started);
});

describeApp('E2EChatSession with a key ring larger than one share request', () => {
  it(`keys a new epoch for more than ${Limits.KEY_SHARE_ENVELOPES_MAX} sessions: one keying request, then top-ups`, async () => {
    const alice = await openSession((await loginUser(app, bot, { level: 2 })).client);
    const bob = await openSession((await loginUser(app, bot)).client);
    const errors: E2ESessionError[] = [];
    for (const s of [alice, bob]) s.on('error', (e) => errors.push(e));
    const { chat } = await alice.client.createChat({ name: 'Crowded', type: 'public' });
    await alice.join({ chat_id: chat.id });
    await bob.join({ chat_id: chat.id });
    // Members whose sessions have keys but no client (written to the database): 101 users × 5.
    await bulkMembers(app, chat.id, { users: Limits.KEY_SHARE_ENVELOPES_MAX / 5 + 1, perUser: 5 });
    const ringSize = Limits.KEY_SHARE_ENVELOPES_MAX + 5 + 2;

    // A member leaves: a new epoch, keyed by alice or bob for the whole ring.
    const carol = await openSession((await loginUser(app, bot)).client);
    await carol.join({ chat_id: chat.id });
    const before = (await alice.client.chatKey(chat.id)).epoch;
    await carol.leave(chat.id);
    const inbox = collector(alice, chat.id);
    const sent = await bob.send(chat.id, 'to a crowded room');
    expect(sent.epoch).toBe(before + 1);
    const [entry] = await inbox.waitFor(1, (e) => e.kind === 'user' && e.message.id === sent.id);
    expect(entry).toMatchObject({ kind: 'user', plaintext: 'to a crowded room' });

    // The first request's envelopes key the epoch (the send above used it); the top-ups for the
    // rest of the ring may still be on their way: every session of the ring gets its envelope.
    const envelopes = async () => {
      const [row] = await app.database.db
        .select({ n: count() })
        .from(schema.keyEnvelopes)
        .where(and(eq(schema.keyEnvelopes.chatId, chat.id), eq(schema.keyEnvelopes.epoch, sent.epoch)));
      return Number(row?.n);
    };
    const deadline = Date.now() + 30_000;
    while ((await envelopes()) < ringSize && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(await envelopes()).toBe(ringSize);
    expect(errors).toEqual([]);
    // Wrapping some 500 envelopes takes seconds of CPU per keying client, on a shared machine.
  }, 90_000);
});
