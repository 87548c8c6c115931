import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { type CapturedLog, captureLog, LEVEL } from './support/logs.js';

describeApp('request logging', () => {
  let app: TestApp;
  let logs: CapturedLog;
  beforeAll(async () => {
    logs = captureLog('debug');
    app = await startApp({ logger: logs.log });
  });
  afterAll(() => app.close());

  /** The levels of the request lines (incoming, completed) logged for `url`. */
  const requestLevels = (url: string) => {
    const ids = new Set(
      logs
        .lines()
        .filter((l) => (l.req as { url?: string } | undefined)?.url === url)
        .map((l) => l.reqId),
    );
    return logs
      .lines()
      .filter((l) => ids.has(l.reqId) && (l.msg === 'incoming request' || l.msg === 'request completed'))
      .map((l) => l.level);
  };

  it('logs the health probe’s requests at debug, and other requests at info', async () => {
    expect((await fetch(`${app.url}/v1/health`)).status).toBe(200);
    expect((await fetch(`${app.url}/openapi.json`)).status).toBe(200);
    expect(requestLevels('/v1/health')).toEqual([LEVEL.debug, LEVEL.debug]);
    expect(requestLevels('/openapi.json')).toEqual([LEVEL.info, LEVEL.info]);
  });
});
