import { generateKeyPair, publicKeyToBase64 } from '@parlor/sdk';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { sessionIdOf } from './support/chat-flows.js';
import { login } from './support/flows.js';
import { hold, lockWaiters } from './support/pg-locks.js';
import { closeAllSockets } from './support/sockets.js';

let app: TestApp;
let pg: postgres.Sql;
beforeAll(async () => {
  app = await startApp();
  if (app.config.databaseUrl) pg = postgres(app.config.databaseUrl, { max: 3, onnotice: () => {} });
});
afterAll(async () => {
  closeAllSockets();
  await pg?.end({ timeout: 1 });
  await app?.close();
});

// PGlite runs one transaction at a time, so nothing interleaves there; on PostgreSQL the test holds
// the session row as a logout in another tab does and waits on pg_stat_activity.
describeApp('a key registration that waits on a session end', () => {
  it.skipIf(MODE === 'embedded')(
    'stores no key for a session that ended while the registration waited (spec 2.9: removed when the session ends)',
    async () => {
      const who = await login(app);
      const sessionId = await sessionIdOf(app, who.client);
      const publicKey = publicKeyToBase64(generateKeyPair().publicKey);
      // What a logout of this session (another tab with the same cookie) writes, held open: the
      // session row ended, its keys removed (none yet).
      const logout = hold(pg, async (tx) => {
        await tx`update sessions set ended_at = now(), end_reason = 'logout' where id = ${sessionId}`;
        await tx`delete from session_keys where session_id = ${sessionId}`;
      });
      await logout.ready;
      // The registration passed its guard (the session was live) and waits on the session row.
      const reg = who.client.post('/v1/portal/keys', { public_key: publicKey });
      await Promise.race([reg, lockWaiters(pg, 1)]);
      await logout.end();
      const answer = await reg;
      expect(answer.status).toBe(401);
      expect(answer.body.code).toBe('ERR_UNAUTHENTICATED');
      const rows = await pg<
        { n: number }[]
      >`select count(*)::int as n from session_keys where session_id = ${sessionId}`;
      const held = await pg<
        { n: number }[]
      >`select count(*)::int as n from session_keys where public_key = ${publicKey}`;
      // The ended session holds no key row, nor reserves the key for 30 days (unique index).
      expect({ keyRowsOfEndedSession: rows[0]?.n, rowsHoldingKey: held[0]?.n }).toEqual({
        keyRowsOfEndedSession: 0,
        rowsHoldingKey: 0,
      });
    },
  );
});
