import { EmptyBody, VmInputPayload } from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { installErrorHandler } from './errors.js';
import {
  compilePayload,
  INSTANT_MAX_MS,
  INSTANT_MIN_MS,
  installJsonBodyParser,
  isStorableInstant,
  refuseUndeclaredQuery,
  validatorCompiler,
} from './validation.js';

describe('isStorableInstant (the date-time format of inputs)', () => {
  it('accepts RFC 3339 instants from 1970 through 9999 (UTC), offsets included', () => {
    for (const text of [
      '1970-01-01T00:00:00Z',
      '9999-12-31T23:59:59.999Z',
      '2024-02-29T12:00:00+05:30',
      '1970-01-01T01:00:00+01:00',
      '2024-01-01t00:00:00z',
    ])
      expect(isStorableInstant(text), text).toBe(true);
    expect([new Date(INSTANT_MIN_MS).toISOString(), new Date(INSTANT_MAX_MS).toISOString()]).toEqual([
      '1970-01-01T00:00:00.000Z',
      '9999-12-31T23:59:59.999Z',
    ]);
  });

  it('refuses what no Date or column holds, and what is not RFC 3339', () => {
    for (const text of [
      '2016-12-31T23:59:60Z',
      '2024-01-01T00:00:00+01',
      '0000-01-01T00:00:00Z',
      '1969-12-31T23:59:59.999Z',
      '1970-01-01T00:59:59+01:00',
      '9999-12-31T23:59:59-00:01',
      '2023-02-29T00:00:00Z',
      '2024-01-01',
      '2024-01-01T00:00:00',
      'now',
    ])
      expect(isStorableInstant(text), text).toBe(false);
  });
});

describe('compilePayload (socket payloads)', () => {
  const valid = compilePayload(VmInputPayload);
  const input = (more: object) => ({ chat_id: 1, ...more });

  it('refuses a NUL or a lone surrogate anywhere, as request bodies do, and names where', () => {
    expect(valid(input({ kind: 'text', text: 'hello 😀' }))).toBe(true);
    for (const text of ['a\u0000b', '\ud800', 'a\udfffb']) {
      expect(valid(input({ kind: 'text', text })), JSON.stringify(text)).toBe(false);
      expect(valid.errors).toEqual([expect.objectContaining({ instancePath: '/text', keyword: 'text' })]);
    }
  });

  it('refuses a navigate URL that the pattern passes but no browser parses (format http-url)', () => {
    for (const url of ['http://example.com/a?b#c', 'https://[::1]:8080/', 'HTTP://EXAMPLE.COM'])
      expect(valid(input({ kind: 'navigate', url })), url).toBe(true);
    for (const url of ['http://[', 'http://%zz/', 'https://a:99999/', 'file:///etc/passwd'])
      expect(valid(input({ kind: 'navigate', url })), url).toBe(false);
  });
});

describe('refuseUndeclaredQuery (unknown query parameters)', () => {
  const app = Fastify();
  app.setValidatorCompiler(validatorCompiler);
  installErrorHandler(app);
  refuseUndeclaredQuery(app);
  const shared = { params: Type.Object({ id: Type.Integer() }) };
  app.get('/none', async () => ({ ok: true }));
  app.get('/shared/:id', { schema: shared }, async () => ({ ok: true }));
  app.get(
    '/declared',
    { schema: { querystring: Type.Object({ limit: Type.Optional(Type.Integer()) }) } },
    async () => ({
      ok: true,
    }),
  );
  app.get('/page', { schema: { hide: true } }, async () => ({ ok: true }));
  afterAll(() => app.close());

  it('answers any query parameter on a route that declares none 400 ERR_VALIDATION naming it', async () => {
    for (const url of ['/none?foo=1', '/shared/1?foo', '/none?a=1&foo=2']) {
      const res = await app.inject({ url });
      expect(res.statusCode, url).toBe(400);
      expect(res.json(), url).toMatchObject({
        code: 'ERR_VALIDATION',
        errors: [{ path: expect.stringMatching(/^querystring\/(foo|a)$/), message: 'is not a known field' }],
      });
    }
    expect((await app.inject({ url: '/none' })).statusCode).toBe(200);
    expect((await app.inject({ url: '/shared/1?' })).statusCode).toBe(200);
    expect(shared).not.toHaveProperty('querystring');
  });

  it('leaves a declared query string to its schema, and pages hidden from the API document alone', async () => {
    expect((await app.inject({ url: '/declared?limit=5' })).statusCode).toBe(200);
    expect((await app.inject({ url: '/page?utm_source=x' })).statusCode).toBe(200);
  });
});

describe('validatorCompiler (routes that take no input, EmptyBody)', () => {
  const app = Fastify();
  app.setValidatorCompiler(validatorCompiler);
  installErrorHandler(app);
  installJsonBodyParser(app);
  app.post('/none', { schema: { body: EmptyBody } }, async () => ({ ok: true }));
  afterAll(() => app.close());
  const post = (payload?: string, type?: string) =>
    app.inject({ method: 'POST', url: '/none', payload, headers: type ? { 'content-type': type } : {} });

  it('accepts no body, a zero-length JSON body and {}', async () => {
    expect((await post()).statusCode).toBe(200);
    expect((await post('', 'application/json')).statusCode).toBe(200);
    expect((await post('{}', 'application/json')).statusCode).toBe(200);
  });

  it('answers a JSON null, or any body but {}, 400 ERR_VALIDATION', async () => {
    // Fastify hands the validator null for a request without a body as for this one.
    const refused = await post('null', 'application/json');
    expect([refused.statusCode, refused.json()]).toEqual([
      400,
      expect.objectContaining({ code: 'ERR_VALIDATION', errors: [{ path: 'body', message: 'must be object' }] }),
    ]);
    for (const payload of ['[]', '0', '""', '{"x":1}']) {
      const res = await post(payload, 'application/json');
      expect([payload, res.statusCode, res.json().code]).toEqual([payload, 400, 'ERR_VALIDATION']);
    }
  });
});
