import { once } from 'node:events';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { afterAnswer, requestBodyOptional } from './routing.js';

const apps: ReturnType<typeof Fastify>[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

/** A promise and what resolves it: the callback under test says it ran. */
function signal() {
  let done: () => void = () => {};
  const ran = new Promise<void>((resolve) => {
    done = resolve;
  });
  return { ran, done };
}

describe('afterAnswer', () => {
  it('runs once the answer has been handed to the connection, not when the handler returns', async () => {
    const seen: { finishedAtReturn?: boolean; finishedInFn?: boolean; calls: number } = { calls: 0 };
    const app = Fastify();
    apps.push(app);
    const { ran, done } = signal();
    app.get('/', async (_req, reply) => {
      afterAnswer(reply, () => {
        seen.calls++;
        seen.finishedInFn = reply.raw.writableFinished;
        done();
      });
      seen.finishedAtReturn = reply.raw.writableFinished;
      return { ok: true };
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    const res = await fetch(url);
    expect(await res.json()).toEqual({ ok: true });
    // The close that follows the last byte may come a turn after the client has it: wait for the call.
    await ran;
    expect(seen).toEqual({ finishedAtReturn: false, finishedInFn: true, calls: 1 });
  });

  it('runs at once when the connection is already gone', async () => {
    let calls = 0;
    const seen: { destroyedAtRegistration?: boolean; callsAtRegistration?: number } = {};
    const app = Fastify();
    apps.push(app);
    const { ran, done } = signal();
    const { ran: handlerDone, done: handled } = signal();
    app.get('/', async (req, reply) => {
      const socket = req.raw.socket;
      const closed = once(socket, 'close');
      socket.destroy();
      await closed;
      seen.destroyedAtRegistration = reply.raw.destroyed;
      afterAnswer(reply, () => {
        calls++;
        done();
      });
      seen.callsAtRegistration = calls;
      handled();
      return { ok: true };
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    await expect(fetch(url)).rejects.toThrow();
    await handlerDone;
    expect(seen).toEqual({ destroyedAtRegistration: true, callsAtRegistration: 1 });
    await ran;
    expect(calls).toBe(1);
  });
});

describe('requestBodyOptional (the OpenAPI document)', () => {
  const body = (schema: object) => ({ requestBody: { required: true, content: { 'application/json': { schema } } } });

  it('marks the body of a route that takes no input (x-empty-body) not required, and leaves the others', () => {
    const openapiObject = {
      paths: {
        '/v1/notifications/read-all': { post: body({ type: 'object', 'x-empty-body': true }) },
        '/v1/authentication/lookup': { post: body({ type: 'object', required: ['username'] }) },
        '/v1/health': { get: { responses: {} } },
      },
    };
    // Only the parts the transform reads: the operations lack their responses.
    const doc = requestBodyOptional({ openapiObject } as never) as unknown as typeof openapiObject;
    expect(doc.paths['/v1/notifications/read-all'].post.requestBody.required).toBe(false);
    expect(doc.paths['/v1/authentication/lookup'].post.requestBody.required).toBe(true);
    expect(doc.paths['/v1/health'].get).toEqual({ responses: {} });
  });
});
