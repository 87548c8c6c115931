import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { afterAnswer } from './routing.js';

const apps: ReturnType<typeof Fastify>[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

describe('afterAnswer', () => {
  it('runs once the answer has been handed to the connection, not when the handler returns', async () => {
    const seen: { finishedAtReturn?: boolean; finishedInFn?: boolean; calls: number } = { calls: 0 };
    const app = Fastify();
    apps.push(app);
    app.get('/', async (_req, reply) => {
      afterAnswer(reply, () => {
        seen.calls++;
        seen.finishedInFn = reply.raw.writableFinished;
      });
      seen.finishedAtReturn = reply.raw.writableFinished;
      return { ok: true };
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    const res = await fetch(url);
    expect(await res.json()).toEqual({ ok: true });
    // The close that follows the last byte may come a turn after the client has it.
    await new Promise((r) => setTimeout(r, 50));
    expect(seen).toEqual({ finishedAtReturn: false, finishedInFn: true, calls: 1 });
  });

  it('runs at once when the connection is already gone', async () => {
    let calls = 0;
    const app = Fastify();
    apps.push(app);
    let done: () => void = () => {};
    const ran = new Promise<void>((r) => {
      done = r;
    });
    app.get('/', async (req, reply) => {
      req.raw.socket.destroy();
      await new Promise((r) => setTimeout(r, 20));
      expect(reply.raw.destroyed).toBe(true);
      afterAnswer(reply, () => {
        calls++;
        done();
      });
      expect(calls).toBe(1);
      return { ok: true };
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    await expect(fetch(url)).rejects.toThrow();
    await ran;
    expect(calls).toBe(1);
  });
});
