import { afterEach, expect, it } from 'vitest';
import type { RedisState } from '../src/platform/state/index.js';
import { describeApp, MODE, startApp, type TestApp } from './support/app.js';
import { Client, nextIp } from './support/client.js';
import { type CapturedLog, captureLog, LEVEL } from './support/logs.js';

/**
 * A node whose own connection to a store is gone answers 503 with Retry-After, and logs one warn
 * line per request, not an error with a stack. Only this test's app loses its connections (its own
 * clients are closed); the machine's PostgreSQL and Redis keep running. Embedded stores have no
 * connection to lose.
 */
describeApp('a store that cannot be reached', () => {
  let app: TestApp | null = null;
  let logs: CapturedLog;
  afterEach(async () => {
    await app?.close();
    app = null;
  });

  const start = async () => {
    logs = captureLog();
    app = await startApp({ logger: logs.log });
    return app;
  };

  /** A login request: it takes a per-address limit in Redis and reads the identity in SQL. */
  const requestCode = (node: TestApp) =>
    new Client(node.url, nextIp(), node.publicApiKey).post('/v1/authentication/request', {
      platform: 'platform_a',
      platform_user_id: '424242',
    });

  it.skipIf(MODE !== 'cluster')('answers 503 ERR_SERVICE_UNAVAILABLE with Retry-After when Redis is lost', async () => {
    const node = await start();
    (node.state as RedisState).client.disconnect();
    const res = await requestCode(node);
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('5');
    expect(res.body).toEqual({ code: 'ERR_SERVICE_UNAVAILABLE', message: 'The service is not available right now.' });
    expect(logs.lines().filter((l) => l.level >= LEVEL.warn)).toMatchObject([
      { level: LEVEL.warn, msg: 'backing store unavailable', store_error: { message: 'Connection is closed.' } },
    ]);
  });

  it.skipIf(MODE !== 'cluster')(
    'answers 503 ERR_SERVICE_UNAVAILABLE with Retry-After when PostgreSQL is lost',
    async () => {
      const node = await start();
      await node.database.close();
      const res = await requestCode(node);
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      expect(res.body.code).toBe('ERR_SERVICE_UNAVAILABLE');
      expect(logs.lines().filter((l) => l.level >= LEVEL.warn)).toMatchObject([
        { level: LEVEL.warn, msg: 'backing store unavailable', store_error: { code: 'CONNECTION_ENDED' } },
      ]);
    },
  );
});
